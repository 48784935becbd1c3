#!/usr/bin/env python3
"""gpudash's p2p experiment and /api/topology beside PyTorch and nvidia-smi, in one run, interleaved.

Usage: python3 tests/gpu/p2p_vs_torch.py GPUDASH_BIN TOPOLOGY_JSON OUT_DIR [--rounds R] [--max-rounds M]
                                         [--deadline-s S]
  TOPOLOGY_JSON  GET /api/topology of a gpudash on the same machine
  OUT_DIR        where tests/gpu/p2p.sh saved `nvidia-smi topo -m` (topo-m.txt) and
                 `topo -p2p r|w|a|n` (topo-p2p-<c>.txt); the last round's p2p JSON is saved there

Each round runs `gpudash bench --json --force p2p` (1 GiB, 2 warm-ups, 5 repetitions; gpudash:
cuMemcpyPeerAsync between two events on the source GPU's stream, buffers from cuMemAlloc) and the
same copies from this PyTorch process (`dst.copy_(src)` between two events on the source GPU's
current stream, as PyTorch copies there with peer access it enables itself; buffers of the same
size, written), alternating which side goes first. Rows, per pair, with peer access enabled:
one way in each direction, and both ways at once (PyTorch: a stream of each GPU, each copy given
an idle current stream on its destination so PyTorch's cross-stream sync does not serialise them).
Verdicts as in compare.py: round i of gpudash and of PyTorch form a pair, and a row's 95% interval of the
paired ratios is judged against 1 ± its tolerance, both from tests/gpu/rules.json ("p2p.bandwidth"; rules v1:
the t-interval, ±5%). After --rounds rounds, more rounds (one `gpudash bench` measures every pair at once, so
a round is all rows) run while a row is UNDECIDED, up to --max-rounds or --deadline-s (defaults: the rules'
schedule "p2p"). The rules' version and sha256 are printed first and in the summary line.
4-byte latency (PyTorch's figure includes its op and cross-device event handling) and the peer
access disabled figures (no PyTorch counterpart) are printed for information.
Exits 1 on any FAIL or MISSING row, a failed gpudash check, a topology mismatch, a usage error or an unusable
rules file; else 2 when a row is still INCONCLUSIVE after the last round (the summary line says so); else 0.
"""
import argparse
import json
import re
import statistics
import sys

import torch

from compare import EXIT_MEANING, CheckLog, Row, exit_code, interleaved_rounds, matrix_cell, print_table
import rules

SIZE = 1 << 30
WARMUP, REPS, LATENCY_REPS = 2, 5, 50


def events_ms(stream, fn, warmup, reps):
    """Median ms of fn() between two events recorded on `stream`."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(stream.device)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def one_way(src, dst, n, warmup, reps):
    """ms of dst[:n].copy_(src[:n]), timed on the source device's current stream."""
    with torch.cuda.device(src.device):
        stream = torch.cuda.current_stream(src.device)
        return events_ms(stream, lambda: dst[:n].copy_(src[:n]), warmup, reps)


def both_ways(a, b, a_in, b_in):
    """ms of a→b_in and b→a_in at once: each copy on a stream of its source, with an idle current stream
    on its destination (PyTorch makes the source stream wait on the destination's current stream)."""
    d0, d1 = a.device, b.device
    s0, s1 = torch.cuda.Stream(d0), torch.cuda.Stream(d1)
    idle0, idle1 = torch.cuda.Stream(d0), torch.cuda.Stream(d1)

    def both():
        s1.wait_stream(s0)
        with torch.cuda.stream(s0), torch.cuda.stream(idle1):
            b_in.copy_(a)
        with torch.cuda.stream(s1), torch.cuda.stream(idle0):
            a_in.copy_(b)
        s0.wait_stream(s1)

    with torch.cuda.device(d0):
        return events_ms(s0, both, WARMUP, REPS)


