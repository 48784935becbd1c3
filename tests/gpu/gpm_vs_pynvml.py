"""Reads NVML's GPM through pynvml (nvidia-ml-py) over the same seconds as gpudash's GPM loop
and prints both side by side, with a verdict: SM and tensor activity must agree within ±5 points.

    python3 tests/gpu/gpm_vs_pynvml.py URL LOAD_NAME [SECONDS]

Exits 1 when they disagree or either side has no figures.
"""
import json
import sys
import threading
import time
import urllib.request

import pynvml

SM_UTIL, ANY_TENSOR_UTIL, DRAM_BW_UTIL = 2, 5, 10  # nvmlGpmMetricId_t
TOLERANCE = 5.0


def pynvml_windows(handle, seconds, out):
    """One GPM window per second, like gpudash's loop: [(sm, tensor, dram), ...]."""
    previous = pynvml.nvmlGpmSampleAlloc()
    pynvml.nvmlGpmSampleGet(handle, previous)
    for _ in range(seconds):
        time.sleep(1.0)
        current = pynvml.nvmlGpmSampleAlloc()
        pynvml.nvmlGpmSampleGet(handle, current)
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 3
        request.sample1 = previous
        request.sample2 = current
        for i, metric in enumerate((SM_UTIL, ANY_TENSOR_UTIL, DRAM_BW_UTIL)):
            request.metrics[i].metricId = metric
        pynvml.nvmlGpmMetricsGet(request)
        refused = [request.metrics[i].metricId for i in range(3) if request.metrics[i].nvmlReturn != 0]
        if refused:
            raise SystemExit(f"FAIL: pynvml's GPM did not compute metrics {refused}: no reference to compare with")
        out.append(tuple(request.metrics[i].value for i in range(3)))
        pynvml.nvmlGpmSampleFree(previous)
        previous = current
    pynvml.nvmlGpmSampleFree(previous)


def gpudash_windows(url, seconds, out):
    """gpudash's windows of GPU 0 over the same seconds, one per distinct window."""
    seen = set()
    end = time.time() + seconds
    while time.time() < end:
        with urllib.request.urlopen(f"{url}/api/devices", timeout=5) as response:
            body = json.load(response)
        activity = (body["devices"][0].get("latest") or {}).get("activity") or {}
        if activity.get("unavailable"):
            raise SystemExit(f"gpudash says activity is n/a: {activity['unavailable']}")
        stamp = activity.get("timestamp_ms")
        if stamp is not None and stamp not in seen:
            missing = [k for k in ("sm_active", "tensor_active", "dram_active") if activity.get(k) is None]
            if missing:
                raise SystemExit(f"FAIL: gpudash's window at {stamp} has no {', '.join(missing)}")
            seen.add(stamp)
            out.append((activity["sm_active"], activity["tensor_active"], activity["dram_active"]))
        time.sleep(0.25)


def mean(rows, i):
    return sum(r[i] for r in rows) / len(rows) if rows else float("nan")


def main():
    url, load = sys.argv[1], sys.argv[2]
    seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    util = []
    theirs, ours = [], []
    reader = threading.Thread(target=pynvml_windows, args=(handle, seconds, theirs))
    reader.start()
    gpudash_windows(url, seconds, ours)
    reader.join()
    util.append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    if not theirs or not ours:
        print(f"{load}: no windows (pynvml {len(theirs)}, gpudash {len(ours)})")
        return 1
    print(f"== {load}: NVML utilization.gpu {util[0]}%, {len(theirs)} pynvml windows, {len(ours)} gpudash windows")
    print(f"  {'figure':<16} {'pynvml GPM':>11} {'gpudash':>9} {'diff':>7}  verdict")
    failed = False
    for i, name in enumerate(("SM activity", "tensor activity", "DRAM bandwidth")):
        a, b = mean(theirs, i), mean(ours, i)
        ok = abs(a - b) <= TOLERANCE
        # DRAM is printed for context; SM and tensor activity are the criterion.
        verdict = ("ok" if ok else "MISMATCH") if i < 2 else "(context)"
        failed |= i < 2 and not ok
        print(f"  {name:<16} {a:>10.2f}% {b:>8.2f}% {b - a:>+7.2f}  {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
