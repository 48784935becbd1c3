#!/usr/bin/env bash
# The GPU lab's suite, run on a machine with an NVIDIA GPU (the device tool's H200):
#   1. `gpudash bench memory` (the table the CLI prints, and the memory experiment's checks); each check's
#      injected fault is tests/gpu/faults.sh's (all.sh's part "faults");
#   2. tests/gpu/lab_vs_torch.py: gpudash and PyTorch (plain CUDA for latency) in one run,
#      interleaved round by round on the same sizes and buffers; each row's paired per-round
#      ratios give a 95% interval judged against 1 ± tolerance (compare.py); after ROUNDS rounds,
#      extra rounds of the groups with an undecided row, up to MAX_ROUNDS or DEADLINE_S;
#      exits 1 on any FAIL, MISSING, different identity row or failed gpudash check, else 2 when
#      a row is still INCONCLUSIVE (with its summary line saying so: any other exit 2 is a FAIL);
#   3. tests/gpu/lab_api.py drives a running gpudash over HTTP: one run per
#      experiment, polled to the end, chart.svg and results.csv fetched, empty_cache.
# Tolerances, intervals, ROUNDS, MAX_ROUNDS and DEADLINE_S come from tests/gpu/rules.json (rules.py; schedule
# "lab"); the rules' version and sha256 are printed first and on the result line. ROUNDS, MAX_ROUNDS and
# DEADLINE_S in the environment override the schedule, and the comparison's summary line then says
# "overridden": such a run is not one under the rules alone.
# Exit status (tests/gpu/result.sh): 1 when any step failed; else 2 when the comparison left a row
# INCONCLUSIVE (it could not decide: not a pass); else 0.
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/lab.sh    # ~3 to 6 minutes: 3 rounds of every group (~35 s each), then extra rounds
#                            # of undecided groups (pageable copies ~5 s, latency ~2 s, memory ~1 s) until
#                            # MAX_ROUNDS or DEADLINE_S; then the HTTP API (~25 s);
#                            # artifacts land in $OUT (default /tmp/gpudash-lab)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
PORT=${GPUDASH_PORT:-7071}
OUT=${OUT:-/tmp/gpudash-lab}
mkdir -p "$OUT"
status=0        # 1: some step failed
inconclusive=0  # 1: the comparison exited 2 with an INCONCLUSIVE summary (rows it could not decide)

step() { printf '\n== %s\n' "$*"; }
source tests/gpu/result.sh

# The schedule of rules.json's "lab": the deadline is cut from all.sh's 420 s for this part, leaving the
# comparison RULES_GRACE_S past it (its own timeout) and the steps around it RULES_OUTSIDE_S.
load_rules lab
ROUNDS=${ROUNDS:-$RULES_ROUNDS}
MAX_ROUNDS=${MAX_ROUNDS:-$RULES_MAX_ROUNDS}
DEADLINE_S=${DEADLINE_S:-$RULES_DEADLINE_S}

step "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader || true

step "gpudash bench memory (the CLI's table; exits non-zero when a check fails)"
timeout 60 "$BIN" bench --device 0 memory || status=1

step "gpudash vs PyTorch, $ROUNDS interleaved rounds, up to $MAX_ROUNDS for undecided rows (deadline ${DEADLINE_S} s)"
# The deadline stops new rounds; the timeout is the last resort (the script prints what it has on SIGTERM).
# With pipefail the pipeline's status is the script's (or timeout's 124); compare_status counts an exit 2 as
# INCONCLUSIVE only when the script's summary line says so.
rc=0
timeout $((DEADLINE_S + RULES_GRACE_S)) python3 tests/gpu/lab_vs_torch.py "$BIN" --rounds "$ROUNDS" \
  --max-rounds "$MAX_ROUNDS" --deadline-s "$DEADLINE_S" | tee "$OUT/compare.txt" || rc=$?
case "$(compare_status "$rc" "$OUT/compare.txt")" in
  inconclusive) inconclusive=1 ;;
  fail) status=1; echo "FAIL: the comparison exited $rc" ;;
esac

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

finish "$status" "$inconclusive"
