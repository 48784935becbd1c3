#!/usr/bin/env python3
"""gpudash's GPU lab against PyTorch (and plain CUDA for latency), measured in one run, interleaved.

Usage: python3 tests/gpu/lab_vs_torch.py [GPUDASH_BIN] [--rounds R] [--max-rounds M] [--deadline-s S] [--device N]

One persistent PyTorch process. Each round runs, for every group below, `gpudash bench --device N
--json --force --params '...' <experiment>` with few repetitions and then the same measurement in
this process, alternating which side goes first from group to group and round to round. Both sides
use the same sizes, warm-ups and repetitions, CUDA events around each timed operation, the median of
the round's repetitions as the round's figure, and buffers prepared the same way:

  pinned copies one pinned buffer of the largest size (gpudash: cuMemHostAlloc flags 0; here torch
                pin_memory=True), written; one device buffer; prefixes of them copied, held and batched
                (below). gpudash cuMemcpyHtoDAsync/DtoHAsync; PyTorch `dev.copy_(host, non_blocking=True)`
                = cudaMemcpyAsync on the current stream (ATen Copy.cu; non_blocking keeps a stream
                synchronize out of the timed region, as gpudash has none);
  pageable copies
                one page-aligned pageable host buffer of the largest size, written once by one thread
                (gpudash: a Vec one page longer used from its page boundary), judged against the same
                driver calls in C (pageable_copies.c, built by cuda_latency.py), which does gpudash's
                host-side work between the copies too (the source written and the destination poisoned
                before a size, the destination poisoned again before the timed copies, checked after):
                a pageable copy goes unheld, one per window, so PyTorch's Python dispatch would fall inside
                its window; PyTorch's pageable figures are printed for information (first round). Both
                copy groups (lab_copies.py) run 1, 16 and 256 MiB, on one pinned CPU core on both sides;
  device copies two device buffers of the largest size, prefixes copied, bytes read + written.
                gpudash `d2d` = cuMemcpyDtoDAsync (the driver's memcpy), gpudash `d2d_kernel` = an SM
                copy kernel; PyTorch `dst.copy_(src)` = cudaMemcpyAsync DeviceToDevice (ATen Copy.cu;
                torch.profiler shows "Memcpy DtoD", no kernel). Both rows are judged against it at
                every size. Pinned and device copies are timed behind a spin kernel on both sides
                (gpudash Session::hold, PyTorch torch.cuda._sleep), so only the copy is in the window,
                and under 64 MiB as a batch moving 64 MiB (at most 64 copies), divided by its count;
                without it, submitting a 16 MiB copy (8 µs on the GPU) costs PyTorch's Python more
                than the copy and gpudash ~3 µs, which was the whole "0.68 at 16 MiB" gap of issue 15;
  GEMM          uniform random inputs in [-1, 1]; gpudash cublasGemmEx (fp32 / FAST_TF32 / fp16 /
                bf16, fp32 accumulate), PyTorch `a @ b` (allow_tf32 only for the tf32 row);
  streams       a 256 MiB pinned H2D copy and an 8192 fp32 GEMM: alone, one after the other on one
                stream, and the copy on a second stream beside the GEMM (torch.cuda.Stream with
                wait_stream both ways); events around each phase, no host round trip inside;
  latency       gpudash's host-side call times and its two GPU-side figures (queued empty kernels,
                a CUDA graph of 1000 empty kernels, per kernel) against the plain driver API in C
                (cuda_latency.c, built by cuda_latency.py with gcc); PyTorch's own per-call figures
                (Event.record, Stream.synchronize, x.add_(1)) are printed for information.
  memory        the caching-pool experiment's steps against the same driver calls in C
                (memory_pool.c): pool used and reserved bytes after the allocations and after the
                frees, identity checks (both sides read CU_MEMPOOL_ATTR_USED/RESERVED_MEM_CURRENT:
                equal to the byte or not, never a PASS), and the host time of an allocation the pool
                serves from its cache and of a fresh one (cuMemAllocAsync + synchronize).

Rules. Every row's tolerance and interval, and the rounds, the most rounds and the deadline, come from
tests/gpu/rules.json (rules v1: ±5% and the t-interval for every row; rules.py loads it). The run prints the
rules' version and sha256 first and in its summary line, with any of --rounds, --max-rounds and --deadline-s
given against them ("overridden").

Rounds. The first --rounds rounds measure every group (the first 2 always, later ones while they fit
before --deadline-s). Then, up to --max-rounds, extra rounds measure only the groups with a row still
UNDECIDED, as long as the group's longest round so far fits before the deadline.
Every group alternates which side goes first from one of its rounds to the next (and neighbouring groups
start on opposite sides), so round i of gpudash and of the reference are measured back to back: a pair.

Verdicts: see compare.py (paired per-round ratios, a 95% interval against 1 ± tolerance). Exit 1 on any
FAIL or MISSING row, different identity row, failed gpudash check, usage error or unusable rules file; else
exit 2 when any row is still INCONCLUSIVE after the last round (the summary line says so); else 0.
"""
import argparse
import os
import signal
import statistics
import sys
import time

