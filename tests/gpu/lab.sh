#!/usr/bin/env bash
# The GPU lab's suite, run on a machine with an NVIDIA GPU (the device tool's H200):
#   1. `gpudash bench memory` (the table the CLI prints, and the memory experiment's checks), then
#      each fault of GPUDASH_BENCH_FAULT (skip-copy, corrupt-tile) caught by its check;
#   2. tests/gpu/lab_vs_torch.py: gpudash and PyTorch (plain CUDA for latency) in one run,
#      interleaved round by round on the same sizes and buffers; each row's paired per-round
#      ratios give a 95% interval judged against 1 ± tolerance (compare.py); after ROUNDS rounds,
#      extra rounds of the groups with an undecided row, up to MAX_ROUNDS or DEADLINE_S;
#      exits 1 on any FAIL, MISSING, different identity row or failed gpudash check, else 2 when
#      a row is still INCONCLUSIVE;
#   3. tests/gpu/lab_api.py drives a running gpudash over HTTP: one run per
#      experiment, polled to the end, chart.svg and results.csv fetched, empty_cache.
# Exit status: 1 when any step failed; else 2 when the comparison left a row INCONCLUSIVE (it could
# not decide: not a pass); else 0.
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/lab.sh    # ~4 minutes: ROUNDS=3 rounds of every group (~35 s each), then extra
#                            # rounds of undecided groups (pageable copies ~5 s, latency ~2 s, memory ~1 s)
#                            # until MAX_ROUNDS or DEADLINE_S; then the HTTP API (~25 s);
#                            # artifacts land in $OUT (default /tmp/gpudash-lab)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
PORT=${GPUDASH_PORT:-7071}
OUT=${OUT:-/tmp/gpudash-lab}
# 3 rounds of every group fill ~112 s of the deadline; the rest goes to extra rounds of undecided groups:
# ~220 s, enough for the latency and memory groups (~10 s a round) to reach MAX_ROUNDS. At 200 s, session 15's
# first run stopped them at 12 rounds with three rows undecided (docs/gpu-runs/session15-lab-run1.log).
ROUNDS=${ROUNDS:-3}
MAX_ROUNDS=${MAX_ROUNDS:-24}
DEADLINE_S=${DEADLINE_S:-330}
mkdir -p "$OUT"
status=0        # 1: some step failed
inconclusive=0  # 1: the comparison exited 2 (rows it could not decide)

step() { printf '\n== %s\n' "$*"; }

step "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader || true

step "gpudash bench memory (the CLI's table; exits non-zero when a check fails)"
timeout 60 "$BIN" bench --device 0 memory || status=1

step "faults injected on the CUDA path (GPUDASH_BENCH_FAULT): each run must fail, its check naming the fault"
# Each fault spoils what one check is there to catch, on this GPU: the check must fail (exit non-zero)
# and its line must say so; a fault nobody catches fails the suite.
fault() {
  local name=$1 kind=$2 params=$3 check=$4 out rc=0
  out=$(GPUDASH_BENCH_FAULT=$name timeout 120 "$BIN" bench --device 0 --force --params "$params" "$kind" 2>&1) || rc=$?
  # The check's own line, marked as the fault's (all.sh's summary lists unmarked [FAIL] lines as failures).
  echo "$out" | grep -E "injecting|\[FAIL\]" | head -5 | sed "s/\[FAIL\]/[FAIL as injected: $name]/"
  if [ "$rc" -ne 0 ] && echo "$out" | grep -E "\[FAIL\] .*$check" >/dev/null; then
    echo "fault $name: caught by '$check' (exit $rc)"
  else
    echo "FAIL: fault $name was not caught by '$check' (exit $rc)"
    status=1
  fi
}
fault skip-copy transfer '{"kind":"transfer","copies":["h2d_pinned"],"sizes":[16777216],"warmup":2,"repetitions":5}' \
  "h2d_pinned copies are byte-exact"
fault corrupt-tile precision '{"kind":"precision","sizes":[4096],"dtypes":["fp32"],"warmup":1,"repetitions":3}' \
  "every timed GEMM matches the host on a random tile"

step "gpudash vs PyTorch, $ROUNDS interleaved rounds, up to $MAX_ROUNDS for undecided rows (deadline ${DEADLINE_S} s)"
# The deadline stops new rounds; the timeout is the last resort (the script prints what it has on SIGTERM).
# With pipefail the pipeline's status is the script's (or timeout's 124): 2 means INCONCLUSIVE rows only.
rc=0
timeout $((DEADLINE_S + 60)) python3 tests/gpu/lab_vs_torch.py "$BIN" --rounds "$ROUNDS" --max-rounds "$MAX_ROUNDS" \
  --deadline-s "$DEADLINE_S" | tee "$OUT/compare.txt" || rc=$?
if [ "$rc" -eq 2 ]; then
  inconclusive=1
elif [ "$rc" -ne 0 ]; then
  status=1
fi

step "HTTP API of a running gpudash"
"$BIN" --listen "127.0.0.1:$PORT" --interval 500ms --no-history --lab-idle-release 20s >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
# Each run has its own deadline in lab_api.py (it prints the run's status and progress when one passes); the
# bf16 16384 run took 19 s in session10-lab-run2.log and did not end within this step's former 60 s in run 1.
timeout 150 python3 tests/gpu/lab_api.py "http://127.0.0.1:$PORT" "$OUT" || status=1
kill $SERVER 2>/dev/null || true
wait $SERVER 2>/dev/null || true
grep -iE "error|panic" "$OUT/server.log" | head -20 || true

source tests/gpu/result.sh
finish "$status" "$inconclusive"
