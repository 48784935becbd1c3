#!/usr/bin/env python3
"""Writes target/symbol-order.txt: the functions an idle dashboard runs, for the linker to put first.

Usage (root, on Linux; `packaging/symbol-order.sh` runs it):
    symbol_order.py PID BINARY OUT
    symbol_order.py --check BINARY ORDER   how much of ORDER a dist BINARY has (exit 1 under 90%)

PID runs BINARY (built with the `dist` profile, which keeps function names), started from a copy
that was out of the page cache while the block device's read-ahead was 0, so a page of its code is
resident only if the program ran something on it. Writes to OUT every function that overlaps a
resident code page, in address order (callers stay near their callees), then the functions that
only real GPUs run (GPU_ONLY: NVML's side of telemetry, the Lab's start on hardware), which the
simulated run that measures this does not reach. Prints what it found.
"""
import os
import struct
import subprocess
import sys

PAGE = 4096


def resident_pages(pid, exe):
    """Page numbers (from the start of the binary's address range) resident in PID's mappings of exe,
    and a line per mapping."""
    maps = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == exe:
                start, end = (int(x, 16) for x in fields[0].split("-"))
                maps.append((start, end, fields[1], int(fields[2], 16)))
    if not maps:
        sys.exit(f"{exe} is not mapped in process {pid}")
    base = next(start for start, _, _, offset in maps if offset == 0)
    present, lines = set(), []
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for start, end, perms, _ in maps:
            pages = (end - start) // PAGE
            pagemap.seek(start // PAGE * 8)
            entries = struct.unpack(f"<{pages}Q", pagemap.read(pages * 8))
            here = [(start - base) // PAGE + i for i, entry in enumerate(entries) if entry >> 63]
            present.update(here)
            lines.append(f"  {perms} mapping: {len(here) * 4} of {pages * 4} kB resident")
    return present, lines


def functions(binary):
    """(address, size, mangled name, demangled name) of every function with a size."""
    def listing(*flags):
        out = subprocess.run(["nm", "-S", "--defined-only", *flags, binary], capture_output=True, text=True, check=True)
        return out.stdout.splitlines()

    found = []
    for raw, readable in zip(listing(), listing("-C"), strict=True):
        fields = raw.split()
        if len(fields) == 4 and fields[2] in "tTwW" and int(fields[1], 16) > 0:
            found.append((int(fields[0], 16), int(fields[1], 16), fields[3], readable.split(None, 3)[3]))
    found.sort()
    return found


# What a server on real GPUs runs and the simulated one does not: the NVML side of telemetry, and
# the Lab's start on hardware (the library check in a child process, one idle worker per GPU).
GPU_ONLY = ("telemetry::", "nvml", "libloading", "lab::setup", "lab::worker",
            "lab::executor", "lab::cuda::probe", "HardwareProbe", "std::process::", "sys::process")


def gpu_only(readable):
    low = readable.lower()
    return "simulator" not in low and any(part.lower() in low for part in GPU_ONLY)


def check(binary, order):
    """Says how many of the listed functions the build has and whether they lead its code."""
    listed = [line.strip() for line in open(order) if line.strip()]
    every = functions(binary)
    names = {f[2] for f in every}
    found = sum(name in names for name in listed)
    share = found / len(listed) if listed else 0.0
    # Laid out as listed: the leading functions of the code are listed ones (the linker keeps
    # the file's order among those it found).
    wanted = set(listed)
    lead = every[: min(found, len(every))]
    leading = sum(f[2] in wanted for f in lead) / len(lead) if lead else 0.0
    print(f"{order}: {found} of {len(listed)} listed functions are in {binary} ({share:.0%});"
          f" {leading:.0%} of its first {len(lead)} functions are listed ones")
    if share < 0.9:
        print("stale: run packaging/symbol-order.sh (as root) again and rebuild with GPUDASH_SYMBOL_ORDER")
        return 1
    return 0


def main():
    if len(sys.argv) != 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    if sys.argv[1] == "--check":
        return check(sys.argv[2], sys.argv[3])
    pid, binary, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    present, lines = resident_pages(pid, os.readlink(f"/proc/{pid}/exe"))
    print("\n".join(lines))
    every = functions(binary)
    if not every:
        sys.exit(f"{binary} has no function names: build it with the dist profile (strip = \"debuginfo\")")
    ran = [f for f in every if any(p in present for p in range(f[0] // PAGE, (f[0] + f[1] - 1) // PAGE + 1))]
    listed = {f[2] for f in ran}
    real = [f for f in every if f[2] not in listed and gpu_only(f[3])]
    kib = lambda fs: sum(f[1] for f in fs) / 1024
    print(f"  functions: {len(every)} ({kib(every):.0f} KiB); on resident pages: {len(ran)} ({kib(ran):.0f} KiB);"
          f" added for real GPUs: {len(real)} ({kib(real):.0f} KiB)")
    with open(out, "w") as f:
        f.write("".join(name + "\n" for _, _, name, _ in ran + real))


if __name__ == "__main__":
    sys.exit(main())
