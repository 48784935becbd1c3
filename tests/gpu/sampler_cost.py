#!/usr/bin/env python3
"""What a running gpudash's sampler costs in CPU, per GPU per second: fast loop, slow loop, sum.

Usage: python3 tests/gpu/sampler_cost.py PID SECONDS INTERVAL_MS GPUS

Reads the CPU time of each of the server's threads (by name) from /proc/PID/task/*/schedstat
(nanoseconds on the CPU; /proc/.../stat's clock ticks where schedstat is missing) at the start and
the end of SECONDS, while the server samples every INTERVAL_MS:

  gpudash-sampler   the fast loop: the cheap NVML gauges of every GPU each interval, the history
                    hand-off and the publication to viewers;
  gpudash-details   the slow loop, every 2 s: health, PCIe traffic, energy, compute processes and
                    their /proc details;
  gpudash-recorder  the history writer (batches every 500 ms), shown apart;
  gpudash-xid       the XID event watcher, shown apart;
  gpudash-alerts    the alert rules, evaluated on every tick, shown apart.

Prints the fast loop, the slow loop and their sum in µs of CPU per GPU per second at this
interval, and the same sum at the default 1 s interval (the fast loop scaled by samples per second;
the slow loop does not depend on the interval). The sum is the sampler's headline figure.
Exits 1 when the threads cannot be found or measured (the figure would be missing, not zero).
"""
import os
import sys
import time

LOOPS = ("gpudash-sampler", "gpudash-details", "gpudash-gpm", "gpudash-recorder", "gpudash-xid", "gpudash-alerts")


def thread_cpu_ns(pid):
    """{(thread id, name): CPU ns} over the process's threads."""
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
        out[(tid, name)] = ns
    return out


def per_name(before, after):
    """{thread name: CPU ns spent in the window}, over the threads alive at both ends (a thread that
    started or ended in between, e.g. a blocking-pool worker, is left out rather than counted whole)."""
    out = {}
    for key, ns in after.items():
        if key in before:
            out[key[1]] = out.get(key[1], 0) + ns - before[key]
    return out


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        sys.exit(2)
    pid, seconds, interval_ms, gpus = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    before, t0 = thread_cpu_ns(pid), time.monotonic()
    time.sleep(seconds)  # a measuring window, not a wait for a state
    after, elapsed = thread_cpu_ns(pid), time.monotonic() - t0
    spent = per_name(before, after)
    missing = [name for name in LOOPS[:2] if name not in spent]
    if missing:
        print(f"sampler cost: FAIL, threads {missing} not found in /proc/{pid}/task (names seen: {sorted(spent)})")
        sys.exit(1)
    per_gpu_s = {name: ns / 1e3 / elapsed / gpus for name, ns in spent.items()}
    fast, slow = per_gpu_s["gpudash-sampler"], per_gpu_s["gpudash-details"]
    gpm = per_gpu_s.get("gpudash-gpm", 0.0)
    if fast <= 0 or slow <= 0:
        print(f"sampler cost: FAIL, no CPU time measured (fast {fast}, slow {slow}): the loops did not run")
        sys.exit(1)
    samples_per_s = 1000 / interval_ms
    fast_per_sample = fast / samples_per_s
    print(f"sampler CPU over {elapsed:.1f} s, {gpus} GPU(s), interval {interval_ms:.0f} ms "
          f"(per-thread CPU from /proc/{pid}/task/*/schedstat):")
    print(f"  fast loop (gpudash-sampler):  {fast:9.1f} µs per GPU per second ({fast_per_sample:.1f} µs per GPU per sample)")
    print(f"  slow loop (gpudash-details):  {slow:9.1f} µs per GPU per second (every 2 s: health, PCIe, energy, processes)")
    print(f"  GPM loop (gpudash-gpm):       {gpm:9.1f} µs per GPU per second (SM/tensor activity, once a second)")
    print(f"  sum, this interval:           {fast + slow + gpm:9.1f} µs per GPU per second = "
          f"{(fast + slow + gpm) * gpus / 1e4:.3f}% of one core for {gpus} GPU(s)")
    print(f"  sum at the default 1 s:       {fast_per_sample + slow + gpm:9.1f} µs per GPU per second "
          f"(fast {fast_per_sample:.1f} + slow {slow:.1f} + GPM {gpm:.1f}) — the headline figure")
    for name in LOOPS[3:]:
        if name in per_gpu_s:
            print(f"  {name + ':':<29} {per_gpu_s[name]:9.1f} µs per GPU per second (not in the sum)")
    others = sum(v for k, v in per_gpu_s.items() if k not in LOOPS)
    print(f"  every other thread alive through the window (HTTP, WebSockets, runtime): {others:.1f} µs per GPU "
          "per second (not in the sum)")


if __name__ == "__main__":
    main()