import torch

from compare import CheckLog, Row, figure, print_table, run_bench
import compare
import cuda_latency
import rules
from lab_copies import GIB, MIB, PIN_CPU, Group, device_copies, events, pageable_copies, pinned_copies, \
    single_thread_fill

L2_BYTES = 50 * MIB  # H200; the row note says so, and the torch side reads the real value below
GEMM_SIZES = (4096, 8192)
DTYPES = ("fp32", "tf32", "fp16", "bf16")
STREAMS = {"kind": "streams", "copy_bytes": 256 * MIB, "gemm_size": 8192, "kernels": 8, "kernel_us": 500,
           "warmup": 2, "repetitions": 5}
LATENCY_NAMES = ("kernel launch (host)", "event record (host)", "synchronize, idle stream (host)",
                 "launch + synchronize (host)", "queued empty kernels, per launch (GPU events; launch-rate bound)",
                 "CUDA graph of empty kernels, per kernel (GPU events)")
STREAM_FIGURES = ("copy alone", "compute alone", "copy then compute, one stream", "copy and compute, two streams")


# The rows that time µs-scale host work (latency's host calls and the launch-bound queued kernels, the pool's
# cached allocation) and the fresh allocation (~220 µs of the driver mapping 256 MiB) take rules.json's
# "lab.latency.host", "lab.memory.pooled" and "lab.memory.fresh": ±5% and the t-interval in rules v1. The lent
# VM's host runs such calls at one of two speeds for stretches of a fraction of a second to seconds, in plain C
# as much as in gpudash (session14-pool-modes.log: one C process's cuMemAllocAsync 0.87 µs in one pass and
# 1.90 µs in the next), and a round whose two runs straddle a change has a ratio of ~0.45 or ~2.2 whatever
# gpudash does. Such rounds widen the t-interval; when the rounds cannot bring it inside ±5% the row ends
# INCONCLUSIVE, which says what the VM allows. The two sides are also different binaries (Rust, C): paired rounds
# of sessions 6 and 9 put gpudash 3–5% off C, either way, on kernel launch, event record and the cached
# allocation, near the ±5% limit, where a row may end INCONCLUSIVE too. Until rules v1 these rows had ±10% and the median interval, both
# chosen after runs they had left undecided (rules.json's "why").


# Seconds the GPU rests before each PyTorch GEMM, as long as gpudash's host check of the previous one.
GEMM_REST_S = 1.0


