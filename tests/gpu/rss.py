#!/usr/bin/env python3
"""What holds a running gpudash's resident memory, from /proc/PID/smaps.

Usage: python3 tests/gpu/rss.py PID

Groups every mapping's Rss by what it is: the gpudash binary, NVML (libnvidia-ml), other NVIDIA
libraries (libcuda, once the lab ran), the C library and the rest of the shared libraries, the
heap and anonymous memory (malloc's arenas, SQLite's page caches, the rings, tokio), and thread
stacks (anonymous mappings sized like a stack with a guard page are not told apart by smaps, so
they count as anonymous). Prints the total beside VmRSS from /proc/PID/status, the threads by name
(each runtime worker keeps its own malloc arena), and exits 1 when the process cannot be read.
"""
import collections
import os
import sys


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


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    pid = sys.argv[1]
    try:
        anonymous = []
        parts = groups(pid, anonymous)
        status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
        threads = collections.Counter(open(f"/proc/{pid}/task/{t}/comm").read().strip()
                                      for t in os.listdir(f"/proc/{pid}/task"))
    except OSError as e:
        print(f"rss.py: cannot read process {pid}: {e}")
        return 1
    total = sum(parts.values())
    print(f"resident memory of PID {pid}: {total / 1024:.1f} MiB in smaps (VmRSS {status['VmRSS'].strip()}, "
          f"{status['Threads'].strip()} threads)")
    for name, kib in parts.most_common():
        print(f"  {name:<52} {kib / 1024:8.1f} MiB")
    # Sizes tell the kinds apart: glibc's per-thread arenas reserve 64 MiB (65536 KiB in all, mapped in
    # pieces), thread stacks 2 or 8 MiB, the rest is malloc's large blocks and libraries' own mappings.
    big = sorted(anonymous, key=lambda m: -m[1])[:8]
    print("  largest anonymous mappings (resident of size): "
          + ", ".join(f"{rss / 1024:.1f} of {size / 1024:.1f} MiB" for size, rss in big))
    print("  threads: " + ", ".join(f"{n} ×{c}" if c > 1 else n for n, c in sorted(threads.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
