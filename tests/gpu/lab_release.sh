#!/usr/bin/env bash
# The lab gives its GPU back when idle: after every experiment has run over HTTP (lab_api.py, which
# creates cuBLAS handles, NVRTC kernels and pool memory), and the lab's idle release has come,
# nvidia-smi no longer lists gpudash on the GPU; then a second round runs (a fresh context works
# after the reset) and is given back the same way. Prints gpudash's device memory and resident
# memory at each step. Exits 1 when the GPU is not given back or a round fails.
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/lab_release.sh    # ~70 s
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
PORT=${GPUDASH_PORT:-7072}
OUT=${OUT:-/tmp/gpudash-lab-release}
mkdir -p "$OUT"
"$BIN" --listen "127.0.0.1:$PORT" --interval 500ms --no-history --lab-idle-release 5s >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done

on_gpu() { nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | awk -F', ' -v p="$SERVER" '$1 == p {print $2}'; }
report() { echo "$1: on the GPU: ${2:-not listed}; $(grep VmRSS /proc/$SERVER/status | tr -s ' \t' ' ')"; }
# Waits (up to 60 s) until the lab says its context is closed and nvidia-smi no longer lists gpudash.
given_back() {
  local held=""
  for _ in $(seq 120); do
    closed=$(curl -sf "http://127.0.0.1:$PORT/api/lab" | python3 -c 'import json,sys; print(all(not d["context_open"] for d in json.load(sys.stdin)["devices"]))')
    held=$(on_gpu)
    [ "$closed" = "True" ] && [ -z "$held" ] && { report "$1" ""; return 0; }
    sleep 0.5
  done
  report "$1 (not given back within 60 s; context closed: $closed)" "$held"
  return 1
}

status=0
report "idle, before any run" "$(on_gpu)"
for round in 1 2; do
  mkdir -p "$OUT/round$round"
  python3 tests/gpu/lab_api.py "http://127.0.0.1:$PORT" "$OUT/round$round" >"$OUT/round$round.log" 2>&1 \
    || { echo "round $round: lab_api.py failed"; tail -20 "$OUT/round$round.log"; status=1; }
  grep -E "^(API|[a-z]+ +run)" "$OUT/round$round.log" | sed "s/^/round $round: /" | cut -c1-140
  report "round $round: right after the runs" "$(on_gpu)"
  given_back "round $round: after the lab's idle release" || status=1
done
grep -iE "could not reset|still referenced|panick" "$OUT/server.log" && status=1
[ "$status" -eq 0 ] && echo "lab_release: PASS" || echo "lab_release: FAIL"
exit $status
