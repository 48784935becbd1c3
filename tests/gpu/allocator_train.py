#!/usr/bin/env python3
"""Issue 21 on a real GPU, beside a running gpudash (tests/gpu/allocator.sh does both). Prints PASS/FAIL lines:

(a) a training loop with the map shared: the API's totals vs memory_snapshot() computed in the job (exact bytes);
(b) max_memory_allocated() unchanged across spans, and reset_peak_memory_stats never called;
(c) step time with the map on (spans + map every second) vs the client off, interleaved rounds;
(d) what a snapshot costs with tens of thousands of blocks (memory_snapshot and the summary, ms; body size);
(e) an out-of-memory error on purpose: the API's record (asked-for size, largest free block) and the `oom` alert.
"""
import json
import os
import statistics
import sys
import time
import urllib.request

import torch

import gpudash
from gpudash import _allocator

URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:7073"
GIB = 1 << 30
failures = []


def check(ok, what):
    print(f"  [{'PASS' if ok else 'FAIL'}] {what}")
    if not ok:
        failures.append(what)


def get(path):
    with urllib.request.urlopen(URL + path, timeout=5) as r:
        return json.load(r)


def post(path):
    req = urllib.request.Request(URL + path, data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status, json.load(r)


def mine():
    return next((p for p in get("/api/bridge") if p["pid"] == os.getpid()), None)


def wait_for(check_fn, seconds, what):
    deadline = time.time() + seconds
    while time.time() < deadline:
        value = check_fn()
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"timed out waiting for {what}")


def snapshot_totals():
    """What the job computes from its own memory_snapshot(): device 0's sums, exact bytes."""
    snap = torch.cuda.memory_snapshot()
    segments = [s for s in (snap["segments"] if isinstance(snap, dict) else snap) if s["device"] == 0]
    free = [b["size"] for s in segments for b in s["blocks"] if b["state"] == "inactive"]
    return {
        "reserved": sum(s["total_size"] for s in segments),
        "allocated": sum(s["allocated_size"] for s in segments),
        "free_in_segments": sum(free),
        "largest_free_block": max(free, default=0),
        "segments": len(segments),
    }


torch.manual_seed(0)
dev = torch.device("cuda:0")
model = torch.nn.Sequential(
    torch.nn.Linear(4096, 8192), torch.nn.GELU(), torch.nn.Linear(8192, 8192), torch.nn.GELU(),
    torch.nn.Linear(8192, 4096)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(512, 4096, device=dev)
y = torch.randn(512, 4096, device=dev)


def step():
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()


def timed_steps(n, body):
    events = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        body()
        e.record()
        events.append((s, e))
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in events]


for _ in range(20):
    step()
torch.cuda.synchronize()

# (b) no trace: count every reset the process sees while spans run.
resets = []
real_reset = torch.cuda.reset_peak_memory_stats
torch.cuda.reset_peak_memory_stats = lambda *a, **k: (resets.append(a), real_reset(*a, **k))[1]
attachment = gpudash.attach(URL, interval=0.5, share_allocator_map=True, map_interval=1.0)
monitored = gpudash.monitor(step, name="train_step")
peak_before = torch.cuda.max_memory_allocated(0)
monitored()
torch.cuda.synchronize()
peak_after_one = torch.cuda.max_memory_allocated(0)
timed_steps(50, monitored)
peak_after = torch.cuda.max_memory_allocated(0)
print(f"max_memory_allocated: {peak_before} before one @monitor call, {peak_after_one} after it, "
      f"{peak_after} after 50 more")
check(peak_before == peak_after_one == peak_after, "(b) max_memory_allocated() unchanged across spans")
check(not resets, f"(b) reset_peak_memory_stats called {len(resets)} times by the client (0 expected)")
torch.cuda.reset_peak_memory_stats = real_reset

# (a) the map against the job's own snapshot, with the loop idle (nothing moves between the two).
entry = wait_for(lambda: (m := mine()) and m["allocator"] and m, 20, "a first map")
torch.cuda.synchronize()
time.sleep(0.6)
status, pending = post(f"/api/bridge/{entry['id']}/allocator_map")
done = wait_for(lambda: (m := mine())["map_request"] and m["map_request"]["done_ms"] and m, 10, "the requested map")
own = snapshot_totals()
api = done["allocator"]["maps"][0]["totals"]
print(f"job's memory_snapshot(): {own}")
print(f"gpudash map totals:      { {k: api[k] for k in own} } (cost {done['allocator']['cost_ms']:.2f} ms)")
check(all(api[k] == own[k] for k in own), "(a) the map's totals equal memory_snapshot() computed in the job")
check(api["reserved"] == torch.cuda.memory_reserved(0) and api["allocated"] == torch.cuda.memory_allocated(0),
      "(a) reserved/allocated equal memory_reserved()/memory_allocated()")
