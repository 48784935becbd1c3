"""The copy groups of lab_vs_torch.py (pinned, pageable and device copies), and what every group shares:
the Group, the held event timing, the pinned CPU core. See lab_vs_torch.py's docstring for the method.

Pinned and pageable copies are two groups, so each pair of a round is measured back to back (a pageable
copy's rate follows the host's memory, which on the lent H200, a VM, changes from second to second) and the
cheap pageable group gets the extra rounds its noise needs without repeating the pinned copies, which decide
in three. Both drop 1 GiB: at 256 MiB both kinds already run at their large-copy rate (pinned 55.2 GB/s at
256 MiB and 1024 MiB in session10-lab-run2.log; pageable H2D 7.6 and 6.8 GB/s), and a 1 GiB pageable round
cost seconds of the deadline while adding the noisiest rows.
"""
import os
import statistics

import torch

from compare import Row, series_point
import cuda_latency
import rules

MIB, GIB = 1 << 20, 1 << 30
PAGE = 4096
PINNED_COPIES = ("h2d_pinned", "d2h_pinned")
PAGEABLE_COPIES = ("h2d_pageable", "d2h_pageable")
HOST_SIZES = (MIB, 16 * MIB, 256 * MIB)
DEVICE_COPIES = ("d2d", "d2d_kernel")
DEVICE_SIZES = (16 * MIB, 256 * MIB, GIB)

# Pageable rows. A pageable copy is the host's memcpy into the driver's staging buffers: on the lent H200 (a
# Firecracker VM sharing its host's memory bandwidth and cores) the C reference's own per-round rates moved by up
# to ±25% (256 MiB H2D 6.0–8.3 GB/s in session10-lab-run2.log) and the paired ratios by 0.75–1.30. Their rule is
# every row's (rules.json, "lab.pageable"): ±5% and the t-interval. At that noise an interval narrows to ±5% only
# over many rounds, so the group gets the extra rounds (it is cheap), and a row they cannot resolve stays
# INCONCLUSIVE, not a pass. A gpudash 5% slower than the same driver calls sits on the limit: its interval
# straddles it, so it ends INCONCLUSIVE or on either side; FAIL needs the whole interval outside 1 ± 5%, which a
# real gap of, say, 15% reaches once the rounds have narrowed the interval enough. (Until rules v1 these rows had
# ±10%, where a gpudash 10% slower was at that limit in the same way, not a sure FAIL.)

# Cycles torch.cuda._sleep spins before a held measurement: gpudash's HOLD_CYCLES (lab/src/cuda/mod.rs).
HOLD_CYCLES = 200_000
# Held copies under 64 MiB are timed as a batch moving 64 MiB (at most 64 copies): gpudash's
# transfer::batch (lab/src/cuda/transfer.rs).
BATCH_BYTES = 64 * MIB