def parse_smi_matrix(path):
    """{(i, j): code} from `nvidia-smi topo -m` / `topo -p2p` output (GPU rows and GPU columns only)."""
    try:
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", l) for l in open(path).read().splitlines()]
    except OSError:
        return {}
    gpu = re.compile(r"GPU\d+")
    # The header starts "GPU0 GPU1 ...", a row "GPU0 X NV18 ...".
    header = next((l.split() for l in lines
                   if len(l.split()) > 1 and gpu.fullmatch(l.split()[0]) and gpu.fullmatch(l.split()[1])), None)
    if not header:
        return {}
    columns = [c for c in header if gpu.fullmatch(c)]
    out = {}
    for l in lines:
        parts = l.split()
        if len(parts) > 1 and gpu.fullmatch(parts[0]) and not gpu.fullmatch(parts[1]):
            i = int(parts[0][3:])
            for j_name, code in zip(columns, parts[1:1 + len(columns)]):
                j = int(j_name[3:])
                if i != j:
                    out[(i, j)] = code
    return out


def topology_rows(topology, out_dir):
    """Prints gpudash's /api/topology against nvidia-smi; returns the number of mismatching pairs."""
    smi = {"link": parse_smi_matrix(f"{out_dir}/topo-m.txt")}
    for cap, field in (("r", "p2p_read"), ("w", "p2p_write"), ("a", "p2p_atomics"), ("n", "p2p_nvlink")):
        smi[field] = parse_smi_matrix(f"{out_dir}/topo-p2p-{cap}.txt")
    print("\ntopology (nvidia-smi / gpudash)")
    print(f"{'pair':<10} {'link':<14} {'p2p read':<10} {'write':<10} {'atomics':<10} {'nvlink':<10} verdict")
    failures = 0
    if not topology.get("pairs"):
        print("gpudash's /api/topology has no pairs: FAIL")
        failures += 1
    for p in topology.get("pairs", []):
        key = (p.get("a"), p.get("b"))
        cols, ok = [], True
        for field in ("link", "p2p_read", "p2p_write", "p2p_atomics", "p2p_nvlink"):
            theirs = smi[field].get(key)
            if theirs is None:
                cols.append(f"-/{p.get(field)}")
                ok &= field != "link"  # topo -m must be there; -p2p output varies by driver
            else:
                cols.append(f"{theirs}/{p.get(field)}")
                ok &= theirs == p.get(field)
        failures += 0 if ok else 1
        print(f"GPU{key[0]}→GPU{key[1]:<4} {cols[0]:<14} {cols[1]:<10} {cols[2]:<10} {cols[3]:<10} {cols[4]:<10} "
              f"{'PASS' if ok else 'FAIL'}")
    return failures


def torch_round(pairs):
    """{(figure key): value} of PyTorch's copies for every pair."""
    out = {}
    for a, b in pairs:
        ta = torch.empty(SIZE, dtype=torch.uint8, device=f"cuda:{a}").fill_(1)
        tb = torch.empty(SIZE, dtype=torch.uint8, device=f"cuda:{b}").fill_(2)
        ta_in, tb_in = torch.empty_like(ta), torch.empty_like(tb)
        for src, dst, x, y in ((ta, tb_in, a, b), (tb, ta_in, b, a)):
            out[("uni", x, y)] = SIZE / one_way(src, dst, SIZE, WARMUP, REPS) / 1e6
            out[("lat", x, y)] = one_way(src, dst, 4, 10, LATENCY_REPS) * 1e3
        out[("bidi", a, b)] = 2 * SIZE / both_ways(ta, tb, ta_in, tb_in) / 1e6
        if not (torch.equal(tb_in[::65537].cpu(), ta[::65537].cpu()) and torch.equal(ta_in[::65537].cpu(), tb[::65537].cpu())):
            raise RuntimeError(f"PyTorch's copies between GPU {a} and GPU {b} did not copy")
        del ta, tb, ta_in, tb_in
        for d in (a, b):
            with torch.cuda.device(d):
                torch.cuda.empty_cache()
    return out


def gpudash_round(run, pairs):
    out = {}
    for a, b in pairs:
        for x, y in ((a, b), (b, a)):
            out[("uni", x, y)] = matrix_cell(run, "unidirectional, peer access enabled", x, y)
            out[("lat", x, y)] = matrix_cell(run, "latency, peer access enabled", x, y)
            for mode in ("unidirectional", "latency"):
                out[(f"{mode} off", x, y)] = matrix_cell(run, f"{mode}, peer access disabled", x, y)
        out[("bidi", a, b)] = matrix_cell(run, "bidirectional, peer access enabled", a, b)
        out[("bidirectional off", a, b)] = matrix_cell(run, "bidirectional, peer access disabled", a, b)
    return out