def gemm(warmup, reps, book):
    params = {"kind": "precision", "sizes": list(GEMM_SIZES), "dtypes": list(DTYPES), "warmup": warmup,
              "repetitions": reps}
    rows = {(d, n): Row(f"GEMM {d} {n}", "TFLOP/s", f"figure '{d} {n}'", f"PyTorch torch.matmul(a, b, out=c) ({d}, held)",
                        **book.row("lab.gemm"))
            for d in DTYPES for n in GEMM_SIZES}
    types = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}

    def torch_side():
        out = {}
        for n in GEMM_SIZES:  # gpudash's order: each size, then each type
            a32 = torch.rand(n, n, device="cuda") * 2 - 1
            b32 = torch.rand(n, n, device="cuda") * 2 - 1
            for d in DTYPES:
                torch.backends.cuda.matmul.allow_tf32 = d == "tf32"
                a, b = a32.to(types[d]), b32.to(types[d])
                c = torch.empty_like(a)
                # gpudash checks each GEMM's output on the host (~1 s at 8192) before the next one's warm-up,
                # so its GPU rests before every measured GEMM; an H200's clocks follow its recent power draw
                # (bf16 8192 back to back read 676-789 TFLOP/s round to round without a rest, gpudash a
                # steady 800). Rest PyTorch's GPU the same before each.
                torch.cuda.synchronize()
                time.sleep(GEMM_REST_S)
                # Held like gpudash's GEMMs, into a buffer allocated once (as gpudash's C).
                # C filled with NaN before each timed GEMM, outside the window, as gpudash poisons its C.
                ms = statistics.median(events(lambda: torch.matmul(a, b, out=c), warmup, reps, held=True,
                                              before=lambda: c.fill_(float("nan"))))
                out[(d, n)] = 2 * n ** 3 / ms / 1e9
            torch.backends.cuda.matmul.allow_tf32 = False
        return out

    def gpudash_side(run):
        return {(d, n): figure(run, f"{d} {n}") for d in DTYPES for n in GEMM_SIZES}

    return Group("GEMM", "precision", params, rows, torch_side, gpudash_side, 150)


def streams(book):
    p = STREAMS
    rule = book.row("lab.streams")
    rows = {name: Row(f"streams: {name}", "ms", f"figure '{name}'", f"PyTorch, same phase ({what})", **rule)
            for name, what in zip(STREAM_FIGURES, ("copy_ non_blocking from pinned", "a @ a fp32",
                                                   "copy then a @ a on one stream",
                                                   "copy on a torch.cuda.Stream beside a @ a"))}
    rows["overlap gain"] = Row("streams: overlap gain (one stream / two streams)", "×", "figure 'overlap gain'",
                               "PyTorch one stream / two streams", **rule)

    def torch_side():
        n, size = p["gemm_size"], p["copy_bytes"]
        host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        single_thread_fill(host, 1)
        dev = torch.empty(size, dtype=torch.uint8, device="cuda")
        a = torch.rand(n, n, device="cuda") * 2 - 1
        main, side = torch.cuda.current_stream(), torch.cuda.Stream()
        warmup, reps = p["warmup"], p["repetitions"]
        copy = lambda: dev.copy_(host, non_blocking=True)
        compute = lambda: a @ a

        def serial():
            copy()
            compute()

        def both():
            side.wait_stream(main)
            with torch.cuda.stream(side):
                copy()
            compute()
            main.wait_stream(side)

        t = {name: statistics.median(events(fn, warmup, reps, main))
             for name, fn in zip(STREAM_FIGURES, (copy, compute, serial, both))}
        t["overlap gain"] = t[STREAM_FIGURES[2]] / t[STREAM_FIGURES[3]]
        return t

    def gpudash_side(run):
        out = {name: figure(run, name) for name in STREAM_FIGURES}
        out["overlap gain"] = figure(run, "overlap gain")
        return out

    return Group("streams", "streams", p, rows, torch_side, gpudash_side, 90)


