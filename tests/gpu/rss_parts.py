#!/usr/bin/env python3
"""What each step gpudash takes at start costs in resident memory, in a process of its own.

Usage: python3 tests/gpu/rss_parts.py

gpudash's idle RSS with real NVML (42.0 MiB in session 13) is 20.7 MiB anonymous against 2.7 MiB
under the simulator. This loads the same libraries in the same order through ctypes, one step at a
time, and prints what each step added (anonymous and file-backed, from /proc/self/smaps_rollup),
the threads it started, and whether dlclose gave the memory back:

  NVML: dlopen, nvmlInit_v2, the device handles and the readings a sample takes;
  GPM as gpudash's GPM loop takes it: a sample per GPU allocated and read, five windows each with
  a new sample and one nvmlGpmMetricsGet (the first sample kept, as the graphics engine's long
  window keeps one), then every sample freed and malloc_trim(0);
  the lab's start-up probe: dlopen of libcuda, libcublas, libcublasLt and libnvrtc (no CUDA call),
  then dlclose of each, as cudarc's `is_culib_present` does, then malloc_trim(0);
  cuInit(0) alone (what the lab's first run adds before any context);
  a context (cuDevicePrimaryCtxRetain), then its release.

Each step also names the anonymous mappings that grew (their size tells a thread's stack, a malloc
arena or a large block apart). Last, NVML's start is tried three ways, each in a process of its own:
nvmlInit_v2; nvmlInitWithFlags(NVML_INIT_FLAG_NO_ATTACH); nvmlInit_v2 then malloc_trim(0).

Exits 1 when NVML cannot be loaded.
"""
import ctypes
import os
import subprocess
import sys
import time

import _ctypes


def anonymous_maps():
    """{start address: (size KiB, Rss KiB)} of every anonymous mapping."""
    out, key, path = {}, None, ""
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if fields and "-" in fields[0] and not fields[0].endswith(":") and len(fields) >= 5:
                key, path = fields[0].split("-")[0], (fields[5] if len(fields) > 5 else "")
            elif fields and fields[0] == "Size:":
                size = int(fields[1])
            elif fields and fields[0] == "Rss:" and not path:
                out[key] = (size, int(fields[1]))
    return out


def rollup():
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Anonymous"):
                out[key] = int(rest.split()[0])
    threads = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task"))
    return out["Rss"], out["Anonymous"], threads


class Steps:
    def __init__(self):
        self.maps = anonymous_maps()
        self.last = rollup()
        rss, anon, threads = self.last
        print(f"start: RSS {rss / 1024:.1f} MiB ({anon / 1024:.1f} anonymous), {len(threads)} thread(s)")
        print(f"{'step':<58} {'+RSS MiB':>9} {'+anon':>7} {'+file':>7}  new threads")

    def step(self, what):
        now = rollup()
        rss, anon, threads = now
        d_rss, d_anon = rss - self.last[0], anon - self.last[1]
        new = [t for t in threads if t not in self.last[2] or threads.count(t) > self.last[2].count(t)]
        print(f"{what:<58} {d_rss / 1024:9.1f} {d_anon / 1024:7.1f} {(d_rss - d_anon) / 1024:7.1f}  {' '.join(sorted(set(new)))}")
        maps = anonymous_maps()
        grown = sorted(((rss - self.maps.get(k, (0, 0))[1], size) for k, (size, rss) in maps.items()), reverse=True)
        grown = [(d, size) for d, size in grown if d >= 256]
        if grown:
            print("    anonymous mappings that grew: " + ", ".join(f"+{d / 1024:.1f} MiB of {size / 1024:.1f} MiB"
                                                              for d, size in grown[:6]))
        self.maps = maps
        self.last = now


def mapped(name):
    with open("/proc/self/maps") as f:
        return any(name in line for line in f)


def load(names):
    for name in names:
        try:
            return ctypes.CDLL(name, mode=ctypes.RTLD_LOCAL), name
        except OSError:
            continue
    return None, None


def nvml_start(how):
    """Resident memory a fresh process gains from starting NVML `how`, with a device handle and a reading."""
    before = rollup()
    nvml, _ = load(["libnvidia-ml.so.1"])
    if how == "flags":
        rc = nvml.nvmlInitWithFlags(2)  # NVML_INIT_FLAG_NO_ATTACH
    else:
        rc = nvml.nvmlInit_v2()
    h = ctypes.c_void_p()
    nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
    mem = (ctypes.c_ulonglong * 3)()
    nvml.nvmlDeviceGetMemoryInfo(h, mem)
    if how == "trim":
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    after = rollup()
    print(f"  {how:<6} rc {rc}: +{(after[0] - before[0]) / 1024:.1f} MiB RSS (+{(after[1] - before[1]) / 1024:.1f} "
          f"anonymous), {len(after[2]) - len(before[2])} new thread(s)")


