#!/usr/bin/env python3
"""Compare a running gpudash with nvidia-smi on the same GPU, at the same moment.

Fetches /api/devices, reads 5 s of /ws messages, and queries
`nvidia-smi --query-gpu=name,uuid,memory.total,memory.used,power.draw` while
they arrive. Checks: name and UUID identical, memory total identical, memory
used within 1% (or within nvidia-smi's own resolution of 1 MiB, for an idle GPU's few MiB),
power within 10% or 20 W of the reading nearest in time, the slowdown and shutdown
temperatures identical to pynvml's and to `nvidia-smi -q -d TEMPERATURE` (on drivers that print
them only as T.Limit offsets, the gap between the two). Exits non-zero on any mismatch. Needs python3 with aiohttp.
"""
import asyncio
import json
import subprocess
import sys
import time
import urllib.request

import aiohttp

MIB = 1024 * 1024


def nvidia_smi():
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name,uuid,memory.total,memory.used,power.draw",
         "--format=csv,noheader,nounits"],
        check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.strip().splitlines():
        index, name, uuid, total, used, power = [f.strip() for f in line.split(",")]
        rows[int(index)] = dict(name=name, uuid=uuid, total_mib=int(total), used_mib=int(used),
                                power_w=float(power) if power not in ("[N/A]", "N/A") else None,
                                t_ms=int(time.time() * 1000))
    return rows


