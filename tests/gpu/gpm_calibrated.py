"""GPM's SM activity against a load whose answer is known: tests/gpu/sm_load.cu keeps exactly K of
the GPU's SMs busy for a duty cycle, so SM activity must read K / SMs × duty. For each load the
table gives that expectation beside gpudash's SM activity (its GPM loop, /api/devices), pynvml's
GPM read over the same seconds, and NVML's per-process SM utilization (what gpudash's process table
shows as "SM util (NVML)", read through pynvml and through gpudash). gpudash must be within ±3
points of the expectation; the others are printed for comparison.

    python3 tests/gpu/gpm_calibrated.py URL    (gpudash serving GPU 0 at URL; builds sm_load with nvcc)

Exits 1 when a load's SM activity in gpudash misses the expectation or a figure is missing.
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import pynvml

from gpm_vs_pynvml import gpudash_windows, pynvml_windows

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = 3.0  # points of SM activity
LOADS = [(13, 1.0), (66, 1.0), (132, 1.0), (132, 0.5)]  # (busy SMs, duty); K is capped at the GPU's SMs
SETTLE_S, MEASURE_S = 3, 6


def build():
    out = os.path.join(tempfile.gettempdir(), f"gpudash-sm_load-{os.getpid()}")
    cmd = ["nvcc", "-O2", "-arch=native", "-o", out, os.path.join(HERE, "sm_load.cu")]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"FAIL: building sm_load failed: {' '.join(cmd)}\n{done.stderr}")
    return out


def get(url, path):
    with urllib.request.urlopen(f"{url}{path}", timeout=5) as response:
        return json.load(response)


def gpudash_process_sm(url, pid):
    """gpudash's NVML per-process SM utilization of `pid`, if listed."""
    for p in get(url, "/api/processes").get("processes", []):
        if p["pid"] == pid:
            return p.get("sm_util")
    return None


def nvml_process_sm(handle, pid, since_us):
    """NVML's per-process SM utilization samples of `pid` since `since_us`: their mean, or None."""
    try:
        samples = pynvml.nvmlDeviceGetProcessUtilization(handle, since_us)
    except pynvml.NVMLError:
        return None
    mine = [s.smUtil for s in samples if s.pid == pid]
    return sum(mine) / len(mine) if mine else None


def main():
    url = sys.argv[1]
    program = build()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    failed = False
    rows = []
    for k, duty in LOADS:
        load = subprocess.Popen([program, str(k), str(duty), str(SETTLE_S + MEASURE_S + 4)], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        try:
            header = load.stdout.readline().strip()  # "sm_load: K of SMS SMs busy ..."
            total = int(header.split(" of ")[1].split()[0]) if " of " in header else 0
            time.sleep(SETTLE_S)
            since_us = int(time.time() * 1e6)
            theirs, ours = [], []
            reader = threading.Thread(target=pynvml_windows, args=(handle, MEASURE_S, theirs))
            reader.start()
            gpudash_windows(url, MEASURE_S, ours)
            reader.join()
            process_nvml = nvml_process_sm(handle, load.pid, since_us)
            process_gpudash = gpudash_process_sm(url, load.pid)
        finally:
            rest, _ = load.communicate(timeout=30)
        if load.returncode != 0 or total == 0:
            print(f"FAIL: sm_load {k} {duty} exited {load.returncode}: {header} {rest.strip()}")
            failed = True
            continue
        expected = 100.0 * k / total * duty
        mine = sum(w[0] for w in ours) / len(ours) if ours else None
        reference = sum(w[0] for w in theirs) / len(theirs) if theirs else None
        ok = mine is not None and abs(mine - expected) <= TOLERANCE
        failed |= not ok
        rows.append((k, total, duty, expected, mine, reference, process_nvml, process_gpudash, len(ours), ok))
    show = lambda v: f"{v:8.2f}" if isinstance(v, (int, float)) else f"{'-':>8}"
    print(f"\nGPM SM activity against a calibrated load (tolerance ±{TOLERANCE:.0f} points; {MEASURE_S} s each)")
    print(f"{'busy SMs':>9} {'duty':>5} {'expected':>9} {'gpudash':>8} {'pynvml GPM':>10} "
          f"{'NVML per-process SM util':>25} {'(via gpudash)':>13} {'windows':>7}  verdict")
    for k, total, duty, expected, mine, reference, process_nvml, process_gpudash, windows, ok in rows:
        print(f"{k:>4}/{total:<4} {duty:>5.2f} {expected:>8.2f}% {show(mine)}% {show(reference)}% "
              f"{show(process_nvml):>24}% {show(process_gpudash):>12}% {windows:>7}  {'PASS' if ok else 'FAIL'}")
    print("gpm calibrated: " + ("FAIL" if failed else "PASS"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