def latency(device, book):
    # 20,000 samples a host figure, taken in 10 slices that alternate between the figures on both sides
    # (latency.rs, cuda_latency.c), after 10,000 warm-up launches (~30 ms, so the core is up to speed): with
    # 2,000 samples in one block each, a figure lasted 2–20 ms and caught whichever state the VM's core was in
    # (event record 0.85 or 1.2–1.36 µs per round on either side in session10-lab-run2.log).
    params = {"kind": "latency", "warmup": 10_000, "repetitions": 20_000}
    # The host-bound rows (host calls, and the queued kernels that the host's launch rate bounds) and the graph's
    # per-kernel time (the GPU's own) have a rule each in rules.json.
    rows = {name: Row(f"latency: {name}", "µs", f"figure '{name}'", "plain CUDA driver API in C (cuda_latency.c)",
                      **book.row("lab.latency.gpu" if "CUDA graph" in name else "lab.latency.host"))
            for name in LATENCY_NAMES}
    torch_info = []

    def reference():
        figures = cuda_latency.measure(device, params["repetitions"], params["warmup"])
        info = {f"PyTorch {k}": v for k, v in torch_latency().items()}
        torch_info.append(info)
        return figures

    def gpudash_side(run):
        return {name: figure(run, name) for name in LATENCY_NAMES}

    group = Group("latency", "latency", params, rows, reference, gpudash_side, 60, cpu=PIN_CPU)
    group.torch_info = torch_info
    return group


def memory(device, book):
    """The caching-pool experiment against the same driver calls in C (memory_pool.c): the pool's used and
    reserved bytes after the allocations and after the frees (which must agree to the byte), and the host time
    of an allocation the pool serves from its cache and of a fresh one. PyTorch's caching allocator is another
    design (its own block cache over cudaMalloc), so the plain driver pool is the reference here."""
    # 100 timed pairs (the most the experiment takes): with 20, the pool-served figure was 20 calls of ~1 µs,
    # which one slow millisecond of the VM's core moved from 0.9 to 2.1 µs (session10-lab-run2.log, both sides).
    p = {"kind": "memory", "block_bytes": 256 * MIB, "blocks": 8, "free_every": 2, "repetitions": 100}
    freed = p["blocks"] // p["free_every"]
    steps = {f"alloc block {p['blocks']}": "after the allocations", f"free {freed} blocks": "after the frees"}
    ref = "cuMemAllocAsync on the default pool in C (memory_pool.c)"
    rows = {}
    # Both sides read the pool's USED_MEM_CURRENT and RESERVED_MEM_CURRENT after the same steps: equal to the byte
    # or not is the check (identity rows), not a measurement to count as PASS.
    for label, when in steps.items():
        rows[("used", label)] = Row(f"memory: pool used {when}", "GiB", f"memory step '{label}' allocated", ref,
                                    identity=True)
        rows[("reserved", label)] = Row(f"memory: pool reserved {when}", "GiB", f"memory step '{label}' reserved", ref,
                                        identity=True)
    rows["pooled"] = Row("memory: allocation served from the pool", "µs", "figure 'allocation served from the pool'",
                         ref, **book.row("lab.memory.pooled"))
    rows["fresh"] = Row("memory: fresh allocation from the driver", "µs", "figure 'fresh allocation from the driver'",
                        ref, **book.row("lab.memory.fresh"))

    def reference():
        torch.cuda.empty_cache()
        measured, pooled, fresh = cuda_latency.memory_pool(device, p["block_bytes"], p["blocks"], p["free_every"],
                                                           p["repetitions"])
        out = {"pooled": pooled, "fresh": fresh}
        for label in steps:
            used, reserved = measured[label]
            out[("used", label)], out[("reserved", label)] = used / GIB, reserved / GIB
        return out

    def gpudash_side(run):
        out = {"pooled": figure(run, "allocation served from the pool"),
               "fresh": figure(run, "fresh allocation from the driver")}
        by_label = {s.get("label"): s for s in compare._result(run).get("memory_steps") or [] if isinstance(s, dict)}
        for label in steps:
            step = by_label.get(label) or {}
            for key, field in (("used", "allocated"), ("reserved", "reserved")):
                value = step.get(field)
                out[(key, label)] = value / GIB if isinstance(value, (int, float)) else None
        return out

    return Group("memory", "memory", p, rows, reference, gpudash_side, 60, cpu=PIN_CPU)


