#!/usr/bin/env python3
"""What each NVML call that gpudash's sampler makes costs on this machine, called the way the
loops call it: once per tick, cold, with the thread asleep in between (not back to back, where
caches are warm and a call looks cheaper than it is in a monitor).

Usage: python3 tests/gpu/nvml_costs.py [--seconds 12] [--tick-ms 200]

For every call: CPU µs (this thread's CPU time, time.thread_time_ns) and wall µs per call,
median and mean over the ticks. pynvml's own overhead (a ctypes call, ~1-2 µs) is included,
so these are upper bounds for the same call from Rust. GPM's metrics computation is timed
for each metric alone and for the sets gpudash could ask for, one call per window as the GPM loop makes it,
to show which metrics cost what.

Prints figures only; exits 1 when NVML cannot be opened.
"""
import argparse
import statistics
import sys
import time

try:
    import pynvml as N
except ImportError:
    print("nvml_costs: nvidia-ml-py (pynvml) is not installed here: no figures")
    sys.exit(1)


def calls(h, n_links):
    """The calls gpudash's loops make, by loop, as (loop, name, thunk)."""
    fast = [
        ("device_by_index", lambda: N.nvmlDeviceGetHandleByIndex(0)),
        ("memory_info", lambda: N.nvmlDeviceGetMemoryInfo(h)),
        ("utilization_rates", lambda: N.nvmlDeviceGetUtilizationRates(h)),
        ("temperature", lambda: N.nvmlDeviceGetTemperature(h, N.NVML_TEMPERATURE_GPU)),
        ("power_usage", lambda: N.nvmlDeviceGetPowerUsage(h)),
        ("enforced_power_limit", lambda: N.nvmlDeviceGetEnforcedPowerLimit(h)),
        ("clock_info(SM)", lambda: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM)),
        ("clock_info(Memory)", lambda: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_MEM)),
        ("clock_info(Graphics)", lambda: N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_GRAPHICS)),
        ("performance_state", lambda: N.nvmlDeviceGetPerformanceState(h)),
        ("current_throttle_reasons", lambda: N.nvmlDeviceGetCurrentClocksEventReasons(h)),
        ("encoder_utilization", lambda: N.nvmlDeviceGetEncoderUtilization(h)),
        ("decoder_utilization", lambda: N.nvmlDeviceGetDecoderUtilization(h)),
        ("current_pcie_link_gen", lambda: N.nvmlDeviceGetCurrPcieLinkGeneration(h)),
    ]
    facts = [
        ("power_management_limit", lambda: N.nvmlDeviceGetPowerManagementLimit(h)),
        ("current_pcie_link_width", lambda: N.nvmlDeviceGetCurrPcieLinkWidth(h)),
        ("persistence_mode", lambda: N.nvmlDeviceGetPersistenceMode(h)),
        ("compute_mode", lambda: N.nvmlDeviceGetComputeMode(h)),
        ("mig_mode", lambda: N.nvmlDeviceGetMigMode(h)),
        ("ecc_mode", lambda: N.nvmlDeviceGetEccMode(h)),
        ("total_ecc_errors x4", lambda: [N.nvmlDeviceGetTotalEccErrors(h, e, c)
                                         for e in (0, 1) for c in (0, 1)]),
        ("retired_pages x2", lambda: [N.nvmlDeviceGetRetiredPages(h, c) for c in (0, 1)]),
        ("retired_pages_pending", lambda: N.nvmlDeviceGetRetiredPagesPendingStatus(h)),
        ("remapped rows (field values x4)", lambda: N.nvmlDeviceGetFieldValues(h, [
            N.NVML_FI_DEV_REMAPPED_COR, N.NVML_FI_DEV_REMAPPED_UNC,
            N.NVML_FI_DEV_REMAPPED_PENDING, N.NVML_FI_DEV_REMAPPED_FAILURE])),
        ("bar1_memory_info", lambda: N.nvmlDeviceGetBAR1MemoryInfo(h)),
        (f"nvlink_state x{n_links}", lambda: [N.nvmlDeviceGetNvLinkState(h, link) for link in range(n_links)]),
    ]
    every_pass = [
        ("pcie_throughput(TX)", lambda: N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_TX_BYTES)),
        ("pcie_throughput(RX)", lambda: N.nvmlDeviceGetPcieThroughput(h, N.NVML_PCIE_UTIL_RX_BYTES)),
        ("pcie_replay_counter", lambda: N.nvmlDeviceGetPcieReplayCounter(h)),
        ("total_energy", lambda: N.nvmlDeviceGetTotalEnergyConsumption(h)),
        ("running_compute_processes", lambda: N.nvmlDeviceGetComputeRunningProcesses(h)),
        ("running_graphics_processes", lambda: N.nvmlDeviceGetGraphicsRunningProcesses(h)),
        ("process_utilization", lambda: process_utilization(h)),
    ]
    return [("fast", *c) for c in fast] + [("slow: facts", *c) for c in facts] + \
        [("slow: every pass", *c) for c in every_pass]


