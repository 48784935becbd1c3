#!/usr/bin/env python3
"""Plain CUDA driver API latency, as the reference for gpudash's latency experiment.

Usage: python3 tests/gpu/cuda_latency.py [DEVICE] [REPETITIONS]   (prints the figures)
or, from lab_vs_torch.py: `measure(device, repetitions)` -> {figure name: µs}.

No PyTorch, no nvcc: libcuda through ctypes, an empty kernel written in PTX and JIT-compiled by
the driver (cuModuleLoadData), a non-blocking stream, a default event. Each call is timed on the
host with perf_counter_ns, as gpudash times its calls with a monotonic clock, and the median of
the ctypes call overhead (perf_counter_ns around cuCtxGetCurrent, a call that does no work) is
subtracted, so the figures are the driver's own cost to within ~0.2 µs:

  kernel launch (host)            cuLaunchKernel of the empty kernel, <<<1,1>>>, synchronized every 256
  event record (host)             cuEventRecord on the stream
  synchronize, idle stream (host) cuStreamSynchronize of a stream with nothing queued
  launch + synchronize (host)     cuLaunchKernel then cuStreamSynchronize

These are the figures docs/BENCHMARKS.md quotes as "plain CUDA".
"""
import ctypes
import statistics
import sys
import time

PTX = b"""
.version 7.8
.target sm_90
.address_size 64
.visible .entry empty_kernel()
{
    ret;
}
"""
BATCH = 256


class Cuda:
    def __init__(self, device):
        try:
            self.lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise RuntimeError(f"libcuda.so.1 not found: {e}") from e
        self.check("cuInit", 0)
        dev = ctypes.c_int()
        self.check("cuDeviceGet", ctypes.byref(dev), device)
        self.ctx = ctypes.c_void_p()
        self.check("cuDevicePrimaryCtxRetain", ctypes.byref(self.ctx), dev)
        self.check("cuCtxSetCurrent", self.ctx)
        self.dev = dev
        self.module = ctypes.c_void_p()
        self.check("cuModuleLoadData", ctypes.byref(self.module), ctypes.c_char_p(PTX))
        self.func = ctypes.c_void_p()
        self.check("cuModuleGetFunction", ctypes.byref(self.func), self.module, b"empty_kernel")
        self.stream = ctypes.c_void_p()
        self.check("cuStreamCreate", ctypes.byref(self.stream), 1)  # CU_STREAM_NON_BLOCKING
        self.event = ctypes.c_void_p()
        self.check("cuEventCreate", ctypes.byref(self.event), 0)  # CU_EVENT_DEFAULT

    def check(self, name, *args):
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(rc, ctypes.byref(text))
            raise RuntimeError(f"{name} failed: {rc} {text.value.decode() if text.value else ''}")

    def close(self):
        self.lib.cuStreamSynchronize(self.stream)
        self.lib.cuEventDestroy_v2(self.event)
        self.lib.cuStreamDestroy_v2(self.stream)
        self.lib.cuModuleUnload(self.module)
        self.lib.cuDevicePrimaryCtxRelease_v2(self.dev)


def measure(device=0, repetitions=2000, warmup=100):
    """{figure name: median µs} with the ctypes call overhead subtracted, plus 'ctypes overhead'."""
    cuda = Cuda(device)
    lib, func, stream, event = cuda.lib, cuda.func, cuda.stream, cuda.event
    launch_fn, record_fn, sync_fn = lib.cuLaunchKernel, lib.cuEventRecord, lib.cuStreamSynchronize
    # Arguments converted once, so each timed call converts as little as possible.
    one, zero, null = ctypes.c_uint(1), ctypes.c_uint(0), ctypes.c_void_p()
    launch_args = (func, one, one, one, one, one, one, zero, stream, null, null)
    ctx_out = ctypes.c_void_p()
    overhead_fn, overhead_arg = lib.cuCtxGetCurrent, ctypes.byref(ctx_out)
    clock = time.perf_counter_ns

    def launch():
        rc = launch_fn(*launch_args)
        if rc != 0:
            raise RuntimeError(f"cuLaunchKernel failed: {rc}")

    def sync():
        rc = sync_fn(stream)
        if rc != 0:
            raise RuntimeError(f"cuStreamSynchronize failed: {rc}")

    for _ in range(warmup):
        launch()
    sync()
    overhead, launches, records, idle, round_trips = [], [], [], [], []
    for _ in range(repetitions):
        t = clock()
        overhead_fn(overhead_arg)
        overhead.append(clock() - t)
    for i in range(repetitions):
        t = clock()
        launch_fn(*launch_args)
        launches.append(clock() - t)
        if i % BATCH == BATCH - 1:
            sync()
    sync()
    for i in range(repetitions):
        t = clock()
        record_fn(event, stream)
        records.append(clock() - t)
        if i % BATCH == BATCH - 1:
            sync()
    sync()
    for _ in range(repetitions):
        t = clock()
        sync_fn(stream)
        idle.append(clock() - t)
        t = clock()
        launch_fn(*launch_args)
        sync_fn(stream)
        round_trips.append(clock() - t)
    # A launch or record that failed would have returned quickly and flattered the figures: check once.
    launch()
    cuda.check("cuEventRecord", event, stream)
    sync()
    cuda.close()
    base = statistics.median(overhead)
    us = lambda samples, calls=1: max(statistics.median(samples) - calls * base, 0.0) / 1e3
    return {
        "kernel launch (host)": us(launches),
        "event record (host)": us(records),
        "synchronize, idle stream (host)": us(idle),
        "launch + synchronize (host)": us(round_trips, 2),
        "ctypes overhead": base / 1e3,
    }


if __name__ == "__main__":
    dev = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    for name, value in measure(dev, reps).items():
        print(f"plain CUDA (driver API via ctypes, GPU {dev}): {name:<32} {value:7.2f} µs")
