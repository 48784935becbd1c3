#!/usr/bin/env python3
"""gpudash's GPU lab side by side with PyTorch, in the same run on the same GPU.

Usage: python3 tests/gpu/lab_vs_torch.py BENCH_JSON
  BENCH_JSON is the output of `gpudash bench --json ... transfer streams precision`.
PyTorch measures the same sizes the same way: CUDA events around each operation,
median of the timed repetitions after warm-up, host buffers written before timing.
Prints one table with the ratio gpudash/PyTorch and PASS/FAIL per target of issue 4;
exits 1 when a target fails.
"""
import json
import statistics
import sys

import torch

WARMUP, REPS = 3, 10
MIB, GIB = 1 << 20, 1 << 30


def timed(fn, warmup=WARMUP, reps=REPS):
    """Median ms of fn() between two CUDA events on the current stream."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def torch_transfer(kind, n):
    """GB/s for one copy kind; d2d counts read + write bytes like gpudash."""
    dev = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(3)
    if kind == "d2d":
        dst = torch.empty_like(dev)
        return 2 * n / timed(lambda: dst.copy_(dev)) / 1e6
    pinned = kind.endswith("pinned")
    host = torch.empty(n, dtype=torch.uint8, pin_memory=pinned)
    host.fill_(1)  # written: never-written pages all map to the zero page and flatter pageable H2D
    if kind.startswith("h2d"):
        fn = lambda: dev.copy_(host, non_blocking=pinned)
    else:
        fn = lambda: host.copy_(dev, non_blocking=pinned)
    return n / timed(fn) / 1e6


def torch_gemm(dtype_name, n):
    torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
    dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    a = (torch.rand(n, n, device="cuda") * 2 - 1).to(dtype)
    b = (torch.rand(n, n, device="cuda") * 2 - 1).to(dtype)
    ms = timed(lambda: a @ b)
    torch.backends.cuda.matmul.allow_tf32 = False
    return 2 * n**3 / ms / 1e9


def torch_overlap(copy_bytes, n):
    host = torch.empty(copy_bytes, dtype=torch.uint8, pin_memory=True).fill_(1)
    dev = torch.empty(copy_bytes, dtype=torch.uint8, device="cuda")
    a = torch.rand(n, n, device="cuda")
    side = torch.cuda.Stream()
    copy = timed(lambda: dev.copy_(host, non_blocking=True))
    compute = timed(lambda: a @ a)

    def both():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            dev.copy_(host, non_blocking=True)
        a @ a
        torch.cuda.current_stream().wait_stream(side)

    return copy, compute, timed(both)


def series_point(run, name, x):
    for s in run["result"]["series"]:
        if s["name"] == name:
            for p in s["points"]:
                if int(p["x"]) == int(x):
                    return p["y"]["median"]
    return None


def figure(run, name):
    for f in run["result"]["figures"]:
        if f["name"] == name:
            return f["stats"]["median"]
    return None


def main():
    runs = {r["kind"]: r for r in json.load(open(sys.argv[1])) if r.get("result")}
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    rows, failures = [], 0

    def row(what, mine, theirs, unit, rule):
        nonlocal failures
        if mine is None or theirs is None:
            rows.append((what, mine, theirs, unit, None, "MISSING"))
            failures += 1
            return
        ratio = mine / theirs
        ok = rule(ratio)
        failures += 0 if ok else 1
        rows.append((what, mine, theirs, unit, ratio, "PASS" if ok else "FAIL"))

    transfer = runs.get("transfer")
    if transfer:
        for kind, rule, label in [
            ("h2d_pinned", lambda r: r >= 0.98, ">= 98%"),
            ("d2h_pinned", lambda r: r >= 0.98, ">= 98%"),
            ("d2d", lambda r: r >= 0.98, ">= 98%"),
            ("h2d_pageable", lambda r: 0.95 <= r <= 1.05, "±5%"),
            ("d2h_pageable", lambda r: 0.95 <= r <= 1.05, "±5%"),
        ]:
            for n in (256 * MIB, GIB):
                row(f"{kind} {n // MIB} MiB [{label}]", series_point(transfer, kind, n), torch_transfer(kind, n), "GB/s", rule)
            torch.cuda.empty_cache()
        for kind in ("h2d_pinned", "h2d_pageable"):
            n = 16 * MIB
            mine, theirs = series_point(transfer, kind, n), torch_transfer(kind, n)
            rows.append((f"{kind} 16 MiB [info]", mine, theirs, "GB/s", mine / theirs if mine and theirs else None, "info"))
    else:
        failures += 1
        rows.append(("transfer run", None, None, "", None, "MISSING"))

    precision = runs.get("precision")
    if precision:
        for dtype in ("fp16", "bf16", "tf32", "fp32"):
            mine = series_point(precision, dtype, 8192)
            theirs = torch_gemm(dtype, 8192)
            if dtype == "fp32":
                rows.append(("fp32 GEMM 8192 [info]", mine, theirs, "TFLOP/s", mine / theirs if mine else None, "info"))
            else:
                row(f"{dtype} GEMM 8192 [>= 95%]", mine, theirs, "TFLOP/s", lambda r: r >= 0.95)
            torch.cuda.empty_cache()
    else:
        failures += 1
        rows.append(("precision run", None, None, "", None, "MISSING"))

    streams = runs.get("streams")
    if streams:
        copy, compute = figure(streams, "copy alone"), figure(streams, "compute alone")
        overlapped = figure(streams, "copy and compute, two streams")
        ideal = max(copy, compute) if copy and compute else None
        row("overlapped vs max(copy, compute) [<= +2%]", overlapped, ideal, "ms", lambda r: r <= 1.02)
        t_copy, t_compute, t_both = torch_overlap(256 * MIB, 8192)
        rows.append(("PyTorch: copy / compute / two streams [info]", None, None, "ms", None,
                     f"{t_copy:.2f} / {t_compute:.2f} / {t_both:.2f} (gpudash {copy:.2f} / {compute:.2f} / {overlapped:.2f})"))
    else:
        failures += 1
        rows.append(("streams run", None, None, "", None, "MISSING"))

    width = max(len(r[0]) for r in rows)
    print(f"{'figure':<{width}}  {'gpudash':>10}  {'PyTorch':>10}  {'unit':<8} {'ratio':>7}  verdict")
    for what, mine, theirs, unit, ratio, verdict in rows:
        fmt = lambda v: f"{v:10.2f}" if isinstance(v, (int, float)) else f"{'-':>10}"
        r = f"{ratio:7.3f}" if ratio is not None else f"{'-':>7}"
        print(f"{what:<{width}}  {fmt(mine)}  {fmt(theirs)}  {unit:<8} {r}  {verdict}")
    for kind, run in sorted(runs.items()):
        for check in run["result"]["checks"]:
            print(f"gpudash check [{'PASS' if check['passed'] else 'FAIL'}] {kind}: {check['name']}: {check['detail']}")
    print("targets:", "ALL PASS" if failures == 0 else f"{failures} FAILED")
    sys.exit(0 if failures == 0 else 1)


if __name__ == "__main__":
    main()
