#!/usr/bin/env python3
"""What other ways of reading the GPUs cost on this machine: the reference figures
docs/BENCHMARKS.md quotes beside gpudash's sampler cost, produced here and logged by h200.sh.

Usage: python3 tests/gpu/peer_costs.py

  nvidia-smi   `nvidia-smi --query-gpu=<5 fields> --format=csv -lms 100` for 5 s: its threads'
               CPU (/proc/PID/task/*/schedstat) per GPU per tick, the first second (start-up) left out;
  pynvml       the cheap gauges a Python monitor reads per GPU (memory, utilization, power,
               temperature, SM clock), 1,000 samples: CPU µs per GPU per sample (thread CPU time);
               skipped when nvidia-ml-py is not installed;
  nvitop       its Python API's full refresh (device snapshot + processes) of every GPU, 20 times:
               CPU ms per refresh; skipped when nvitop is not installed.

Only figures printed here are quoted in the docs; a skipped tool's figure is not quoted.
Prints figures only (exit 0), or exits 1 when nvidia-smi itself cannot be measured.
"""
import os
import subprocess
import sys
import threading
import time

FIELDS = "index,memory.used,utilization.gpu,power.draw,temperature.gpu"


def process_cpu_ns(pid):
    """CPU ns of every thread of the process: schedstat (ns), else stat's clock ticks."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])
        except (OSError, ValueError, IndexError):
            try:
                fields = open(f"/proc/{pid}/task/{tid}/stat").read().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
            except (OSError, ValueError, IndexError):
                continue
    return total


def nvidia_smi_cost():
    gpus = len(subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                              capture_output=True, text=True, check=True).stdout.split())
    proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader", "-lms", "100"],
                            stdout=subprocess.PIPE, text=True)
    lines = [0]

    def count():
        for _ in proc.stdout:
            lines[0] += 1

    reader = threading.Thread(target=count, daemon=True)
    reader.start()
    try:
        time.sleep(1)  # start-up is left out of the measuring window
        cpu0, lines0, t0 = process_cpu_ns(proc.pid), lines[0], time.monotonic()
        time.sleep(4)
        cpu1, lines1, t1 = process_cpu_ns(proc.pid), lines[0], time.monotonic()
    finally:
        proc.terminate()
        proc.wait(timeout=5)
    ticks = (lines1 - lines0) / max(gpus, 1)
    if ticks <= 0:
        raise RuntimeError("nvidia-smi printed nothing in 4 s")
    cpu_ms = (cpu1 - cpu0) / 1e6
    print(f"nvidia-smi --query-gpu=<5 fields> -lms 100: {ticks:.0f} ticks in {t1 - t0:.1f} s, "
          f"{cpu_ms / ticks / gpus * 1e3:.0f} µs CPU per GPU per tick, {cpu_ms / (t1 - t0) / 10:.2f}% of one core "
          f"({gpus} GPUs, {cpu_ms:.1f} ms CPU in the window, from /proc/PID/task/*/schedstat)")


def pynvml_cost():
    try:
        import pynvml
    except ImportError:
        print("pynvml: not installed here (nvidia-ml-py): no figure")
        return
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def sample(h):
        pynvml.nvmlDeviceGetMemoryInfo(h)
        pynvml.nvmlDeviceGetUtilizationRates(h)
        pynvml.nvmlDeviceGetPowerUsage(h)
        pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
        pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)

    for h in handles:
        for _ in range(20):
            sample(h)
    n = 1000
    cpu, wall = time.thread_time_ns(), time.perf_counter_ns()
    for _ in range(n):
        for h in handles:
            sample(h)
    cpu, wall = time.thread_time_ns() - cpu, time.perf_counter_ns() - wall
    per = n * len(handles)
    print(f"pynvml {getattr(pynvml, '__version__', '')}: 5 cheap gauges per GPU: {cpu / per / 1e3:.1f} µs CPU, "
          f"{wall / per / 1e3:.1f} µs wall per GPU per sample ({n} samples × {len(handles)} GPUs)")
    pynvml.nvmlShutdown()


def nvitop_cost():
    try:
        import nvitop
        from nvitop import Device
    except ImportError:
        print("nvitop: not installed here: no figure")
        return
    devices = Device.all()

    def refresh():
        for d in devices:
            d.as_snapshot()
            d.processes()

    refresh()
    n = 20
    cpu, wall = time.process_time_ns(), time.perf_counter_ns()
    for _ in range(n):
        refresh()
    cpu, wall = time.process_time_ns() - cpu, time.perf_counter_ns() - wall
    print(f"nvitop {nvitop.__version__} Python API, full refresh (snapshot + processes) of {len(devices)} GPUs: "
          f"{cpu / n / 1e6:.1f} ms CPU, {wall / n / 1e6:.1f} ms wall per refresh")


def main():
    try:
        nvidia_smi_cost()
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        print(f"nvidia-smi: cannot measure ({e})")
        sys.exit(1)
    for measure in (pynvml_cost, nvitop_cost):
        try:
            measure()
        except Exception as e:  # noqa: BLE001 — a peer's failure is reported, never fatal here
            print(f"{measure.__name__}: failed ({type(e).__name__}: {e})")


if __name__ == "__main__":
    main()
