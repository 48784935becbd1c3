#!/usr/bin/env python3
"""Plain CUDA driver API latency, as the reference for gpudash's latency experiment.

Usage: python3 tests/gpu/cuda_latency.py [DEVICE] [REPETITIONS]   (prints the figures)
or, from lab_vs_torch.py: `measure(device, repetitions, warmup)` -> {figure name: µs}.

The measuring is done by tests/gpu/cuda_latency.c, a C program on the driver API (no PyTorch, no
runtime API, no interpreter between the clock and the call), built here with gcc against the CUDA
toolkit's cuda.h and linked to libcuda.so.1. It times each call with CLOCK_MONOTONIC in the order
and batching gpudash's lab uses (lab/src/cuda/latency.rs):

  kernel launch (host)            cuLaunchKernel of an empty kernel, <<<1,1>>>, synchronized every 256
  event record (host)             cuEventRecord on the stream
  synchronize, idle stream (host) cuStreamSynchronize of a stream with nothing queued
  launch + synchronize (host)     cuLaunchKernel then cuStreamSynchronize
  queued empty kernels, per launch (GPU events; launch-rate bound)
                                  events around 100 empty kernels launched back to back, / 100
  CUDA graph of empty kernels, per kernel (GPU events)
                                  events around one launch of a graph of 1000 captured empty kernels, / 1000

(An earlier version called libcuda through ctypes and subtracted ctypes' own call cost; that
correction was too coarse: it left ~1 µs of Python in the launch figure.)
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "cuda_latency.c")
INCLUDES = [os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/include", "/usr/local/cuda/include",
            "/usr/include"]
_binaries = {}


def build(source=SOURCE):
    """The compiled C program `source` (built once per process); raises with the compiler's words."""
    if source in _binaries:
        return _binaries[source]
    include = next((d for d in INCLUDES if os.path.exists(os.path.join(d, "cuda.h"))), None)
    if include is None:
        raise RuntimeError(f"cuda.h not found in {', '.join(INCLUDES)}: set CUDA_HOME to the CUDA toolkit")
    name = os.path.splitext(os.path.basename(source))[0]
    out = os.path.join(tempfile.gettempdir(), f"gpudash-{name}-{os.getpid()}")
    cmd = ["gcc", "-O2", "-Wall", f"-I{include}", source, "-o", out, "-l:libcuda.so.1"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building {source} failed: {' '.join(cmd)}\n{done.stderr}")
    _binaries[source] = out
    return out


def pageable(device, warmup, repetitions, sizes):
    """{(copy, bytes): median GB/s} of pageable copies in C (pageable_copies.c), the way gpudash times them."""
    program = build(os.path.join(HERE, "pageable_copies.c"))
    done = subprocess.run([program, str(device), str(warmup), str(repetitions), *map(str, sizes)],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"pageable_copies exited {done.returncode}: {done.stderr.strip()}")
    figures = {}
    for line in done.stdout.splitlines():
        copy, n, rate = line.split("\t")
        figures[(copy, int(n))] = float(rate)
    if len(figures) != 2 * len(sizes):
        raise RuntimeError(f"pageable_copies printed {len(figures)} figures, expected {2 * len(sizes)}")
    return figures


def measure(device=0, repetitions=2000, warmup=100):
    """{figure name: median µs}, measured by the C program."""
    done = subprocess.run([build(), str(device), str(repetitions), str(warmup)], capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"cuda_latency exited {done.returncode}: {done.stderr.strip()}")
    figures = {}
    for line in done.stdout.splitlines():
        name, _, value = line.partition("\t")
        figures[name] = float(value)
    if len(figures) != 6:
        raise RuntimeError(f"cuda_latency printed {len(figures)} figures, expected 6: {done.stdout!r}")
    return figures


def memory_pool(device, block_bytes, blocks, free_every, repetitions):
    """The memory experiment's steps in C (memory_pool.c): ({label: (used, reserved)}, pooled µs, fresh µs)."""
    program = build(os.path.join(HERE, "memory_pool.c"))
    args = [program, str(device), str(block_bytes), str(blocks), str(free_every), str(repetitions)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"memory_pool exited {done.returncode}: {done.stderr.strip()}")
    steps, times = {}, {}
    for line in done.stdout.splitlines():
        fields = line.split("\t")
        if fields[0] == "step":
            steps[fields[1]] = (int(fields[2]), int(fields[3]))
        else:
            times[fields[0]] = float(fields[1])
    if "pooled_us" not in times or "fresh_us" not in times or len(steps) != blocks + 4:
        raise RuntimeError(f"memory_pool printed {done.stdout!r}")
    return steps, times["pooled_us"], times["fresh_us"]


if __name__ == "__main__":
    dev = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
    for name, value in measure(dev, reps).items():
        print(f"plain CUDA (driver API in C, GPU {dev}): {name:<66} {value:7.3f} µs")
