#!/usr/bin/env bash
# The GPU lab's suite, run on a machine with an NVIDIA GPU (the device tool's H200):
#   1. `gpudash bench --json` runs every experiment headless (cudarc, no server);
#   2. tests/gpu/lab_vs_torch.py measures the same things with PyTorch in the same
#      run and prints both side by side with PASS/FAIL per target of issue 4;
#   3. tests/gpu/lab_api.py drives a running gpudash over HTTP: one run per
#      experiment, polled to the end, chart.svg and results.csv fetched, empty_cache.
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/lab.sh    # ~3 minutes; artifacts land in $OUT (default /tmp/gpudash-lab)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
PORT=${GPUDASH_PORT:-7071}
OUT=${OUT:-/tmp/gpudash-lab}
mkdir -p "$OUT"
status=0

step() { printf '\n== %s\n' "$*"; }

step "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader || true

step "gpudash bench (table, latency only: shows the CLI output)"
timeout 60 "$BIN" bench --device 0 latency || status=1

step "gpudash bench --json, every experiment"
TRANSFER='{"kind":"transfer","sizes":[4096,1048576,16777216,268435456,1073741824],"warmup":3,"repetitions":10}'
PRECISION='{"kind":"precision","sizes":[4096,8192],"warmup":3,"repetitions":10}'
STREAMS='{"kind":"streams","copy_bytes":268435456,"gemm_size":8192,"kernels":8,"kernel_us":500,"warmup":2,"repetitions":5}'
if ! timeout 300 "$BIN" bench --device 0 --json --params "$TRANSFER" --params "$PRECISION" --params "$STREAMS" \
    memory transfer streams precision latency >"$OUT/bench.json" 2>"$OUT/bench.stderr"; then
  echo "bench exited non-zero (a run failed or a check failed); stderr:"; cat "$OUT/bench.stderr"; status=1
fi
python3 - "$OUT/bench.json" <<'PY'
import json, sys
for run in json.load(open(sys.argv[1])):
    r = run.get("result") or {}
    print(f"{run['kind']:<10} {run['status']:<10} passed={run['passed']} error={run.get('error')}")
    for c in r.get("checks", []):
        print(f"    [{'PASS' if c['passed'] else 'FAIL'}] {c['name']}: {c['detail']}")
PY

step "PyTorch side by side (targets of issue 4)"
timeout 300 python3 tests/gpu/lab_vs_torch.py "$OUT/bench.json" "$BIN" | tee "$OUT/compare.txt" || status=1

step "HTTP API of a running gpudash"
"$BIN" --listen "127.0.0.1:$PORT" --interval 500ms --no-history --lab-idle-release 20s >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
timeout 180 python3 tests/gpu/lab_api.py "http://127.0.0.1:$PORT" "$OUT" || status=1
kill $SERVER 2>/dev/null || true
wait $SERVER 2>/dev/null || true
grep -iE "error|panic" "$OUT/server.log" | head -20 || true

step "result: $([ $status -eq 0 ] && echo PASS || echo FAIL)  (artifacts in $OUT)"
exit $status
