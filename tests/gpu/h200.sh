#!/usr/bin/env bash
# The GPU check, run on a machine with an NVIDIA GPU (the device tool's H200):
# starts a PyTorch job that holds memory and computes, starts the release
# gpudash beside it, and compares what gpudash reports with nvidia-smi.
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
end = time.time() + 40
while time.time() < end:
    a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
PY
JOB=$!
sleep 8

"$BIN" --listen "127.0.0.1:$PORT" --interval 200ms >"$OUT/gpudash.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER $JOB 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
head -3 "$OUT/gpudash.log"

python3 tests/gpu/compare_nvidia_smi.py "http://127.0.0.1:$PORT"