def temperature_limits(index):
    """The slowdown and shutdown temperatures of GPU `index`, °C, two ways.

    `nvidia-smi -q -d TEMPERATURE` prints them on older drivers ("GPU Slowdown Temp : 90 C"); newer
    ones (580 on the H200) print only offsets from T.Limit ("GPU Slowdown T.Limit Temp : -2 C"), and
    T.Limit itself is not printed as a temperature, so there only the gap between the two can be
    compared. pynvml's nvmlDeviceGetTemperatureThreshold gives the absolute figures.
    """
    out = subprocess.run(["nvidia-smi", "-q", "-d", "TEMPERATURE", "-i", str(index)],
                         check=True, capture_output=True, text=True).stdout
    fields = {}
    for line in out.splitlines():
        key, _, value = line.partition(":")
        value = value.strip().split(" ")[0]
        if value.lstrip("-").isdigit():
            fields[key.strip()] = int(value)
    limits = {"slowdown": fields.get("GPU Slowdown Temp"), "shutdown": fields.get("GPU Shutdown Temp")}
    slow_off, shut_off = fields.get("GPU Slowdown T.Limit Temp"), fields.get("GPU Shutdown T.Limit Temp")
    limits["gap"] = slow_off - shut_off if None not in (slow_off, shut_off) else None
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        limits["pynvml_slowdown"] = pynvml.nvmlDeviceGetTemperatureThreshold(
            handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        limits["pynvml_shutdown"] = pynvml.nvmlDeviceGetTemperatureThreshold(
            handle, pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)
    except Exception as e:  # noqa: BLE001 - reported as a mismatch below
        print(f"pynvml: {e}")
    return limits


def compare_processes(base, devices, failures):
    """Every compute process nvidia-smi lists must be in gpudash's table with the same memory, user and command."""
    time.sleep(2.5)  # the slow loop reads processes every 2 s
    ours = json.load(urllib.request.urlopen(f"{base}/api/processes"))
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,process_name,used_memory",
                          "--format=csv,noheader,nounits"], check=True, capture_output=True, text=True).stdout
    uuid_to_index = {d["uuid"]: d["index"] for d in devices["devices"]}
    print()
    print(f"{'GPU':>3} {'pid':>8} {'user (gpudash / ps)':<24} {'memory MiB (gpudash / smi)':<28} command (gpudash)")
    for line in out.strip().splitlines():
        uuid, pid, name, used = [f.strip() for f in line.split(",")]
        pid, used = int(pid), int(used)
        ps_user = subprocess.run(["ps", "-o", "user=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
        row = next((p for p in ours["processes"] if p["pid"] == pid and p["device"] == uuid_to_index.get(uuid)), None)
        if row is None:
            failures.append(f"process {pid} ({name}) on {uuid} is missing from /api/processes")
            print(f"{'?':>3} {pid:>8} MISSING")
            continue
        mem = (row["used_memory"] or 0) / MIB
        print(f"{row['device']:>3} {pid:>8} {str(row['user']) + ' / ' + ps_user:<24} {f'{mem:.0f} / {used}':<28} {(row['command'] or '')[:60]}")
        if abs(mem - used) > max(1, used * 0.01):
            failures.append(f"process {pid}: memory {mem:.0f} MiB vs nvidia-smi {used} MiB")
        if ps_user and row["user"] != ps_user:
            failures.append(f"process {pid}: user {row['user']} vs ps {ps_user}")
        if not row["command"]:
            failures.append(f"process {pid}: no command line")
    print(f"who uses what: {ours['users']}  free GPUs: {ours['free_devices']}")


async def main(base):
    devices = json.load(urllib.request.urlopen(f"{base}/api/devices"))
    smi_before = nvidia_smi()
    messages, ticks, seqs = [], [], []
    smi_during = []
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(base.replace("http", "ws") + "/ws") as ws:
            end = time.time() + 5
            next_smi = time.time()
            while time.time() < end:
                try:
                    msg = await asyncio.wait_for(ws.receive(), timeout=max(0.05, end - time.time()))
                except asyncio.TimeoutError:
                    break
                if msg.type != aiohttp.WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                messages.append(data["type"])
                if data["type"] == "tick":
                    ticks.append(data)
                    seqs.append(data["seq"])
                if time.time() >= next_smi:
                    smi_during.append(nvidia_smi())
                    next_smi = time.time() + 1
    host = devices["host"]
    print(f"host: {host['hostname']}  driver {host['driver_version']}  CUDA {host['cuda_driver_version']}  "
          f"simulated={host['simulated']}  interval {host['interval_ms']} ms")
    gaps = [b - a for a, b in zip(seqs, seqs[1:]) if b - a != 1]
    print(f"/ws: {len(messages)} messages in 5 s (first: {messages[0] if messages else None}), "
          f"{len(ticks)} ticks, seq {seqs[0] if seqs else '-'}..{seqs[-1] if seqs else '-'}, gaps/repeats: {len(gaps)}")
    failures = []
    if not messages or messages[0] != "snapshot":
        failures.append("the first WebSocket message is not a snapshot")
    if gaps:
        failures.append(f"tick sequence has gaps or repeats: {gaps}")
    print()
    print(f"{'GPU':>3} {'field':<13} {'gpudash':>44} {'nvidia-smi':>44}  verdict")
    for dev in devices["devices"]:
        i = dev["index"]
        smi = smi_before[i]
        latest = dev["latest"] or {}

        def row(field, ours, theirs, ok):
            print(f"{i:>3} {field:<13} {str(ours):>44} {str(theirs):>44}  {'ok' if ok else 'MISMATCH'}")
            if not ok:
                failures.append(f"GPU {i} {field}: gpudash {ours} vs nvidia-smi {theirs}")

        row("name", dev["name"], smi["name"], dev["name"] == smi["name"])
        row("uuid", dev["uuid"], smi["uuid"], dev["uuid"] == smi["uuid"])
        total_mib = dev["memory_total"] / MIB
        row("memory.total", f"{total_mib:.0f} MiB", f"{smi['total_mib']} MiB", round(total_mib) == smi["total_mib"])
        # Memory used: every WebSocket tick against the nvidia-smi reading nearest in time.
        for reading in [smi_before] + smi_during:
            s = reading[i]
            nearest = min(ticks, key=lambda t: abs(t["samples"][i]["timestamp_ms"] - s["t_ms"])) if ticks else None
            used = (nearest["samples"][i]["memory_used"] if nearest else latest.get("memory_used")) or 0
            used_mib = used / MIB
            diff = abs(used_mib - s["used_mib"]) / max(s["used_mib"], 1)
            # nvidia-smi prints whole MiB, so 1 MiB is the finest agreement it can show.
            ok = diff <= 0.01 or abs(used_mib - s["used_mib"]) <= 1
            row("memory.used", f"{used_mib:.1f} MiB ({diff * 100:.2f}% off)", f"{s['used_mib']} MiB", ok)
        # Power: each nvidia-smi reading against the tick nearest in time; the job's load moves it, so the
        # band is 10 % or 20 W, whichever is wider (both read the same NVML counter).
        for reading in [smi_before] + smi_during:
            s = reading[i]
            nearest = min(ticks, key=lambda t: abs(t["samples"][i]["timestamp_ms"] - s["t_ms"])) if ticks else None
            power = (nearest["samples"][i] if nearest else latest).get("power_draw_mw")
            theirs = s["power_w"]
            ok = power is not None and theirs is not None and abs(power / 1000 - theirs) <= max(0.1 * theirs, 20)
            row("power.draw", f"{power / 1000:.1f} W" if power is not None else "n/a", f"{theirs} W", ok)
        # The GPU's own temperature thresholds, which the page's severity is measured against.
        limits = temperature_limits(i)
        slowdown, shutdown = dev.get("slowdown_temp_c"), dev.get("shutdown_temp_c")
        for name, ours in [("slowdown", slowdown), ("shutdown", shutdown)]:
            theirs = limits.get(name)
            if theirs is not None:
                row(f"temp.{name}", f"{ours} C", f"{theirs} C", ours == theirs)
            pynvml_value = limits.get(f"pynvml_{name}")
            row(f"temp.{name}", f"{ours} C", f"{pynvml_value} C (pynvml)", ours == pynvml_value)
        if limits.get("gap") is not None:
            ours = shutdown - slowdown if None not in (slowdown, shutdown) else None
            row("temp.gap", f"shutdown-slowdown {ours} C", f"{limits['gap']} C (T.Limit offsets)", ours == limits["gap"])
    compare_processes(base, devices, failures)
    print()
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("PASSED: gpudash agrees with nvidia-smi")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:7070")))
