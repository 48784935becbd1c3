#!/usr/bin/env python3
"""What a running gpudash costs in CPU: the sampler's three loops, and the whole process beside them.

Usage: python3 tests/gpu/sampler_cost.py PID SECONDS INTERVAL_MS GPUS [LABEL]

Over SECONDS, while the server samples every INTERVAL_MS, reads
  - each thread's CPU time from /proc/PID/task/TID/schedstat (ns; /proc/.../stat's clock ticks where
    schedstat is missing), polled every 0.5 s, so a thread that starts or ends inside the window counts
    for what it ran while it was seen;
  - the whole process's utime + stime from /proc/PID/stat at both ends (clock ticks, 10 ms each as a
    rule; it includes threads that ended inside the window).

The sampler's figure is the sum of its three loops, and only those:
  gpudash-sampler   the fast loop: the cheap NVML gauges of every GPU each interval, the history hand-off
                    and the publication to viewers;
  gpudash-details   the slow loop, every 2 s: health, PCIe traffic, energy, compute processes and their
                    /proc details;
  gpudash-gpm       the GPM loop: SM and tensor activity.
Every other thread is left out of that sum (the history writer, alerts, XID watcher, usage, audit,
workload identity, the async runtime's HTTP and WebSocket work, the main thread, the NVIDIA driver's
thread); each is listed by name (its 15-character comm) with its CPU and share of the process.

Prints the loops per GPU per second at this interval, the whole process's CPU in ms per second of wall
time and per GPU, and every thread's share. Nothing is scaled: a figure at the default 1 s comes from a
server running at 1 s. The last line, `figures: key=value ...` (µs of CPU per GPU per second unless
named otherwise), is what tests/gpu/h200.sh judges against its goals. Exits 1 when the loops' threads
cannot be found or measured (the figure would be missing, not zero).
"""
import os
import sys
import time

# Thread names as set in the source (std::thread::Builder::name), each matched by the first 15 characters,
# all the kernel keeps in comm; a renamed thread is listed under each of its names.
LOOPS = (
    ("fast loop", ("gpudash-sampler",), "NVML gauges each interval, history hand-off, publication"),
    ("slow loop", ("gpudash-details",), "every 2 s: health, PCIe, energy, processes"),
    ("GPM loop", ("gpudash-gpm",), "SM/tensor activity"),
)
OTHERS = (
    (("gpudash-recorder", "gpudash-record"), "history writer (SQLite, a batch every 500 ms)"),
    (("gpudash-xid",), "XID event watcher"),
    (("gpudash-alerts",), "alert rules, every tick"),
    (("gpudash-alerts-db", "gpudash-alertdb"), "alerts' SQLite writer"),
    (("gpudash-usage",), "usage accounting"),
    (("gpudash-usage-db", "gpudash-usagedb"), "usage's SQLite writer"),
    (("gpudash-audit",), "audit log's SQLite writer"),
    (("gpudash-engine",), "workload identity: container engine"),
    (("gpudash-pods",), "workload identity: Kubernetes pods"),
    (("gpudash-nccl-init", "gpudash-nccl"), "Lab: NCCL start"),
    (("tokio-rt-worker", "tokio-runtime-worker"), "async runtime: HTTP, WebSockets, timers"),
    (("gpudash",), "main thread (and any unnamed thread)"),
)
PREFIXES = (("lab-gpu", "Lab worker"), ("lab-worker", "Lab worker process' pipe"),
            ("cuda", "NVIDIA driver's thread (NVML, CUDA)"))
POLL_S = 0.5


def matches(comm, names):
    return any(comm == name[:15] for name in names)


def role(comm):
    """(what the thread does, in the loops' sum)."""
    for what, names, _ in LOOPS:
        if matches(comm, names):
            return what, True
    for names, what in OTHERS:
        if matches(comm, names):
            return what, False
    for prefix, what in PREFIXES:
        if comm.startswith(prefix):
            return what, False
    if comm.startswith("gpudash-"):
        return ("a SQLite writer" if "db" in comm[8:] else "a gpudash thread not described here"), False
    return "not a thread gpudash names", False


def thread_cpu_ns(pid):
    """{thread id: (name, CPU ns)} over the process's threads."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{tid}"
        try:
            name = open(f"{base}/comm").read().strip()
            try:
                ns = int(open(f"{base}/schedstat").read().split()[0])
            except (OSError, ValueError, IndexError):
                fields = open(f"{base}/stat").read().rsplit(")", 1)[1].split()
                ns = (int(fields[11]) + int(fields[12])) * 1_000_000_000 // ticks  # utime + stime
        except (OSError, ValueError, IndexError):
            continue  # the thread ended in between
        out[tid] = (name, ns)
    return out


def process_ticks(pid):
    """utime + stime of the whole process (every thread, ended ones included), in clock ticks."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def measure(pid, seconds):
    """(elapsed s, {name: [CPU ns, threads]}, process CPU ns from /proc/PID/stat, threads that ended)."""
    first = thread_cpu_ns(pid)
    ticks0, t0 = process_ticks(pid), time.monotonic()
    seen = {tid: [name, ns, ns] for tid, (name, ns) in first.items()}  # name, at first sight, last
    now = first
    while True:
        left = seconds - (time.monotonic() - t0)
        if left <= 0:
            break
        time.sleep(min(POLL_S, left))  # polling inside a measuring window, not a wait for a state
        now = thread_cpu_ns(pid)
        for tid, (name, ns) in now.items():
            if tid in seen:
                seen[tid][0], seen[tid][2] = name, ns
            else:
                seen[tid] = [name, 0, ns]  # born inside the window: all of its CPU is
    ticks1, elapsed = process_ticks(pid), time.monotonic() - t0
    ended = [tid for tid in seen if tid not in now]
    spent = {}
    for name, start, last in seen.values():
        entry = spent.setdefault(name, [0, 0])
        entry[0] += last - start
        entry[1] += 1
    process_ns = (ticks1 - ticks0) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    return elapsed, spent, process_ns, len(ended)


