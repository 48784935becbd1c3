#!/usr/bin/env bash
# Issue 21 on a real GPU: the allocator map of a training loop against its own memory_snapshot(),
# max_memory_allocated() untouched by spans, step time with the map on vs the client off, the cost
# of a snapshot with tens of thousands of blocks, and an out-of-memory job on purpose (its record
# and its `oom` alert). python/ on PYTHONPATH: the GPU machine has no network for pip.
#   cargo build --release; then on the GPU machine with target/release/gpudash carried:
#   bash tests/gpu/allocator.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
PORT=${GPUDASH_PORT:-7073}
OUT=${OUT:-/tmp}
"$BIN" --listen "127.0.0.1:$PORT" --interval 500ms --no-history >"$OUT/allocator-server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 python3 tests/gpu/allocator_train.py "http://127.0.0.1:$PORT"
