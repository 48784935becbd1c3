#!/usr/bin/env python3
"""What holds a running gpudash's resident memory, and which build it is.

Usage: python3 tests/gpu/rss.py PID [--label TEXT] [--against EARLIER_OUTPUT]

Prints, each in MiB with one decimal:
  - the build: the binary's path (/proc/PID/exe), its size, and whether it is stripped (its ELF has no
    .symtab section; read here, `file` may be missing) or keeps its symbol table (the shipped dist build);
  - VmRSS, RssAnon, RssFile, RssShmem from /proc/PID/status (VmRSS = the three others);
  - Pss from /proc/PID/smaps_rollup (each shared page divided by the processes that map it);
  - the process's cgroup v2 memory.current (/proc/PID/cgroup, then memory.current under the cgroup2 mount),
    labelled as the cgroup's and shared with N other processes when gpudash is not alone in it, or
    "not available: reason";
  - the per-group breakdown of /proc/PID/smaps (the binary, NVML, other NVIDIA libraries, other shared
    libraries, heap, anonymous mappings: malloc arenas, caches, thread stacks), the largest anonymous
    mappings, and the threads by name.
  - with --against, the change of each figure since an earlier output of this script (its `figures:` line).
The last line, `figures: key=value ...` (kB), is what tests/gpu/h200.sh judges against its goals.
Exits 1 when the process cannot be read.
"""
import argparse
import collections
import os
import struct
import sys

STATUS_FIELDS = (
    ("VmRSS", "vmrss_kib", "all resident pages = RssAnon + RssFile + RssShmem"),
    ("RssAnon", "rss_anon_kib", "anonymous: heap, malloc arenas, thread stacks, NVML's own data"),
    ("RssFile", "rss_file_kib", "file-backed: resident pages of the binary and the shared libraries"),
    ("RssShmem", "rss_shmem_kib", "shared memory (shmem, tmpfs)"),
)


def mib(kib):
    return f"{kib / 1024:.1f} MiB"


def groups(pid, anonymous=None):
    """Rss in KiB per group; `anonymous`, when a list, gets (size KiB, Rss KiB) of each anonymous mapping."""
    out = collections.Counter()
    name = ""
    size = 0
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if not fields:
                continue
            if "-" in fields[0] and len(fields) >= 5 and not fields[0].endswith(":"):
                path = fields[5] if len(fields) > 5 else ""
                base = os.path.basename(path)
                if base.startswith("gpudash"):
                    name = "gpudash binary"
                elif base.startswith("libnvidia-ml"):
                    name = "NVML (libnvidia-ml)"
                elif base.startswith(("libcuda", "libnvidia", "libcublas", "libnvrtc", "libnccl")):
                    name = "other NVIDIA libraries"
                elif path == "[heap]":
                    name = "heap"
                elif path == "[stack]":
                    name = "main thread stack"
                elif path.startswith("["):
                    name = f"kernel {path}"
                elif path:
                    name = "other shared libraries"
                else:
                    name = "anonymous (malloc arenas, caches, thread stacks)"
            elif fields[0] == "Size:":
                size = int(fields[1])
            elif fields[0] == "Rss:":
                out[name] += int(fields[1])
                if anonymous is not None and name.startswith("anonymous") and int(fields[1]) > 0:
                    anonymous.append((size, int(fields[1])))
    return out


def kib_fields(path, keys):
    """{key: kB} for the `Key:   N kB` lines of a /proc file."""
    out = {}
    with open(path) as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in keys and rest.split():
                out[key] = int(rest.split()[0])
    return out