def torch_latency(reps=2000):
    """PyTorch's own per-call host times, µs (for information: they include its Python binding)."""
    stream = torch.cuda.current_stream()
    x = torch.zeros(1, device="cuda")
    event = torch.cuda.Event()
    clock = time.perf_counter_ns
    out = {}
    for name, fn in (("Event.record()", lambda: event.record(stream)),
                     ("Stream.synchronize(), idle", stream.synchronize),
                     ("x.add_(1), one element", lambda: x.add_(1))):
        for _ in range(100):
            fn()
        stream.synchronize()
        samples = []
        for i in range(reps):
            t = clock()
            fn()
            samples.append(clock() - t)
            if i % 256 == 255:
                stream.synchronize()
        stream.synchronize()
        out[name] = statistics.median(samples) / 1e3
    return out


class Interrupted(Exception):
    """SIGTERM (the suite's timeout): stop measuring and print what the rounds so far give."""


def on_sigterm(_signum, _frame):
    raise Interrupted()


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    book = rules.load_or_exit()
    print(f"rules: {book.banner()}", flush=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", nargs="?", default=os.environ.get("GPUDASH_BIN", "target/release/gpudash"))
    rules.round_arguments(
        ap, book, "lab", "rounds of every group (the first 2 always run; later ones while they fit the deadline)",
        "start no group's round that would end after this many seconds (2 rounds always run)")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--groups", default="",
                    help="comma-separated group names to run (default: all): pinned, pageable, device, gemm, "
                         "streams, latency, memory")
    args = rules.parse_round_arguments(ap, book, "lab")
    started = time.monotonic()
    torch.cuda.set_device(args.device)
    props = torch.cuda.get_device_properties(args.device)
    l2 = getattr(props, "L2_cache_size", 0) or L2_BYTES
    print(f"PyTorch {torch.__version__} on {props.name} (GPU {args.device}, L2 {l2 // MIB} MiB); gpudash {args.binary}")
    print(f"transparent huge pages '{thp_setting()}', NUMA nodes {numa_nodes()}, {args.rounds} rounds, then up to "
          f"{args.max_rounds} for undecided groups, deadline {args.deadline_s:.0f} s; host copies, latency and "
          f"memory pinned to CPU {PIN_CPU} on both sides")
    makers = {"pinned": lambda: pinned_copies(3, 7, book), "pageable": lambda: pageable_copies(3, 15, book),
              "device": lambda: device_copies(3, 10, l2, book), "gemm": lambda: gemm(3, 7, book),
              "streams": lambda: streams(book), "latency": lambda: latency(args.device, book),
              "memory": lambda: memory(args.device, book)}
    chosen = [g for g in args.groups.split(",") if g] or list(makers)
    unknown = [g for g in chosen if g not in makers]
    if unknown:  # exit 1, not argparse's 2 (2 is INCONCLUSIVE)
        print(f"FAIL: --groups: {', '.join(unknown)} not among {', '.join(makers)}")
        sys.exit(1)
    if len(chosen) < len(makers):
        print(f"only the groups {', '.join(chosen)} (--groups): not a whole lab comparison")
        args.rules_label += f", partial: --groups {','.join(chosen)}"
    groups = [makers[g]() for g in chosen]
    log = CheckLog()
    rounds_run = 0
    try:
        while True:
            todo, why_not = rules.next_round(groups, rounds_run, args.rounds, args.max_rounds, args.deadline_s,
                                               time.monotonic() - started)
            if not todo:
                print(f"stopping after {rounds_run} rounds: {why_not}")
                break
            one_round(todo, groups, args, log)
            rounds_run += 1
            names = "every group" if len(todo) == len(groups) else ", ".join(g.name for g in todo)
            print(f"round {rounds_run} ({names}) done at {time.monotonic() - started:.0f} s", flush=True)
    except Interrupted:
        # one_round gives a group's rows their pair only once both sides measured: the interrupted group's
        # half-measured round is left out, every completed pair stays.
        print(f"SIGTERM during round {rounds_run + 1}: the table holds every group's completed rounds")
        log.problems.append("the comparison was stopped by SIGTERM (the suite's timeout) before its rounds ended")
    report(groups, rounds_run, log, args, started)


