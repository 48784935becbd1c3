#!/usr/bin/env python3
"""gpudash's collectives experiment on one GPU beside PyTorch, in one run, interleaved.

Usage: python3 tests/gpu/collectives_vs_torch.py GPUDASH_BIN OUT_DIR [--rounds R] [--max-rounds M] [--deadline-s S]

Each round runs `gpudash bench --json --force collectives` on GPU 0 alone (a one-rank communicator: all four
collectives at 8 B, 1 MiB and 256 MiB in fp32, each GPU's whole result checked by gpudash) with the DDP step
view's default model (1.3 B parameters in bf16 as 310 square layers of 2048², 4096 tokens), and the same
backward-shaped GEMM loop from this PyTorch process, alternating which side goes first. For each layer,
last to first: dX = W·dY (2048×2048 · 2048×4096) and dW = dY·Xᵀ into that layer's slice of one gradient
buffer, bf16 in, fp32 accumulation, timed between two CUDA events around the whole pass (median of 5 after
2 warm-ups), as gpudash times its compute side. Row: the pass's time in ms, judged by compare.py's paired
95% interval against 1 ± its tolerance, both from tests/gpu/rules.json ("collectives.compute"; rules v1: the
t-interval, ±5%), with the rounds and deadline of its schedule "collectives"; the rules' version and sha256
are printed first and in the summary line. busbw on one rank is 0 by nccl-tests' formulas: printed, not
compared. Exits 1 on a FAIL or MISSING row, a failed gpudash check, a usage error or an unusable rules file,
else 2 when the row is INCONCLUSIVE (the summary line says so), else 0.
"""
import argparse
import json
import statistics
import sys

import torch

from compare import EXIT_MEANING, CheckLog, Row, exit_code, figure, interleaved_rounds, print_table
import rules

HIDDEN, TOKENS, PARAMETERS = 2048, 4096, 1_300_000_000
LAYERS = round(PARAMETERS / HIDDEN ** 2)
WARMUP, STEPS = 2, 5
PARAMS = {"kind": "collectives", "gpus": [0], "sizes": [8, 1 << 20, 256 << 20], "dtype": "fp32", "warmup": 3,
          "repetitions": STEPS, "ddp": {"parameters": PARAMETERS, "dtype": "bf16", "tokens": TOKENS,
                                        "hidden": HIDDEN, "bucket_cap_mb": 25}}
COMPUTE = "DDP step: compute (backward GEMMs)"


def torch_backward_ms():
    """Median ms of one backward-shaped pass of LAYERS layers, between CUDA events."""
    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.rand(HIDDEN, HIDDEN, device="cuda", generator=g).mul_(2).sub_(1).bfloat16()
    x = torch.rand(HIDDEN, TOKENS, device="cuda", generator=g).mul_(2).sub_(1).bfloat16()
    dy = torch.rand(HIDDEN, TOKENS, device="cuda", generator=g).mul_(2).sub_(1).bfloat16()
    dx = torch.empty_like(dy)
    grads = torch.empty(LAYERS, HIDDEN, HIDDEN, device="cuda", dtype=torch.bfloat16)
    xt = x.t()

    def backward():
        for layer in range(LAYERS):
            torch.matmul(w, dy, out=dx)
            torch.matmul(dy, xt, out=grads[layer])

    for _ in range(WARMUP):
        backward()
    torch.cuda.synchronize()
    times = []
    for _ in range(STEPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        backward()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del w, x, dy, dx, grads
    torch.cuda.empty_cache()
    return statistics.median(times)


def main():
    book = rules.load_or_exit()
    print(f"rules: {book.banner()}", flush=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("out_dir")
    rules.round_arguments(ap, book, "collectives", "rounds at least (the first 2 always run)",
                          "start no round that would end after this many seconds (at least 2 rounds run)")
    args = rules.parse_round_arguments(ap, book, "collectives")
    print(f"PyTorch {torch.__version__}, {torch.cuda.get_device_name(0)}; NCCL {torch.cuda.nccl.version()}")
    row = Row(f"DDP backward pass, {LAYERS} layers of {HIDDEN}², {TOKENS} tokens, bf16", "ms",
              f"figure '{COMPUTE}'", "PyTorch torch.matmul loop of the same shapes", **book.row("collectives.compute"))
    rows = {"compute": row}
    group = rules.RoundGroup("collectives", rows)
    log = CheckLog()

    def finish_round(mine, theirs, index, elapsed):
        row.add(mine, theirs, index)
        return f"round {index + 1}: gpudash {mine} ms, PyTorch {theirs:.3f} ms, at {elapsed:.0f} s"

    rounds_run, last = interleaved_rounds(args, group, log, ("collectives", PARAMS, 180),
                                          lambda run: figure(run, COMPUTE) if run else None, torch_backward_ms,
                                          finish_round, torch.cuda.synchronize)
    problems = 0
    if last is not None:
        json.dump([last], open(f"{args.out_dir}/collectives.json", "w"), indent=1)
        result = last.get("result") or {}
        for f in result.get("figures") or []:
            if f["name"].endswith(" busbw") or f["name"].endswith(" time") or f["name"].startswith("DDP"):
                print(f"gpudash figure: {f['name']} = {f['stats']['median']:.4g} {f['unit']}")
        for note in result.get("notes") or []:
            print(f"gpudash note: {note}")
        names = {c["name"].split(" ")[0] for c in result.get("checks") or []}
        for wanted in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
            if wanted not in names:
                print(f"  [FAIL] no {wanted} check in gpudash's result")
                problems += 1
    else:
        problems += 1
    tally = print_table(list(rows.values()), f"collectives (DDP compute side), {rounds_run} interleaved rounds")
    check_failures = log.report()
    code = exit_code(tally.failures + check_failures + problems, tally.inconclusive)
    print(f"\ncollectives: {tally.passed} PASS, {tally.failed} FAIL/MISSING, {tally.inconclusive} INCONCLUSIVE, "
          f"{check_failures + problems} failed checks or runs; exit {code} ({EXIT_MEANING[code]}); {args.rules_label}")
    sys.exit(code)


if __name__ == "__main__":
    main()