def elf_sections(path):
    """[(name, type)] of an ELF file's sections, or None when it is not ELF."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF":
            return None
        wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
        if wide:
            shoff, = struct.unpack(order + "Q", head[0x28:0x30])
            shentsize, shnum, shstrndx = struct.unpack(order + "HHH", head[0x3A:0x40])
        else:
            shoff, = struct.unpack(order + "I", head[0x20:0x24])
            shentsize, shnum, shstrndx = struct.unpack(order + "HHH", head[0x2E:0x34])
        if shoff == 0:
            return []

        def header(i):
            f.seek(shoff + i * shentsize)
            raw = f.read(shentsize)
            name, kind = struct.unpack(order + "II", raw[:8])
            if wide:
                offset, size = struct.unpack(order + "QQ", raw[0x18:0x28])
            else:
                offset, size = struct.unpack(order + "II", raw[0x10:0x18])
            return name, kind, offset, size

        if shnum == 0:  # more than 0xff00 sections: the count is in section 0's size
            shnum = header(0)[3]
        if shstrndx == 0xFFFF:
            shstrndx = header(0)[3]
        headers = [header(i) for i in range(shnum)]
        _, _, names_at, names_size = headers[shstrndx]
        f.seek(names_at)
        names = f.read(names_size)
        return [(names[n:names.index(b"\0", n)].decode(errors="replace"), kind) for n, kind, _, _ in headers]


def build(pid):
    """(one line naming the build, stripped: True, False or None when unknown)."""
    try:
        path = os.readlink(f"/proc/{pid}/exe")
        size = os.stat(f"/proc/{pid}/exe").st_size
    except OSError as e:
        return f"not readable ({e})", None
    try:
        sections = elf_sections(f"/proc/{pid}/exe")
    except (OSError, struct.error, ValueError, IndexError) as e:
        return f"{path}, {size} bytes, not readable as ELF ({e})", None
    if sections is None:
        return f"{path}, {size} bytes, not an ELF file", None
    stripped = not any(kind == 2 for _, kind in sections)  # SHT_SYMTAB
    debug = any(name.startswith(".debug_") for name, _ in sections)
    kind = ("stripped (no .symtab section)" if stripped else
            "not stripped (.symtab kept; the shipped dist build keeps it)")
    return f"{path}, {size} bytes, {kind}, {'with' if debug else 'no'} debug info", stripped


def cgroup_memory(pid):
    """(kB or None, text): the cgroup v2 memory.current of the process's cgroup, or why there is none."""
    try:
        lines = open(f"/proc/{pid}/cgroup").read().splitlines()
    except OSError as e:
        return None, f"not available: /proc/{pid}/cgroup unreadable ({e})"
    unified = [line.split(":", 2)[2] for line in lines if line.startswith("0::")]
    v1 = [line.split(":", 2)[2] for line in lines if line.split(":", 2)[1:2] and
          "memory" in line.split(":", 2)[1].split(",")]
    if not unified:
        return None, "not available: the process is in no cgroup v2 hierarchy" + (
            f" (cgroup v1 memory controller: {v1[0]})" if v1 else "")
    path = unified[0]
    mount = root = None
    try:
        for line in open("/proc/self/mountinfo"):
            left, _, right = line.partition(" - ")
            if right.split()[:1] == ["cgroup2"]:
                root, mount = left.split()[3], left.split()[4]
                break
    except OSError as e:
        return None, f"not available: /proc/self/mountinfo unreadable ({e})"
    if mount is None:
        return None, f"not available: no cgroup2 file system is mounted here (the process's cgroup v2 path is {path})"
    relative = path[len(root):] if root != "/" and (path == root or path.startswith(root + "/")) else path
    directory = os.path.join(mount, relative.lstrip("/"))
    current = os.path.join(directory, "memory.current")
    try:
        kib = int(open(current).read()) // 1024
    except OSError as e:
        why = "the root cgroup has none, or the memory controller is off there" if relative in ("", "/") else \
            "the memory controller is not enabled for this cgroup"
        if v1:
            why += f"; memory is accounted by cgroup v1 here, in {v1[0]}"
        return None, f"not available: {current}: {e.strerror} ({why})"
    pids = set()
    for top, _, files in os.walk(directory):
        if "cgroup.procs" in files:
            try:
                pids.update(open(os.path.join(top, "cgroup.procs")).read().split())
            except OSError:
                pass
    others = len(pids - {str(pid)})
    if others:
        return kib, (f"the cgroup's, shared with {others} other process{'es' if others != 1 else ''} ({current}: "
                     "their anonymous memory and the page cache charged to it, not gpudash's alone)")
    return kib, f"{current}: gpudash is the only process in it (its anonymous memory and the page cache charged to it)"