def main():
    if len(sys.argv) not in (5, 6):
        print(__doc__)
        sys.exit(2)
    pid, seconds, interval_ms, gpus = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    label = sys.argv[5] if len(sys.argv) == 6 else ""
    try:
        elapsed, spent, process_ns, ended = measure(pid, seconds)
    except OSError as e:
        print(f"sampler cost: FAIL, process {pid} could not be read: {e}")
        sys.exit(1)
    per_s = {name: ns / 1e3 / elapsed for name, (ns, _) in spent.items()}  # µs CPU per second of wall time
    loops = {}
    for what, names, _ in LOOPS:
        loops[what] = sum(v for name, v in per_s.items() if matches(name, names)) / gpus
    missing = [names[0] for what, names, _ in LOOPS[:2] if not any(matches(n, names) for n in spent)]
    if missing:
        print(f"sampler cost: FAIL, threads {missing} not found in /proc/{pid}/task (names seen: {sorted(spent)})")
        sys.exit(1)
    if loops["fast loop"] <= 0 or loops["slow loop"] <= 0:
        print(f"sampler cost: FAIL, no CPU time measured (fast {loops['fast loop']}, slow {loops['slow loop']}): "
              "the loops did not run")
        sys.exit(1)
    loop_sum = sum(loops.values())
    threads_us = sum(per_s.values())
    process_us = process_ns / 1e3 / elapsed
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    samples_per_s = 1000 / interval_ms

    print(f"CPU of gpudash PID {pid}{f' ({label})' if label else ''}: {elapsed:.1f} s, {gpus} GPU(s), "
          f"interval {interval_ms:.0f} ms")
    print("  the sampler's three loops (per-thread schedstat), µs CPU per GPU per second:")
    for what, names, meaning in LOOPS:
        extra = f"; {loops[what] / samples_per_s:.1f} µs per GPU per sample" if what == "fast loop" else ""
        print(f"    {what + ' (' + names[0] + ')':<30} {loops[what]:9.1f}  ({meaning}{extra})")
    print(f"    {'sum of the three loops':<30} {loop_sum:9.1f}  = {loop_sum / 1e3:.2f} ms per GPU per second, "
          f"{loop_sum * gpus / 1e4:.3f}% of one core for {gpus} GPU(s)")
    print(f"  whole process, same window: {process_us / 1e3:.2f} ms CPU per second of wall time = "
          f"{process_us / gpus / 1e3:.2f} ms per GPU per second")
    print(f"    (utime+stime of /proc/{pid}/stat, ±{2 * tick_ms / elapsed:.2f} ms per second for its "
          f"{tick_ms:.0f} ms ticks; every thread's schedstat summed: {threads_us / 1e3:.2f} ms per second)")
    share = 100 * loop_sum * gpus / threads_us if threads_us > 0 else float("nan")
    print(f"  the loop sum covers gpudash-sampler, gpudash-details and gpudash-gpm: {share:.1f}% of the process's "
          f"CPU;\n  it leaves out every other thread ({100 - share:.1f}%). Every thread by name (×count), µs CPU per "
          f"second (all GPUs), share of the process:")
    for name, us in sorted(per_s.items(), key=lambda item: -item[1]):
        what, in_sum = role(name)
        count = spent[name][1]
        label_name = f"{name} ×{count}" if count > 1 else name
        print(f"    {label_name:<20} {us:9.1f}  {100 * us / threads_us if threads_us else 0:5.1f}%  "
              f"{'in the sum' if in_sum else 'left out  '}  {what}")
    if ended:
        print(f"  {ended} thread(s) ended inside the window: counted up to the last poll ({POLL_S} s apart); "
              "/proc/PID/stat counts them whole")
    figures = dict(interval_ms=f"{interval_ms:.0f}", gpus=gpus, seconds=f"{elapsed:.1f}", loops_us=f"{loop_sum:.1f}",
                   fast_us=f"{loops['fast loop']:.1f}", slow_us=f"{loops['slow loop']:.1f}",
                   gpm_us=f"{loops['GPM loop']:.1f}", process_us=f"{process_us / gpus:.1f}",
                   process_error_us=f"{2 * tick_ms * 1e3 / elapsed / gpus:.1f}",
                   threads_us=f"{threads_us / gpus:.1f}", left_out_us=f"{(threads_us - loop_sum * gpus) / gpus:.1f}")
    print("figures: " + " ".join(f"{key}={value}" for key, value in figures.items()))


if __name__ == "__main__":
    main()