print(f"allocator: segments {api['segments']}, blocks {api['blocks']}, largest free block {api['largest_free_block']}, "
      f"fragmentation {api['free_in_segments'] / max(api['reserved'], 1) * 100:.1f}%")
gpudash.detach()

# (c) interleaved rounds: client off vs spans + a map every second.
off, on = [], []
for _ in range(4):
    off += timed_steps(150, step)
    gpudash.attach(URL, interval=0.5, share_allocator_map=True, map_interval=1.0)
    on += timed_steps(150, monitored)
    gpudash.detach()
m_off, m_on = statistics.median(off), statistics.median(on)
print(f"allocator: step time client off {m_off:.3f} ms, map on (+spans, map every 1 s) {m_on:.3f} ms "
      f"({(m_on / m_off - 1) * 100:+.2f}%); p99 {sorted(off)[int(len(off) * .99)]:.3f} vs "
      f"{sorted(on)[int(len(on) * .99)]:.3f} ms")

# (d) tens of thousands of blocks: a snapshot's cost, and the summary's size.
keep = []
sizes = [(512 << 10) if i % 2 else ((1 + i % 7) << 20) for i in range(40_000)]
for i, size in enumerate(sizes):
    keep.append(torch.empty(size, dtype=torch.uint8, device=dev))
del keep[::2]  # every other block freed: free blocks scattered in the segments
torch.cuda.synchronize()
costs, summaries = [], []
for _ in range(5):
    t0 = time.perf_counter()
    snap = torch.cuda.memory_snapshot()
    t1 = time.perf_counter()
    maps = _allocator.summarize(snap)
    t2 = time.perf_counter()
    costs.append((t1 - t0) * 1000)
    summaries.append((t2 - t1) * 1000)
body = json.dumps({"maps": maps})
blocks = sum(m["totals"]["blocks"] for m in maps)
print(f"allocator: snapshot of {blocks} blocks in {sum(m['totals']['segments'] for m in maps)} segments: "
      f"memory_snapshot() {statistics.median(costs):.1f} ms, summary {statistics.median(summaries):.1f} ms, "
      f"body {len(body) / 1024:.1f} KiB")
check(blocks >= 20_000, "(d) tens of thousands of blocks")
check(len(body) < 256 * 1024, "(d) the summary stays under the server's 256 KiB limit")
attachment = gpudash.attach(URL, interval=0.5, share_allocator_map=True, map_interval=1.0)
stalled = timed_steps(100, monitored)
print(f"allocator: step time with 40k blocks and a map every second: median {statistics.median(stalled):.3f} ms, "
      f"max {max(stalled):.3f} ms (a snapshot stalls the loop by at most its cost above)")
del keep
torch.cuda.empty_cache()

# (e) an out-of-memory error on purpose.
wait_for(lambda: (m := mine()) and m["allocator"], 20, "attached again")
asked = int(torch.cuda.get_device_properties(0).total_memory * 1.5)
seen = None
try:
    with gpudash.span("oom"):
        torch.empty(asked, dtype=torch.uint8, device=dev)
except torch.cuda.OutOfMemoryError as error:
    seen = mine()
    print(f"OutOfMemoryError: {str(error)[:160]}")
own = snapshot_totals()
check(seen is not None and len(seen["ooms"]) >= 1, "(e) the OOM record was on the server before the except block")
if seen and seen["ooms"]:
    oom = seen["ooms"][-1]
    print(f"allocator: OOM record {oom}")
    print(f"page line: OOM at …: asked for {oom['requested_bytes'] / GIB:.2f} GiB, largest free block "
          f"{oom['totals']['largest_free_block'] / GIB:.2f} GiB, {oom['totals']['free_in_segments'] / GIB:.2f} GiB free")
    check(oom["requested_bytes"] is not None and abs(oom["requested_bytes"] - asked) <= 0.01 * asked,
          "(e) the asked-for size matches the request (within the message's rounding)")
    check(oom["totals"]["largest_free_block"] == own["largest_free_block"],
          "(e) largest free block equals the job's own snapshot after the error")
alert = wait_for(lambda: next((a for a in get("/api/alerts")["alerts"]
                               if a["rule"] == "oom" and a["pid"] == os.getpid()), None), 10, "the oom alert")
print(f"alert: {alert['severity']} user={alert['user']} {alert['message']}")
check(alert["severity"] == "critical", "(e) an oom alert fired")
print(f"client thread: {attachment.stats()}")
gpudash.detach()
print("RESULT:", "PASS" if not failures else "FAIL: " + "; ".join(failures))
sys.exit(1 if failures else 0)