def process_utilization(h):
    try:
        return N.nvmlDeviceGetProcessUtilization(h, 0)
    except N.NVMLError_NotFound:
        return []


def timed(thunk):
    c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
    try:
        thunk()
        ok = True
    except N.NVMLError:
        ok = False
    return (time.thread_time_ns() - c0) / 1e3, (time.perf_counter_ns() - w0) / 1e3, ok


GPM_IDS = ["SM_UTIL", "SM_OCCUPANCY", "ANY_TENSOR_UTIL", "DRAM_BW_UTIL", "FP64_UTIL", "FP32_UTIL", "FP16_UTIL",
           "GRAPHICS_UTIL", "PCIE_TX_PER_SEC", "PCIE_RX_PER_SEC", "NVLINK_TOTAL_TX_PER_SEC", "NVLINK_TOTAL_RX_PER_SEC"]


def gpm_costs(h, rounds, window_s):
    """GPM: one sample get per window, and one metrics computation per window (as gpudash makes it),
    for each metric alone and for the sets gpudash could ask for, rotating through the sets so that
    each call is the only one on its window (cold, as in the GPM loop)."""
    try:
        if not N.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
            return "GPM not supported on this GPU"
    except (N.NVMLError, AttributeError) as e:
        return f"GPM not readable: {e}"
    ids = {name: getattr(N, f"NVML_GPM_METRIC_{name}") for name in GPM_IDS}
    sets = {f"metrics_get({name})": [name] for name in GPM_IDS}
    sets["metrics_get(8: no PCIe, no NVLink)"] = GPM_IDS[:8]
    sets["metrics_get(10: + PCIe)"] = GPM_IDS[:10]
    sets["metrics_get(12: all)"] = GPM_IDS
    samples = [N.nvmlGpmSampleAlloc() for _ in range(2)]
    rows = {"gpm_sample_get": []} | {name: [] for name in sets}
    N.nvmlGpmSampleGet(h, samples[0])
    i = 0
    for _ in range(rounds):
        for name, chosen in sets.items():
            time.sleep(window_s)
            cur, prev = samples[(i + 1) % 2], samples[i % 2]
            i += 1
            rows["gpm_sample_get"].append(timed(lambda: N.nvmlGpmSampleGet(h, cur)))

            def get(chosen=chosen, prev=prev, cur=cur):
                m = N.c_nvmlGpmMetricsGet_t()
                m.version = N.NVML_GPM_METRICS_GET_VERSION
                m.numMetrics = len(chosen)
                m.sample1, m.sample2 = prev, cur
                for k, metric in enumerate(chosen):
                    m.metrics[k].metricId = ids[metric]
                N.nvmlGpmMetricsGet(m)
            rows[name].append(timed(get))
    for s in samples:
        N.nvmlGpmSampleFree(s)
    return rows


def show(loop, name, rows):
    cpu = [r[0] for r in rows]
    wall = [r[1] for r in rows]
    ok = "" if all(r[2] for r in rows) else "  (error or not supported on some calls)"
    print(f"  {loop:<17} {name:<34} CPU {statistics.median(cpu):9.1f} µs median {statistics.fmean(cpu):9.1f} mean"
          f"   wall {statistics.median(wall):9.1f} median{ok}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--tick-ms", type=int, default=200)
    ap.add_argument("--gpm-rounds", type=int, default=3, help="rounds through the GPM metric sets (0.25 s windows)")
    args = ap.parse_args()
    try:
        N.nvmlInit()
    except N.NVMLError as e:
        print(f"nvml_costs: NVML does not open: {e}")
        return 1
    h = N.nvmlDeviceGetHandleByIndex(0)
    n_links = 0
    for link in range(18):
        try:
            N.nvmlDeviceGetNvLinkState(h, link)
            n_links = link + 1
        except N.NVMLError:
            break
    tick_s = args.tick_ms / 1000
    ticks = max(5, int(args.seconds / tick_s))
    table = calls(h, n_links)
    rows = {name: [] for _, name, _ in table}
    print(f"NVML calls as gpudash's loops make them, GPU 0 ({N.nvmlDeviceGetName(h)}), {ticks} ticks "
          f"{args.tick_ms} ms apart, each call once per tick (cold), pynvml overhead included:")
    for _ in range(ticks):
        time.sleep(tick_s)
        for _, name, thunk in table:
            rows[name].append(timed(thunk))
    for loop, name, _ in table:
        show(loop, name, rows[name])
    gpm = gpm_costs(h, args.gpm_rounds, 0.25)
    if isinstance(gpm, str):
        print(f"  GPM: {gpm}")
    else:
        for name, r in gpm.items():
            show("GPM (1 s window)", name, r)
    N.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