class GpmMetric(ctypes.Structure):
    _fields_ = [("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_int), ("value", ctypes.c_double),
                ("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p), ("unit", ctypes.c_char_p)]


class GpmMetricsGet(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("numMetrics", ctypes.c_uint), ("sample1", ctypes.c_void_p),
                ("sample2", ctypes.c_void_p), ("metrics", GpmMetric * 210)]


def gpm_steps(nvml, handles, s):
    """What gpudash's GPM loop holds: a sample per GPU kept open, a new one each window, the graphics
    engine's long window's sample; and what reading the metrics and freeing samples gives back."""
    def alloc():
        sample = ctypes.c_void_p()
        rc = nvml.nvmlGpmSampleAlloc(ctypes.byref(sample))
        return sample if rc == 0 else None

    first = [alloc() for _ in handles]
    if any(x is None for x in first):
        print("GPM: nvmlGpmSampleAlloc refused; skipped")
        return
    s.step(f"GPM: one sample allocated per GPU ({len(handles)})")
    for h, sample in zip(handles, first):
        rc = nvml.nvmlGpmSampleGet(h, sample)
        if rc != 0:
            print(f"GPM: nvmlGpmSampleGet = {rc}; skipped")
            return
    s.step("GPM: nvmlGpmSampleGet into each")
    kept = list(first)
    values = []
    for window in range(5):
        time.sleep(0.2)  # a short window; its length does not change what is held
        nxt = [alloc() for _ in handles]
        for h, sample, previous in zip(handles, nxt, kept):
            nvml.nvmlGpmSampleGet(h, sample)
            get = GpmMetricsGet(version=1, numMetrics=3, sample1=previous, sample2=sample)
            for i, metric in enumerate((2, 5, 10)):  # SM activity, any tensor, DRAM bandwidth
                get.metrics[i].metricId = metric
            rc = nvml.nvmlGpmMetricsGet(ctypes.byref(get))
            values.append((rc, round(get.metrics[0].value, 2)))
            if window > 0:
                nvml.nvmlGpmSampleFree(previous)  # the first window's opening sample stays, as the long window's
        kept = nxt
        s.step(f"GPM: window {window + 1}: a new sample each, metrics read (rc, SM %: {values[-1]})")
    for sample in kept + first:
        nvml.nvmlGpmSampleFree(sample)
    s.step("GPM: every sample freed")
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    s.step("malloc_trim(0)")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--nvml":
        nvml_start(sys.argv[2])
        return 0
    s = Steps()
    nvml, _ = load(["libnvidia-ml.so.1"])
    if nvml is None:
        print("rss_parts.py: libnvidia-ml.so.1 cannot be loaded")
        return 1
    s.step("dlopen libnvidia-ml")
    assert nvml.nvmlInit_v2() == 0
    s.step("nvmlInit_v2")
    count = ctypes.c_uint()
    nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    handles = []
    for i in range(count.value):
        h = ctypes.c_void_p()
        nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h))
        handles.append(h)
    mem = (ctypes.c_ulonglong * 3)()
    util = (ctypes.c_uint * 2)()
    for _ in range(20):
        for h in handles:
            nvml.nvmlDeviceGetMemoryInfo(h, mem)
            nvml.nvmlDeviceGetUtilizationRates(h, util)
    s.step(f"{count.value} device handle(s), 20 samples of memory and util")
    gpm_steps(nvml, handles, s)

    libs = [
        ("libcuda", ["libcuda.so.1", "libcuda.so"]),
        ("libcublas", ["libcublas.so.13", "libcublas.so"]),
        ("libcublasLt", ["libcublasLt.so.13", "libcublasLt.so"]),
        ("libnvrtc", ["libnvrtc.so.13", "libnvrtc.so"]),
    ]
    for short, names in libs:
        lib, name = load(names)
        if lib is None:
            print(f"{short}: not found ({', '.join(names)})")
            continue
        s.step(f"dlopen {name}")
        _ctypes.dlclose(lib._handle)
        s.step(f"  dlclose {name}: still mapped = {mapped(short + '.so')}")
    # What the probe left behind (libcublas' start leaves blocks it never frees): malloc_trim(0) gives
    # back free pages inside the heaps; whatever remains is still allocated.
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    s.step("malloc_trim(0) after the probe")

    cuda, name = load(["libcuda.so.1", "libcuda.so"])
    if cuda is None:
        return 0
    s.step(f"dlopen {name} again (kept)")
    rc = cuda.cuInit(0)
    s.step(f"cuInit(0) = {rc}")
    dev = ctypes.c_int()
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p()
    rc = cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
    cuda.cuCtxSetCurrent(ctx)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    s.step(f"primary context on device 0 = {rc}")
    cuda.cuDevicePrimaryCtxRelease_v2(dev)
    s.step("primary context released")
    nvml.nvmlShutdown()
    s.step("nvmlShutdown")
    print("NVML's start three ways, each in a fresh process (init: nvmlInit_v2; flags: nvmlInitWithFlags(NO_ATTACH); "
          "trim: nvmlInit_v2 then malloc_trim(0)):", flush=True)
    for how in ("init", "flags", "trim"):
        subprocess.run([sys.executable, __file__, "--nvml", how], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