def batch(n):
    return max(1, min(64, BATCH_BYTES // n))


def events(fn, warmup, reps, stream=None, held=False, calls=1, before=None):
    """Per-repetition ms of fn() between two CUDA events on `stream` (default: the current one).

    held: queue a spin kernel first (torch.cuda._sleep), so the events and fn's work wait behind it and the
    host's cost of submitting them (Python and the dispatcher included) stays outside the window. gpudash
    times its pinned and device copies the same way (Session::hold), as nvbandwidth does. The spin lasts
    HOLD_CYCLES per call fn() queues (`calls`): a Python copy_ costs 15–25 µs to submit, as long as a 1 MiB
    copy takes, so one 100 µs hold in front of a batch of 64 let the GPU catch up with Python and time the
    submission (1 MiB pinned H2D read 34.5 GB/s against gpudash's 44.8 on a slower host CPU). gpudash's
    calls cost ~3 µs to submit, far less than the copies they queue. before: queued on the stream ahead of
    the hold and the window each repetition (the GEMM rows fill C with NaN, as gpudash does before each)."""
    stream = stream or torch.cuda.current_stream()
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if before is not None:
            with torch.cuda.stream(stream):
                before()  # queued ahead of the window, like gpudash's poison before each timed GEMM
        if held:
            with torch.cuda.stream(stream):
                torch.cuda._sleep(HOLD_CYCLES * calls)
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def single_thread_fill(t, value):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    t.fill_(value)
    torch.set_num_threads(threads)


def page_aligned_host(n):
    """A pageable uint8 tensor of n bytes on a page boundary, written once by one thread (as gpudash's)."""
    raw = torch.empty(n + PAGE, dtype=torch.uint8)
    offset = (-raw.data_ptr()) % PAGE
    host = raw[offset:offset + n]
    single_thread_fill(host, 1)
    assert host.data_ptr() % PAGE == 0
    return raw, host


# ---- the groups: gpudash params, the PyTorch side, the rows ----


# The one CPU core both sides of host-bound groups (pageable copies, host-side latency) run on: their
# figures follow the core's clock and caches, and an unpinned process lands on a different core each
# round (event record read 0.81 µs in gpudash and 1.11 µs in C in one run, the other way round in the
# next). The last core of this process's set, away from core 0's interrupts.
PIN_CPU = max(os.sched_getaffinity(0))


class Group(rules.RoundGroup):
    """One `gpudash bench` experiment, its reference measured in this process, and the rows they fill."""

    def __init__(self, name, kind, params, rows, torch_round, gpudash_figures, timeout, cpu=None):
        super().__init__(name, rows)
        self.kind, self.params = kind, params
        self.torch_round, self.gpudash_figures, self.timeout = torch_round, gpudash_figures, timeout
        self.seconds = {"gpudash": [], "PyTorch": []}
        self.cpu = cpu
        self.rounds = 0  # complete rounds: both sides measured and the rows given the pair


def pinned_copies(warmup, reps, book):
    """Pinned H2D/D2H against PyTorch's copy_ from pinned memory, held and batched on both sides; `book`: the rules
    (rules.Rules) the rows take their tolerance and interval from."""
    params = {"kind": "transfer", "sizes": list(HOST_SIZES), "copies": list(PINNED_COPIES),
              "warmup": warmup, "repetitions": reps}
    rows = {(c, n): Row(f"{c} {n // MIB} MiB", "GB/s", f"series {c} at x={n}",
                        "PyTorch dev.copy_(host, non_blocking=True) (pinned)", **book.row("lab.pinned"))
            for c in PINNED_COPIES for n in HOST_SIZES}

    def torch_side():
        top = max(HOST_SIZES)
        pinned = torch.empty(top, dtype=torch.uint8, pin_memory=True)
        single_thread_fill(pinned, 2)
        dev = torch.empty(top, dtype=torch.uint8, device="cuda").fill_(3)
        out = {}
        for c in PINNED_COPIES:  # gpudash's order: each copy kind, then each size
            for n in HOST_SIZES:
                h, d = pinned[:n], dev[:n]
                k = batch(n)  # held and batched like gpudash's
                one = (lambda: d.copy_(h, non_blocking=True)) if c.startswith("h2d") else \
                      (lambda: h.copy_(d, non_blocking=True))
                ms = statistics.median(events(lambda: [one() for _ in range(k)], warmup, reps, held=True,
                                              calls=k)) / k
                out[(c, n)] = n / ms / 1e6
        del pinned, dev
        return out

    def gpudash_side(run):
        return {(c, n): series_point(run, c, n) for c in PINNED_COPIES for n in HOST_SIZES}

    return Group("pinned copies", "transfer", params, rows, torch_side, gpudash_side, 90, cpu=PIN_CPU)


def pageable_copies(warmup, reps, book):
    """Pageable H2D/D2H against the same driver calls in C (pageable_copies.c: the same buffers, the same writes
    between the copies), one copy per window on both sides. PyTorch's own pageable figures are measured in the
    group's first round and printed for information: its Python dispatch (15–25 µs) sits inside its one-copy
    window and moved its 1 MiB figure by 10–20%."""
    params = {"kind": "transfer", "sizes": list(HOST_SIZES), "copies": list(PAGEABLE_COPIES),
              "warmup": warmup, "repetitions": reps}
    rows = {(c, n): Row(f"{c} {n // MIB} MiB", "GB/s", f"series {c} at x={n}",
                        "cuMemcpy*Async pageable in C (pageable_copies.c; what PyTorch's copy_ calls)",
                        **book.row("lab.pageable"))
            for c in PAGEABLE_COPIES for n in HOST_SIZES}
    torch_pageable = []

    def torch_side():
        c_side = cuda_latency.pageable(torch.cuda.current_device(), warmup, reps, HOST_SIZES)
        if not torch_pageable:  # once, in the group's first round: it is for information only
            raw, pageable = page_aligned_host(max(HOST_SIZES))
            dev = torch.empty(max(HOST_SIZES), dtype=torch.uint8, device="cuda").fill_(3)
            info = {}
            for c in PAGEABLE_COPIES:
                for n in HOST_SIZES:
                    h, d = pageable[:n], dev[:n]
                    one = (lambda: d.copy_(h, non_blocking=True)) if c.startswith("h2d") else \
                          (lambda: h.copy_(d, non_blocking=True))
                    info[f"PyTorch {c} {n // MIB} MiB"] = n / statistics.median(events(one, warmup, reps)) / 1e6
            del raw, pageable, dev
            torch_pageable.append(info)
        return {(c, n): c_side[(c, n)] for c in PAGEABLE_COPIES for n in HOST_SIZES}

    def gpudash_side(run):
        return {(c, n): series_point(run, c, n) for c in PAGEABLE_COPIES for n in HOST_SIZES}

    group = Group("pageable copies", "transfer", params, rows, torch_side, gpudash_side, 90, cpu=PIN_CPU)
    group.torch_info = torch_pageable
    group.info = ("pageable copies", "GB/s")
    return group


def device_copies(warmup, reps, l2_bytes, book):
    params = {"kind": "transfer", "sizes": list(DEVICE_SIZES), "copies": list(DEVICE_COPIES),
              "warmup": warmup, "repetitions": reps}
    rows = {}
    for c in DEVICE_COPIES:
        for n in DEVICE_SIZES:
            in_l2 = 2 * n <= l2_bytes
            # d2d is the same driver call as PyTorch's contiguous copy_ (its profiler shows "Memcpy DtoD");
            # d2d_kernel is judged against it too: an SM copy should move bytes as fast as the driver's.
            rows[(c, n)] = Row(f"{c} {n // MIB} MiB{' (in L2)' if in_l2 else ''}", "GB/s",
                               f"series {c} at x={n} (read + write bytes)",
                               "PyTorch dst.copy_(src) (cudaMemcpyAsync D2D, held)", **book.row("lab.device"))

    def torch_side():
        top = max(DEVICE_SIZES)
        src = torch.empty(top, dtype=torch.uint8, device="cuda").fill_(1)
        dst = torch.empty(top, dtype=torch.uint8, device="cuda").fill_(0)
        out = {}
        for n in DEVICE_SIZES:
            s, d = src[:n], dst[:n]
            k = batch(n)
            ms = statistics.median(events(lambda: [d.copy_(s) for _ in range(k)], warmup, reps, held=True,
                                          calls=k)) / k
            rate = 2 * n / ms / 1e6
            for c in DEVICE_COPIES:
                out[(c, n)] = rate
        if not torch.equal(dst[:GIB // 4][::4099], src[:GIB // 4][::4099]):
            raise RuntimeError("PyTorch's device copy did not copy")
        del src, dst
        return out

    def gpudash_side(run):
        return {(c, n): series_point(run, c, n) for c in DEVICE_COPIES for n in DEVICE_SIZES}

    return Group("device copies", "transfer", params, rows, torch_side, gpudash_side, 90)

