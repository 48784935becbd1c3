"""The to_device experiment beside PyTorch's own t.to('cuda'), printed side by side, no verdict.

Each round runs `gpudash bench --json --force to_device` and then PyTorch on the same GPU (the side that goes
first alternates), with the same tensor size, warm-ups and repetitions, each copy between two CUDA events:
pageable `t.to('cuda')` one by one, pinned `p.to('cuda', non_blocking=True)` behind the same events. Each side
gives the median of its repetitions per round; the table prints both and their ratio per round and the median
ratio. It is informational: the to_device rows are not in tests/gpu/rules.json (adding a row there needs a
confirmation run of its own), so this script judges nothing and exits 0 unless a side fails to run or a
gpudash check fails.

    python3 tests/gpu/to_device_vs_torch.py [--rounds 5] [--bytes 268435456]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

BIN = os.environ.get("GPUDASH_BIN", "target/release/gpudash")
PAGEABLE = "t.to('cuda') from pageable memory"
PINNED = "t.to('cuda', non_blocking=True) from pinned memory"


def gpudash(size, warmup, reps):
    params = json.dumps({"kind": "to_device", "bytes": size, "warmup": warmup, "repetitions": reps})
    out = subprocess.run([BIN, "bench", "--json", "--force", "--params", params, "to_device"],
                         capture_output=True, text=True, timeout=300)
    runs = json.loads(out.stdout)
    run = runs[0]
    checks = run["result"]["checks"]
    if not all(c["passed"] for c in checks):
        raise SystemExit(f"gpudash check failed: {checks}")
    figures = {f["name"]: f["stats"]["median"] for f in run["result"]["figures"]}
    return figures[PAGEABLE], figures[PINNED]


def torch_side(size, warmup, reps):
    import torch
    n = size // 4
    t = torch.rand(n)  # written: never-written memory would read the zero page
    p = t.pin_memory()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(src, non_blocking):
        times = []
        for i in range(warmup + reps):
            start.record()
            x = src.to("cuda", non_blocking=non_blocking)
            end.record()
            torch.cuda.synchronize()
            if i >= warmup:
                times.append(start.elapsed_time(end))
            del x
        return statistics.median(times)

    return timed(t, False), timed(p, True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bytes", type=int, default=256 << 20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repetitions", type=int, default=10)
    a = ap.parse_args()
    import torch
    print(f"GPU: {torch.cuda.get_device_name(0)}; PyTorch {torch.__version__}; tensor {a.bytes} bytes; "
          f"{a.rounds} rounds, each side the median of {a.repetitions} copies after {a.warmup} warm-ups")
    ratios = {"pageable": [], "pinned": []}
    print(f"{'round':>5} {'first':>8} | {'pageable gpudash':>16} {'torch':>8} {'ratio':>6} | "
          f"{'pinned gpudash':>14} {'torch':>8} {'ratio':>6}   (ms)")
    for r in range(a.rounds):
        if r % 2 == 0:
            g = gpudash(a.bytes, a.warmup, a.repetitions)
            t = torch_side(a.bytes, a.warmup, a.repetitions)
        else:
            t = torch_side(a.bytes, a.warmup, a.repetitions)
            g = gpudash(a.bytes, a.warmup, a.repetitions)
        ratios["pageable"].append(g[0] / t[0])
        ratios["pinned"].append(g[1] / t[1])
        first = "gpudash" if r % 2 == 0 else "torch"
        print(f"{r + 1:>5} {first:>8} | {g[0]:>16.3f} {t[0]:>8.3f} {g[0] / t[0]:>6.3f} | "
              f"{g[1]:>14.3f} {t[1]:>8.3f} {g[1] / t[1]:>6.3f}")
    for kind, values in ratios.items():
        print(f"median ratio gpudash/torch, {kind}: {statistics.median(values):.3f} "
              f"(range {min(values):.3f} to {max(values):.3f}; informational, no verdict)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
