#!/usr/bin/env python3
"""gpudash's p2p experiment and /api/topology beside PyTorch and nvidia-smi, in the same run.

Usage: python3 tests/gpu/p2p_vs_torch.py P2P_JSON TOPOLOGY_JSON OUT_DIR
  P2P_JSON       `gpudash bench --json --params '{"kind":"p2p","size":1073741824,...}' p2p`
  TOPOLOGY_JSON  GET /api/topology of a gpudash on the same machine
  OUT_DIR        where tests/gpu/p2p.sh saved `nvidia-smi topo -m` (topo-m.txt) and
                 `topo -p2p r|w|a|n` (topo-p2p-<c>.txt)

PyTorch measures the way gpudash does: a 1 GiB copy between two CUDA events on the source
GPU's current stream (PyTorch copies on the source device), 3 warm-ups, median of 10;
both directions at once on a stream of each GPU, each copy given an idle stream on its
destination so PyTorch's cross-stream sync does not serialise them; 4-byte copies, median
of 100. PyTorch enables peer access itself, so it is compared with gpudash's "peer access
enabled" figures (target ±5%); gpudash's "disabled" figures have no PyTorch counterpart.
Exits 1 when a bandwidth target or the topology comparison fails.
"""
import json
import re
import statistics
import sys

import torch

SIZE = 1 << 30
WARMUP, REPS, LATENCY_REPS = 3, 10, 100


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


def matrix(run, name):
    for m in run["result"]["matrices"]:
        if m["name"] == name:
            return m
    return None


def cell(m, a, b):
    if m is None:
        return None
    i, j = m["devices"].index(a), m["devices"].index(b)
    return m["cells"][i][j]


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


def main():
    runs = json.load(open(sys.argv[1]))
    topology = json.load(open(sys.argv[2]))
    out_dir = sys.argv[3]
    run = next((r for r in runs if r["kind"] == "p2p" and r.get("result")), None)
    count = torch.cuda.device_count()
    print(f"PyTorch {torch.__version__}, {count} GPUs: {[torch.cuda.get_device_name(i) for i in range(count)]}")
    failures = 0

    # Topology: gpudash vs nvidia-smi.
    smi = {"link": parse_smi_matrix(f"{out_dir}/topo-m.txt")}
    for cap, field in (("r", "p2p_read"), ("w", "p2p_write"), ("a", "p2p_atomics"), ("n", "p2p_nvlink")):
        smi[field] = parse_smi_matrix(f"{out_dir}/topo-p2p-{cap}.txt")
    print("\ntopology (nvidia-smi / gpudash)")
    print(f"{'pair':<10} {'link':<14} {'p2p read':<10} {'write':<10} {'atomics':<10} {'nvlink':<10} verdict")
    if not topology.get("pairs"):
        print("gpudash's /api/topology has no pairs: FAIL")
        failures += 1
    for p in topology.get("pairs", []):
        key = (p["a"], p["b"])
        cols, ok = [], True
        for field in ("link", "p2p_read", "p2p_write", "p2p_atomics", "p2p_nvlink"):
            theirs = smi[field].get(key)
            if theirs is None:
                cols.append(f"-/{p[field]}")
                ok &= field != "link"  # topo -m must be there; -p2p output varies by driver
            else:
                cols.append(f"{theirs}/{p[field]}")
                ok &= theirs == p[field]
        failures += 0 if ok else 1
        print(f"GPU{key[0]}→GPU{key[1]:<4} {cols[0]:<14} {cols[1]:<10} {cols[2]:<10} {cols[3]:<10} {cols[4]:<10} "
              f"{'PASS' if ok else 'FAIL'}")

    # Bandwidth and latency: gpudash vs PyTorch, peer access enabled.
    if run is None:
        print("no successful p2p run in", sys.argv[1])
        sys.exit(1)
    if run["params"]["size"] != SIZE:
        print(f"note: gpudash copied {run['params']['size']} bytes, PyTorch {SIZE}")
    uni = matrix(run, "unidirectional, peer access enabled")
    bidi = matrix(run, "bidirectional, peer access enabled")
    lat = matrix(run, "latency, peer access enabled")
    rows = []
    for pair in run["params"]["pairs"]:
        a, b = pair["a"], pair["b"]
        ta = torch.empty(SIZE, dtype=torch.uint8, device=f"cuda:{a}").fill_(1)
        tb = torch.empty(SIZE, dtype=torch.uint8, device=f"cuda:{b}").fill_(2)
        ta_in, tb_in = torch.empty_like(ta), torch.empty_like(tb)
        for src, dst, x, y in ((ta, tb_in, a, b), (tb, ta_in, b, a)):
            ms = one_way(src, dst, SIZE, WARMUP, REPS)
            rows.append((f"GPU{x}→GPU{y} 1 GiB one way [±5%]", cell(uni, x, y), SIZE / ms / 1e6, "GB/s", True))
        ms = both_ways(ta, tb, ta_in, tb_in)
        rows.append((f"GPU{a}↔GPU{b} 1 GiB both ways [±5%]", cell(bidi, a, b), 2 * SIZE / ms / 1e6, "GB/s", True))
        for src, dst, x, y in ((ta, tb_in, a, b), (tb, ta_in, b, a)):
            ms = one_way(src, dst, 4, 10, LATENCY_REPS)
            rows.append((f"GPU{x}→GPU{y} 4 B latency [info]", cell(lat, x, y), ms * 1e3, "µs", False))
        del ta, tb, ta_in, tb_in
        torch.cuda.empty_cache()
    for m in run["result"]["matrices"]:
        if "disabled" in m["name"]:
            for i, row in enumerate(m["cells"]):
                for j, v in enumerate(row):
                    if v is not None:
                        rows.append((f"GPU{m['devices'][i]}→GPU{m['devices'][j]} {m['name']} [info]", v, None, m["unit"], False))

    print(f"\n{'figure':<58} {'gpudash':>9} {'PyTorch':>9} unit   {'ratio':>6}  verdict")
    for what, mine, theirs, unit, judged in rows:
        ratio = mine / theirs if mine and theirs else None
        if judged:
            ok = ratio is not None and 0.95 <= ratio <= 1.05
            failures += 0 if ok else 1
            verdict = "PASS" if ok else ("MISSING" if ratio is None else "FAIL")
        else:
            verdict = "info"
        fmt = lambda v: f"{v:9.2f}" if isinstance(v, (int, float)) else f"{'-':>9}"
        print(f"{what:<58} {fmt(mine)} {fmt(theirs)} {unit:<6} {f'{ratio:6.3f}' if ratio else '     -'}  {verdict}")
    for check in run["result"]["checks"]:
        print(f"gpudash check [{'PASS' if check['passed'] else 'FAIL'}] {check['name']}: {check['detail']}")
        failures += 0 if check["passed"] else 1
    for note in run["result"]["notes"]:
        print(f"gpudash note: {note}")
    print("p2p targets:", "ALL PASS" if failures == 0 else f"{failures} FAILED")
    sys.exit(0 if failures == 0 else 1)


if __name__ == "__main__":
    main()
