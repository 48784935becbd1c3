#!/usr/bin/env bash
# The collectives experiment on the lent H200 (one GPU), side by side with PyTorch in the same run:
#   1. where NCCL is (ldconfig, PyTorch's wheel) and what gpudash loads;
#   2. `gpudash bench collectives` alone on GPU 0: a one-rank communicator runs all four collectives, each
#      result checked whole (the run must succeed with every check passed);
#   3. tests/gpu/collectives_vs_torch.py: interleaved rounds of `gpudash bench --json collectives` and a
#      PyTorch backward-shaped GEMM loop of the DDP step view's shapes; the compute side's time judged by the
#      paired 95% interval against 1 ± 5% (compare.py), extra rounds while undecided;
#   4. `gpudash bench collectives` with GPUDASH_NCCL_LIB pointing nowhere: exit 2 and the places it looked.
# Tolerance, interval, rounds and deadline come from tests/gpu/rules.json (schedule "collectives");
# COLLECTIVES_ROUNDS, COLLECTIVES_MAX_ROUNDS and COLLECTIVES_DEADLINE_S override them (the summary says so).
# Exit status (tests/gpu/result.sh): 1 when any step failed; else 2 when the comparison is INCONCLUSIVE (its
# summary line says so); else 0.
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/collectives.sh    # ~2 minutes; artifacts land in $OUT (default /tmp/gpudash-collectives)
set -euo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
export CUDA_DEVICE_ORDER=PCI_BUS_ID
BIN=${GPUDASH_BIN:-target/release/gpudash}
OUT=${OUT:-/tmp/gpudash-collectives}
mkdir -p "$OUT"
status=0
inconclusive=0
step() { printf '\n== %s\n' "$*"; }
source tests/gpu/result.sh

load_rules collectives
ROUNDS=${COLLECTIVES_ROUNDS:-$RULES_ROUNDS}
MAX_ROUNDS=${COLLECTIVES_MAX_ROUNDS:-$RULES_MAX_ROUNDS}
DEADLINE_S=${COLLECTIVES_DEADLINE_S:-$RULES_DEADLINE_S}

step "NCCL on this machine"
ldconfig -p | grep -i libnccl || echo "(libnccl not in ld.so.cache)"
python3 -c 'import torch; print("PyTorch", torch.__version__, "NCCL", torch.cuda.nccl.version())' || true

step "gpudash bench collectives on GPU 0 (one-rank communicator, every result checked)"
if "$BIN" bench --force collectives --params '{"kind":"collectives","gpus":[0],"repetitions":10}' \
  >"$OUT/bench.txt" 2>&1; then
  echo "PASS: four collectives ran and were checked"
else
  echo "FAIL: gpudash bench collectives exited $?"
  status=1
fi
cat "$OUT/bench.txt"

step "DDP compute side vs PyTorch ($ROUNDS interleaved rounds, up to $MAX_ROUNDS)"
rc=0
timeout $((DEADLINE_S + RULES_GRACE_S)) python3 tests/gpu/collectives_vs_torch.py "$BIN" "$OUT" --rounds "$ROUNDS" \
  --max-rounds "$MAX_ROUNDS" --deadline-s "$DEADLINE_S" | tee "$OUT/compare.txt" || rc=$?
case "$(compare_status "$rc" "$OUT/compare.txt")" in
  inconclusive) inconclusive=1 ;;
  fail) status=1; echo "FAIL: the comparison exited $rc" ;;
esac

step "without NCCL: exit 2 and where it looked"
rc=0
"$BIN" bench collectives --nccl-lib /nonexistent/libnccl.so.2 >"$OUT/no-nccl.txt" 2>&1 || rc=$?
cat "$OUT/no-nccl.txt"
# A path given is the only place tried, so the system's NCCL must not stand in for it.
if [ "$rc" -ne 2 ] || ! grep -q "looked in /nonexistent/libnccl.so.2" "$OUT/no-nccl.txt"; then
  echo "FAIL: expected exit 2 naming the path, got $rc"
  status=1
fi

finish "$status" "$inconclusive"
