#!/usr/bin/env bash
# The GPU check, run on a machine with an NVIDIA GPU (the device tool's H200):
# starts a PyTorch job that holds memory and computes, starts the release
# gpudash beside it, compares what gpudash reports with nvidia-smi, and measures
# the running sampler's CPU per GPU per second: fast loop, slow loop and their sum
# (tests/gpu/sampler_cost.py, over 34 s while the job runs: one 30 s graphics-engine window included). ~110 s.
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/h200.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
PORT=${GPUDASH_PORT:-7070}
OUT=${OUT:-/tmp}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

# A realistic neighbour: 20 GiB held and matmuls running, so memory and power are far from idle.
python3 - <<'PY' &
import torch, time
x = torch.empty(20 * 2**30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda")
end = time.time() + 60
while time.time() < end:
    a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
PY
JOB=$!
sleep 8

# Debug lines of gpudash's own modules carry the energy estimate's drift (read below).
GPUDASH_LOG=info,gpudash::telemetry::nvml=debug "$BIN" --listen "127.0.0.1:$PORT" --interval 200ms >"$OUT/gpudash.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER $JOB 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
head -3 "$OUT/gpudash.log"
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)

status=0
# The sampler's cost is measured on the running server while the comparison below reads it.
python3 tests/gpu/sampler_cost.py "$SERVER" 34 200 "$GPUS" >"$OUT/sampler-cost.txt" 2>&1 &
COST=$!
python3 tests/gpu/compare_nvidia_smi.py "http://127.0.0.1:$PORT" || status=1

echo; echo "== health and metrics as gpudash serves them"
curl -sf "http://127.0.0.1:$PORT/api/devices" >"$OUT/devices.json"
python3 - "$OUT/devices.json" <<'PY'
import json, sys
for d in json.load(open(sys.argv[1]))["devices"]:
    s, h = d["latest"] or {}, d["health"] or {}
    print(f"GPU {d['index']}: P{s.get('pstate')} clocks={s.get('clock_events')} pcie={s.get('pcie_link')}/{d.get('pcie_max')} "
          f"fans={s.get('fan_speeds')} enforced={s.get('enforced_power_limit_mw')} mW")
    print(f"  persistence={h.get('persistence_mode')} compute={h.get('compute_mode')} mig={h.get('mig_enabled')} "
          f"ecc={h.get('ecc_enabled')} vol={h.get('ecc_volatile')} agg={h.get('ecc_aggregate')} remapped={h.get('remapped_rows')}")
    print(f"  bar1={h.get('bar1_used')}/{h.get('bar1_total')} nvlinks up={sum(l['active'] for l in h.get('nvlinks', []))}/{len(h.get('nvlinks', []))} "
          f"pcie tx/rx={h.get('pcie_tx_bytes_per_s')}/{h.get('pcie_rx_bytes_per_s')} B/s energy={h.get('energy_mj')} mJ xids={h.get('xids')}")
PY
curl -sf "http://127.0.0.1:$PORT/metrics" >"$OUT/metrics.txt"
echo "/metrics: $(grep -vc '^#' "$OUT/metrics.txt") series"; grep -E '^(DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_POWER_USAGE|gpudash_process_memory_bytes)' "$OUT/metrics.txt" | head -6

echo; echo "== sampler CPU of the running server (fast loop + slow loop)"
wait $COST || status=1
cat "$OUT/sampler-cost.txt"

echo; echo "== what holds the running server's memory (tests/gpu/rss.py; goal ≤ 30 MiB idle)"
python3 tests/gpu/rss.py "$SERVER" || status=1
echo "-- the same libraries step by step in a process of their own (tests/gpu/rss_parts.py)"
python3 tests/gpu/rss_parts.py || status=1

echo; echo "== energy: the counter every 30 s, the power draw integrated between (the estimate against the next counter read)"
for _ in $(seq 400); do grep -q 'drift_mj=' "$OUT/gpudash.log" && break; sleep 0.1; done
python3 - "$OUT/gpudash.log" <<'PY' || status=1
import re, sys
rows = [tuple(map(int, m)) for m in re.findall(r"index=(\d+) drift_mj=(-?\d+) counted_mj=(\d+)", open(sys.argv[1]).read())]
if not rows:
    sys.exit("no second counter read within 40 s of waiting: the estimate was not checked")
for gpu, drift, counted in rows:
    share = 100 * drift / counted if counted else float("nan")
    print(f"  GPU {gpu}: estimate {drift / 1000:+.1f} J off the counter's {counted / 1000:.1f} J over 30 s ({share:+.2f}%)")
worst = max(abs(d) / c for _, d, c in rows if c)
print(f"  {'PASS' if worst <= 0.02 else 'FAIL'}: worst {100 * worst:.2f}% (two-sided bound ±2%; the counter itself resets each 30 s)")
sys.exit(0 if worst <= 0.02 else 1)
PY
kill $SERVER 2>/dev/null || true

echo; echo "== one fast-path sample in isolation (gpudash-bench sampler)"
"$(dirname "$BIN")/gpudash-bench" sampler --samples 2000 || status=1

echo; echo "== the sampler's loops at the default 1 s interval, per loop and per NVML call (gpudash-bench loops)"
"$(dirname "$BIN")/gpudash-bench" loops --seconds 35 || status=1

echo; echo "== the same NVML calls from pynvml, once per 200 ms tick, cold (tests/gpu/nvml_costs.py; reference)"
timeout 60 python3 tests/gpu/nvml_costs.py --seconds 10 || echo "nvml_costs.py did not finish (reference only, not a failure)"

echo; echo "== peers' sampling cost on this machine (reference figures of docs/BENCHMARKS.md)"
timeout 40 python3 tests/gpu/peer_costs.py || echo "peer_costs.py did not finish (reference only, not a failure)"
exit $status
