#!/usr/bin/env bash
# Jobs on a real GPU: a scripted PyTorch job of known shape (40 s of bf16 GEMMs, then 4 GiB held 30 s
# with no kernel), a plain process leading its own process group, against the report gpudash gives of
# it in GET /api/jobs once it has ended: held and charged GPU-seconds against the job's own length
# (context → exit, within [−3 s, +3 s]), idle seconds against phase B's length ([−8 s, +5 s]), SM and
# tensor activity against pynvml's GPM over the job's life (±5 points), memory peak against NVML's for
# the pid (±64 MiB) and torch's reserved bytes, outcome, runtime, GPUs and verdicts
# (--job-verdict-after 10s). Each check is also shown to catch an injected fault.
# tests/gpu/jobs_vs_gpm.py runs the job, the references and the comparison (its docstring gives the bounds).
# About 90 s.
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/jobs.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
OUT=${OUT:-/tmp/gpudash-jobs}
mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=0

if ! python3 -c "import pynvml" 2>/dev/null; then
  pip install --quiet nvidia-ml-py >/dev/null 2>&1 || true
fi
python3 -c "import pynvml" 2>/dev/null || {
  echo "FAIL: pynvml (nvidia-ml-py) is missing and could not be installed"; echo "== result: FAIL"; exit 1; }
python3 -c '
import torch
assert torch.cuda.is_available(), "torch sees no CUDA device"
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}")' || {
  echo "FAIL: PyTorch with CUDA is needed for the job"; echo "== result: FAIL"; exit 1; }

DATA=$(mktemp -d)
rm -f "$OUT/job.pid"
# Port 0 unless GPUDASH_PORT is set: gpudash takes a free port and prints it ("serving on http://...").
"$BIN" --listen "127.0.0.1:${GPUDASH_PORT:-0}" --data-dir "$DATA" --job-verdict-after 10s >"$OUT/gpudash.log" 2>&1 &
SERVER=$!
cleanup() {
  # The job runs in its own session (its own process group): jobs_vs_gpm.py ends it, this is the backstop.
  [ -s "$OUT/job.pid" ] && kill -9 -- "-$(cat "$OUT/job.pid")" 2>/dev/null
  kill $SERVER 2>/dev/null && wait $SERVER 2>/dev/null
  rm -rf "$DATA"
}
trap cleanup EXIT

URL=
deadline=$((SECONDS + 15))
while [ $SECONDS -lt $deadline ] && kill -0 $SERVER 2>/dev/null; do
  URL=$(grep -oE 'serving on http://[0-9.]+:[0-9]+' "$OUT/gpudash.log" | head -n 1 | cut -d' ' -f3)
  [ -n "$URL" ] && curl -sf "$URL/healthz" >/dev/null && break
  URL=
  sleep 0.1
done
head -5 "$OUT/gpudash.log"
if [ -z "$URL" ]; then
  echo "FAIL: gpudash did not answer /healthz within 15 s (see $OUT/gpudash.log)"
  echo "== result: FAIL"
  exit 1
fi
echo "gpudash at $URL, history in $DATA"

python3 -u tests/gpu/jobs_vs_gpm.py "$URL" "$OUT" 2>&1 | tee "$OUT/compare.txt"
rc=${PIPESTATUS[0]}
echo
# Python exits 2 also when it cannot open the script: INCONCLUSIVE only beside the script's own line.
why=$(grep -m1 '^INCONCLUSIVE: ' "$OUT/compare.txt")
if [ "$rc" -eq 0 ]; then
  echo "== result: PASS  (every figure within its bound, every injected fault caught; artifacts in $OUT)"
elif [ "$rc" -eq 2 ] && [ -n "$why" ]; then
  echo "== result: INCONCLUSIVE (${why#INCONCLUSIVE: }; artifacts in $OUT)"
else
  rc=1
  echo "== result: FAIL  (artifacts in $OUT)"
fi
exit $rc