def one_round(todo, groups, args, log):
    """One round of each group in `todo`. A group alternates which side goes first from one of its rounds to the
    next (neighbouring groups start on opposite sides), and its rows get the round's pair only once both sides
    have measured, so an interrupted round leaves no half-filled group."""
    for g in todo:
        r = g.rounds
        gpudash_first = (r + groups.index(g)) % 2 == 0
        mine = theirs = None
        round_started = time.monotonic()
        for side in (("gpudash", "PyTorch") if gpudash_first else ("PyTorch", "gpudash")):
            t = time.monotonic()
            if side == "gpudash":
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                run, _, problems = run_bench(args.binary, args.device, g.kind, g.params, g.timeout, g.cpu)
                log.add(g.kind, run, problems)
                mine = g.gpudash_figures(run) if run else {}
            else:
                allowed = os.sched_getaffinity(0)
                try:
                    if g.cpu is not None:
                        os.sched_setaffinity(0, {g.cpu})  # the C reference, a child, inherits it
                    theirs = g.torch_round()
                except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
                    print(f"round {r + 1} {g.name}: the reference failed: {e}")
                    theirs = {}
                finally:
                    os.sched_setaffinity(0, allowed)
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
            g.seconds[side].append(time.monotonic() - t)
        for key, row in g.rows.items():
            row.add(mine.get(key), theirs.get(key), r)
        g.rounds += 1
        g.round_seconds.append(time.monotonic() - round_started)


def report(groups, rounds_run, log, args, started):
    rows = [row for g in groups for row in g.rows.values()]
    tally = print_table(rows, f"gpudash vs PyTorch / plain CUDA, {rounds_run} interleaved rounds "
                              f"(each row's own count under 'rounds')", "reference")
    for g in groups:
        for i, info in enumerate(getattr(g, "torch_info", [])):
            title, unit = getattr(g, "info", ("latency", "µs"))
            print(f"  {title} round {i + 1}, for information (PyTorch's figures include its Python binding): "
                  + ", ".join(f"{k} {v:.2f} {unit}" for k, v in info.items()))
    for g in groups:
        print(f"  {g.name}: {g.rounds} rounds; time per round: gpudash "
              f"{statistics.mean(g.seconds['gpudash'] or [0]):.1f} s, "
              f"reference {statistics.mean(g.seconds['PyTorch'] or [0]):.1f} s")
    check_failures = log.report()
    too_few = 1 if rounds_run < 2 else 0
    if too_few:
        print("fewer than 2 rounds: no interval to judge by; FAIL")
    code = compare.exit_code(tally.failures + check_failures + too_few, tally.inconclusive)
    print(f"\nlab vs PyTorch: {tally.passed} PASS, {tally.failed} FAIL/MISSING, {tally.inconclusive} INCONCLUSIVE, "
          f"{tally.identical} identity checks equal and {tally.identity_failed} not, {check_failures} failed checks "
          f"or runs; {rounds_run} rounds in {time.monotonic() - started:.0f} s; exit {code} "
          f"({compare.EXIT_MEANING[code]}); {args.rules_label}")
    sys.exit(code)


def thp_setting():
    try:
        text = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
        return text[text.index("[") + 1:text.index("]")]
    except (OSError, ValueError):
        return "unknown"


def numa_nodes():
    try:
        return len([d for d in os.listdir("/sys/devices/system/node") if d.startswith("node")])
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()