def make_rows(pairs, book):
    rule = book.row("p2p.bandwidth")
    rows = {}
    for a, b in pairs:
        for x, y in ((a, b), (b, a)):
            rows[("uni", x, y)] = Row(f"GPU{x}→GPU{y} 1 GiB one way, peer access on", "GB/s",
                                      "matrix 'unidirectional, peer access enabled'",
                                      "PyTorch dst.copy_(src) across GPUs", **rule)
        rows[("bidi", a, b)] = Row(f"GPU{a}↔GPU{b} 1 GiB both ways, peer access on", "GB/s",
                                   "matrix 'bidirectional, peer access enabled'",
                                   "PyTorch two copies on a stream of each GPU", **rule)
        for x, y in ((a, b), (b, a)):
            rows[("lat", x, y)] = Row(f"GPU{x}→GPU{y} 4 B latency, peer access on", "µs",
                                      "matrix 'latency, peer access enabled'", "PyTorch 4-byte copy_",
                                      judged=False, note="PyTorch's figure includes its op and cross-device events")
            for mode, unit in (("unidirectional", "GB/s"), ("latency", "µs")):
                rows[(f"{mode} off", x, y)] = Row(f"GPU{x}→GPU{y} {mode}, peer access off", unit,
                                                  f"matrix '{mode}, peer access disabled'", "none", judged=False,
                                                  note="no PyTorch counterpart (PyTorch always enables peer access)")
        rows[("bidirectional off", a, b)] = Row(f"GPU{a}↔GPU{b} both ways, peer access off", "GB/s",
                                                "matrix 'bidirectional, peer access disabled'", "none", judged=False,
                                                note="no PyTorch counterpart")
    return rows


def main():
    book = rules.load_or_exit()
    print(f"rules: {book.banner()}", flush=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("topology")
    ap.add_argument("out_dir")
    rules.round_arguments(ap, book, "p2p", "rounds at least (the first 2 always run)",
                          "start no round that would end after this many seconds (at least 2 rounds run)")
    args = rules.parse_round_arguments(ap, book, "p2p")
    count = torch.cuda.device_count()
    print(f"PyTorch {torch.__version__}, {count} GPUs: {[torch.cuda.get_device_name(i) for i in range(count)]}")
    try:
        topology = json.load(open(args.topology))
    except (OSError, ValueError) as e:
        print(f"cannot read {args.topology}: {e}")
        topology = {}
    failures = topology_rows(topology, args.out_dir)

    params = {"kind": "p2p", "size": SIZE, "warmup": WARMUP, "repetitions": REPS}
    pairs = [(a, b) for a in range(count) for b in range(a + 1, count)]
    rows = make_rows(pairs, book)
    group = rules.RoundGroup("p2p", rows)  # one bench run measures every pair: a round is every row
    log = CheckLog()

    def torch_side():
        try:
            return torch_round(pairs)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            print(f"round {len(group.round_seconds) + 1}: PyTorch's copies failed: {e}")
            return {}

    def finish_round(mine, theirs, index, elapsed):
        for key, row in rows.items():
            row.add(mine.get(key), theirs.get(key) if row.judged or key[0] == "lat" else None, index)
        return f"round {index + 1} done at {elapsed:.0f} s"

    rounds_run, last = interleaved_rounds(args, group, log, ("p2p", params, 120),
                                          lambda run: gpudash_round(run, pairs) if run else {}, torch_side,
                                          finish_round, torch.cuda.synchronize)
    if last is not None:
        json.dump([last], open(f"{args.out_dir}/p2p.json", "w"), indent=1)
        if last.get("params", {}).get("size") != SIZE:
            print(f"note: gpudash copied {last.get('params', {}).get('size')} bytes, PyTorch {SIZE}")
        for note in (last.get("result") or {}).get("notes") or []:
            print(f"gpudash note: {note}")
    tally = print_table(list(rows.values()), f"p2p, {rounds_run} interleaved rounds")
    check_failures = log.report()
    code = exit_code(tally.failures + check_failures + failures, tally.inconclusive)
    print(f"\np2p: {tally.passed} PASS, {tally.failed} FAIL/MISSING, {tally.inconclusive} INCONCLUSIVE, "
          f"{check_failures} failed checks or runs, {failures} topology mismatches; exit {code} ({EXIT_MEANING[code]}); "
          f"{args.rules_label}")
    sys.exit(code)


if __name__ == "__main__":
    main()