def figures_of(path):
    """The `figures:` line of an earlier output, as {key: int}."""
    out = {}
    for line in open(path):
        if line.startswith("figures:"):
            for item in line.split()[1:]:
                key, _, value = item.partition("=")
                if value.lstrip("-").isdigit():
                    out[key] = int(value)
    return out


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pid", type=int)
    parser.add_argument("--label", help="what state the process is in (e.g. 'idle, no page open')")
    parser.add_argument("--against", metavar="EARLIER_OUTPUT", help="an earlier output of this script to compare with")
    options = parser.parse_args(argv[1:])
    pid, label, against = options.pid, options.label, options.against
    try:
        anonymous = []
        parts = groups(pid, anonymous)
        status = kib_fields(f"/proc/{pid}/status", {key for key, _, _ in STATUS_FIELDS})
        threads_line = [line for line in open(f"/proc/{pid}/status") if line.startswith("Threads:")]
        threads = collections.Counter(open(f"/proc/{pid}/task/{t}/comm").read().strip()
                                      for t in os.listdir(f"/proc/{pid}/task"))
    except OSError as e:
        print(f"rss.py: cannot read process {pid}: {e}")
        return 1
    try:
        rollup = kib_fields(f"/proc/{pid}/smaps_rollup", {"Pss", "Pss_Anon", "Pss_File", "Pss_Shmem"})
    except OSError as e:
        rollup, rollup_error = {}, str(e)
    what, stripped = build(pid)
    cgroup_kib, cgroup_text = cgroup_memory(pid)

    print(f"resident memory of PID {pid}{f' ({label})' if label else ''}, "
          f"{threads_line[0].split()[1] if threads_line else '?'} threads")
    print(f"  build: {what}")
    figures = {}
    for key, short, meaning in STATUS_FIELDS:
        if key in status:
            figures[short] = status[key]
            print(f"  {key:<9} {mib(status[key]):>10}  ({status[key]} kB) {meaning}")
        else:
            print(f"  {key:<9} {'not available':>10}  (no {key} line in /proc/{pid}/status: a kernel before 4.5)")
    if "Pss" in rollup:
        figures["pss_kib"] = rollup["Pss"]
        split = ", ".join(f"{k[4:].lower()} {mib(rollup[k])}" for k in ("Pss_Anon", "Pss_File", "Pss_Shmem")
                          if k in rollup)
        print(f"  {'Pss':<9} {mib(rollup['Pss']):>10}  ({rollup['Pss']} kB) smaps_rollup: each page divided by the "
              f"processes that map it{f' ({split})' if split else ''}")
    else:
        print(f"  {'Pss':<9} {'not available':>10}  ({rollup_error if not rollup else 'no Pss line'})")
    if cgroup_kib is not None:
        figures["cgroup_kib"] = cgroup_kib
        print(f"  {'cgroup':<9} {mib(cgroup_kib):>10}  memory.current, {cgroup_text}")
    else:
        print(f"  {'cgroup':<9} {cgroup_text}")
    if against:
        try:
            earlier = figures_of(against)
        except OSError as e:
            earlier = {}
            print(f"  against {against}: not readable ({e})")
        changes = [f"{key.replace('_kib', '')} {(value - earlier[key]) / 1024:+.1f} MiB"
                   for key, value in figures.items() if key in earlier]
        if changes:
            print(f"  change since {os.path.basename(against)}: " + ", ".join(changes))
    total = sum(parts.values())
    print(f"  by mapping (Rss in /proc/{pid}/smaps, {mib(total)} in all):")
    for name, kib in parts.most_common():
        print(f"    {name:<50} {kib / 1024:8.1f} MiB")
    # Sizes tell the kinds apart: glibc's per-thread arenas reserve 64 MiB (65536 KiB in all, mapped in
    # pieces), thread stacks 2 or 8 MiB, the rest is malloc's large blocks and libraries' own mappings.
    big = sorted(anonymous, key=lambda m: -m[1])[:8]
    print("  largest anonymous mappings (resident of size): "
          + ", ".join(f"{rss / 1024:.1f} of {size / 1024:.1f} MiB" for size, rss in big))
    print("  threads: " + ", ".join(f"{n} ×{c}" if c > 1 else n for n, c in sorted(threads.items())))
    figures["stripped"] = -1 if stripped is None else int(stripped)
    print("figures: " + " ".join(f"{key}={value}" for key, value in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
