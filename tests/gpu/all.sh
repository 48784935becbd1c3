#!/usr/bin/env bash
# Every GPU check in one call, for the device tool's machine (2×H200 is best: p2p needs two GPUs).
# Build here, then carry the release binaries:
#   cargo build --release && cargo build --release -p gpudash-tests --bin gpudash-bench
#   run(command="bash tests/gpu/all.sh", carry=["target/release/gpudash", "target/release/gpudash-bench"],
#       kind="nvidia-h200-x2", timeout_s=600)
# Each part's log lands in $OUT (the device tool's output folder), the summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/gpudash-gpu}
mkdir -p "$OUT"
results=()
part() {
  local name=$1; shift
  local started=$SECONDS
  if OUT="$OUT/$name" timeout "$1" bash "${@:2}" >"$OUT/$name.log" 2>&1; then
    results+=("$name: PASS ($((SECONDS - started)) s)")
  else
    results+=("$name: FAIL ($((SECONDS - started)) s) — see $name.log")
  fi
  tail -25 "$OUT/$name.log"
}
mkdir -p "$OUT/h200" "$OUT/bridge" "$OUT/p2p" "$OUT/lab" "$OUT/gpm"
part h200 120 tests/gpu/h200.sh          # gpudash vs nvidia-smi, processes, health, /metrics, sampling cost
part bridge 150 tests/gpu/bridge.sh      # PyTorch client on a real training loop
count=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
if [ "$count" -ge 2 ]; then part p2p 150 tests/gpu/p2p.sh; else results+=("p2p: skipped (one GPU)"); fi
part gpm 180 tests/gpu/gpm.sh            # SM/tensor activity vs pynvml GPM, idle holder, DCGM_FI_PROF_*
part lab 330 tests/gpu/lab.sh            # every experiment, PyTorch side by side, the HTTP API
printf '\n== summary\n'
printf '%s\n' "${results[@]}"
