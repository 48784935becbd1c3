#!/usr/bin/env bash
# The PyTorch bridge on a real GPU: the release gpudash, and a training loop
# with the client attached (python/ on PYTHONPATH: the GPU machine has no network for pip).
#   cargo build --release; then on the GPU machine with target/release/gpudash carried:
#   bash tests/gpu/bridge.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
PORT=${GPUDASH_PORT:-7072}
OUT=${OUT:-/tmp}
"$BIN" --listen "127.0.0.1:$PORT" --interval 500ms --no-history >"$OUT/bridge-server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 python3 tests/gpu/bridge_train.py "http://127.0.0.1:$PORT"
