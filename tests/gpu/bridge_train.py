#!/usr/bin/env python3
"""A real training loop with the gpudash client attached, checked against the loop's own figures.

Run beside a running gpudash (tests/gpu/bridge.sh does both). Prints:
- step time without and with the client (median of CUDA-event-timed steps);
- allocated/reserved as the loop reads them vs as /api/bridge shows them (target: within 1%);
- span times vs the loop's own CUDA-event timings of the same steps (target: within 5%);
- reserved memory dropped by a remote empty_cache vs by a local one.
"""
import json
import statistics
import sys
import time
import urllib.request

import torch

import gpudash

URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:7072"
STEPS = 300
failures = []


def check(ok, what):
    print(f"  [{'PASS' if ok else 'FAIL'}] {what}")
    if not ok:
        failures.append(what)


def bridge():
    with urllib.request.urlopen(URL + "/api/bridge", timeout=5) as r:
        return next(p for p in json.load(r) if p["pid"] == __import__("os").getpid())


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
    """The loop's own timing: CUDA events around each step, read after the loop."""
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
plain = timed_steps(STEPS, step)

attachment = gpudash.attach(URL, interval=1.0, allow_remote_empty_cache=True)
monitored = gpudash.monitor(step, name="train_step")
with_client = timed_steps(STEPS, monitored)
time.sleep(2.5)  # two reports: the last figures and every span are in

print(f"step time: without client {statistics.median(plain):.3f} ms, with client and @monitor "
      f"{statistics.median(with_client):.3f} ms ({(statistics.median(with_client) / statistics.median(plain) - 1) * 100:+.2f}%)")
print(f"client thread: {attachment.stats()}")

entry = bridge()
d = entry["devices"][0]
alloc, reserved = torch.cuda.memory_allocated(0), torch.cuda.memory_reserved(0)
print(f"loop:    allocated {alloc} reserved {reserved}")
print(f"gpudash: allocated {d['allocated']} reserved {d['reserved']} nvml_used {d['nvml_used']} "
      f"overhead (context + non-torch) {d['overhead']} pid_matched={entry['pid_matched']} user={entry['user']}")
check(abs(d["allocated"] - alloc) <= 0.01 * alloc, "allocated within 1% of torch.cuda.memory_allocated()")
check(abs(d["reserved"] - reserved) <= 0.01 * reserved, "reserved within 1% of torch.cuda.memory_reserved()")
span = next(s for s in entry["spans"] if s["name"] == "train_step")
own = statistics.median(with_client)
print(f"span train_step: count {span['count']} p50 {span['p50_ms']:.3f} ms p99 {span['p99_ms']:.3f} ms; "
      f"loop's own events p50 {own:.3f} ms")
check(span["count"] == STEPS, f"all {STEPS} spans arrived")
check(abs(span["p50_ms"] - own) <= 0.05 * own, "span p50 within 5% of the loop's own CUDA-event timing")

# Remote empty_cache: free a big block so the cache holds it, then press the button over HTTP.
big = torch.empty(8 << 30, dtype=torch.uint8, device=dev)
del big
before = torch.cuda.memory_reserved(0)
req = urllib.request.Request(f"{URL}/api/bridge/{entry['id']}/empty_cache", data=b"", method="POST")
with urllib.request.urlopen(req, timeout=5) as r:
    print(f"remote empty_cache: {r.status} {json.load(r)}")
deadline = time.time() + 10
while time.time() < deadline and not (bridge()["empty_cache"] or {}).get("done_ms"):
    time.sleep(0.2)
remote_released = bridge()["empty_cache"]["released_bytes"]
after_remote = torch.cuda.memory_reserved(0)
big = torch.empty(8 << 30, dtype=torch.uint8, device=dev)
del big
before_local = torch.cuda.memory_reserved(0)
torch.cuda.empty_cache()
local_released = before_local - torch.cuda.memory_reserved(0)
print(f"reserved: {before} -> {after_remote} by the remote call (reported {remote_released}); "
      f"a local call released {local_released}")
after_local = torch.cuda.memory_reserved(0)
print(f"reserved left: {after_remote} after the remote call, {after_local} after the local one")
check(after_remote < before and abs(after_remote - after_local) <= 0.01 * after_local,
      "remote empty_cache leaves reserved where a local call does")
check(remote_released == before - after_remote, "the bytes released are reported exactly")
gpudash.detach()
print("RESULT:", "PASS" if not failures else "FAIL: " + "; ".join(failures))
sys.exit(1 if failures else 0)
