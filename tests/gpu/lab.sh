#!/usr/bin/env bash
# The GPU lab's suite, run on a machine with an NVIDIA GPU (the device tool's H200):
#   1. `gpudash bench memory` (the table the CLI prints, and the memory experiment's checks);
#   2. tests/gpu/lab_vs_torch.py: gpudash and PyTorch (plain CUDA for latency) in one run,
#      interleaved round by round on the same sizes and buffers, every row with a two-sided
#      verdict (compare.py); exits 1 on any FAIL, MISSING row or failed gpudash check;
#   3. tests/gpu/lab_api.py drives a running gpudash over HTTP: one run per
#      experiment, polled to the end, chart.svg and results.csv fetched, empty_cache.
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/lab.sh    # ~3.5 minutes (ROUNDS=5 rounds of ~30 s, stopped early by DEADLINE_S);
#                            # artifacts land in $OUT (default /tmp/gpudash-lab)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
PORT=${GPUDASH_PORT:-7071}
OUT=${OUT:-/tmp/gpudash-lab}
ROUNDS=${ROUNDS:-5}
DEADLINE_S=${DEADLINE_S:-170}
mkdir -p "$OUT"
status=0

step() { printf '\n== %s\n' "$*"; }

step "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader || true

step "gpudash bench memory (the CLI's table; exits non-zero when a check fails)"
timeout 60 "$BIN" bench --device 0 memory || status=1

step "gpudash vs PyTorch, $ROUNDS interleaved rounds (deadline ${DEADLINE_S} s)"
# The deadline stops new rounds; the timeout is the last resort (the script prints what it has on SIGTERM).
timeout $((DEADLINE_S + 60)) python3 tests/gpu/lab_vs_torch.py "$BIN" --rounds "$ROUNDS" --deadline-s "$DEADLINE_S" \
  | tee "$OUT/compare.txt" || status=1

step "HTTP API of a running gpudash"
"$BIN" --listen "127.0.0.1:$PORT" --interval 500ms --no-history --lab-idle-release 20s >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
timeout 60 python3 tests/gpu/lab_api.py "http://127.0.0.1:$PORT" "$OUT" || status=1
kill $SERVER 2>/dev/null || true
wait $SERVER 2>/dev/null || true
grep -iE "error|panic" "$OUT/server.log" | head -20 || true

step "result: $([ $status -eq 0 ] && echo PASS || echo FAIL)  (artifacts in $OUT)"
exit $status
