#!/usr/bin/env bash
# GPM on a real GPU: gpudash beside three loads in turn (a Python loop of tiny kernels, a bf16
# GEMM loop, a process that holds 2 GiB and sleeps). For each, gpudash's SM and tensor activity
# are compared with NVML's GPM read through pynvml (nvidia-ml-py) in the same seconds (±5 points);
# the sleeper must be flagged idle (--idle-after 10s); the DCGM_FI_PROF_* series must be in /metrics;
# and SM activity must read K / SMs × duty (±3 points) on a load that keeps exactly K SMs busy
# (tests/gpu/gpm_calibrated.py, at K = 13, 66, 132 and a 50% duty).
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/gpm.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
PORT=${GPUDASH_PORT:-7071}
OUT=${OUT:-/tmp/gpudash-gpm}
URL="http://127.0.0.1:$PORT"
mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=0

if ! python3 -c "import pynvml" 2>/dev/null; then
  pip install --quiet nvidia-ml-py >/dev/null 2>&1 || true
fi
python3 - <<'PY' || {
import importlib.metadata as m
import pynvml  # noqa: F401  (the import is the check)
versions = []
for dist in ("nvidia-ml-py", "pynvml"):
    try:
        versions.append(f"{dist} {m.version(dist)}")
    except m.PackageNotFoundError:
        pass
print("pynvml from " + (", ".join(versions) or "an unnamed distribution"))
PY
  echo "FAIL: pynvml (nvidia-ml-py) is missing and could not be installed"; exit 1; }

"$BIN" --listen "127.0.0.1:$PORT" --interval 500ms --no-history --idle-after 10s --idle-memory 1GiB \
  >"$OUT/gpudash.log" 2>&1 &
SERVER=$!
LOAD=
trap 'kill $SERVER $LOAD 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "$URL/healthz" >/dev/null && break; sleep 0.1; done
head -5 "$OUT/gpudash.log"

status=0
fail() { echo "FAIL: $*"; status=1; }

# Starts a load, waits until it has run a while, compares, stops it.
compare() {
  local name=$1 code=$2
  python3 -c "$code" &
  LOAD=$!
  sleep 8   # torch import, CUDA context, a few seconds of the load
  kill -0 "$LOAD" 2>/dev/null || { fail "$name: the load died"; return; }
  python3 tests/gpu/gpm_vs_pynvml.py "$URL" "$name" 5 || fail "$name: gpudash and pynvml disagree"
  kill "$LOAD" 2>/dev/null; wait "$LOAD" 2>/dev/null
  LOAD=
}

compare "tiny-kernel Python loop" '
import torch, time
x = torch.zeros(1, device="cuda")
end = time.time() + 30
while time.time() < end:
    for _ in range(1000):
        x.add_(1)
    torch.cuda.synchronize()
'

compare "bf16 GEMM 8192 loop" '
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 30
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
'

echo; echo "== metrics while the GEMM ran"
curl -sf "$URL/metrics" >"$OUT/metrics.txt"
# The graphics engine's figure is averaged over 30 s windows (it costs NVML 30 times the others):
# the first appears 30 s after the server's second GPM window.
for _ in $(seq 400); do
  curl -sf "$URL/metrics" | grep -q '^DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0"' && break
  sleep 0.1
done
curl -sf "$URL/metrics" | grep -m1 '^DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0"' >>"$OUT/metrics.txt" || true
for name in GR_ENGINE_ACTIVE SM_ACTIVE SM_OCCUPANCY PIPE_TENSOR_ACTIVE DRAM_ACTIVE PIPE_FP64_ACTIVE \
            PIPE_FP32_ACTIVE PIPE_FP16_ACTIVE PCIE_TX_BYTES PCIE_RX_BYTES; do
  line=$(grep -m1 "^DCGM_FI_PROF_${name}{gpu=\"0\"" "$OUT/metrics.txt") || { fail "DCGM_FI_PROF_$name missing"; continue; }
  echo "  ${line%%\{*} = ${line##* }"
done
grep -m1 '^DCGM_FI_PROF_NVLINK_TX_BYTES{gpu="0"' "$OUT/metrics.txt" \
  && echo "  (NVLink series present)" || echo "  (no NVLink series: no links on GPU 0)"

echo; echo "== a process that holds 2 GiB and sleeps"
python3 -c '
import torch, time
x = torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
time.sleep(60)
' &
LOAD=$!
sleep 6
python3 tests/gpu/gpm_vs_pynvml.py "$URL" "2 GiB sleeper" 3 || fail "sleeper: gpudash and pynvml disagree"
flagged=
for _ in $(seq 40); do
  curl -sf "$URL/api/processes" >"$OUT/processes.json"
  flagged=$(python3 - "$OUT/processes.json" "$LOAD" <<'PY'
import json, sys
body = json.load(open(sys.argv[1]))
for p in body["processes"]:
    if p["pid"] == int(sys.argv[2]) and p.get("idle"):
        state = [s["state"] for s in body.get("states", []) if s["index"] == p["device"]]
        print(f"pid {p['pid']} idle since {p['idle']['since_ms']} by {p['idle']['signal']}, "
              f"{p['used_memory'] / 2**30:.2f} GiB, GPU state {state}")
PY
)
  [ -n "$flagged" ] && break
  sleep 1
done
if [ -n "$flagged" ]; then echo "  flagged: $flagged"; else fail "the sleeper was not flagged idle within 40 s"; fi
grep -m1 '^gpudash_process_idle_seconds{gpu="0"' <(curl -sf "$URL/metrics") || fail "gpudash_process_idle_seconds missing"
kill "$LOAD" 2>/dev/null; wait "$LOAD" 2>/dev/null; LOAD=

echo; echo "== a calibrated load: exactly K of the SMs busy for a duty cycle (tests/gpu/sm_load.cu)"
python3 tests/gpu/gpm_calibrated.py "$URL" || fail "SM activity missed the calibrated load's K / SMs × duty"

echo; echo "== GPM lines gpudash logged (should be none on an H200)"
grep -i "activity" "$OUT/gpudash.log" || echo "  none"
[ $status -eq 0 ] && echo "PASS" || echo "FAILED"
exit $status
