#!/usr/bin/env bash
# Idle resident memory and sampler CPU of gpudash builds side by side, on real NVML (the device tool's
# H200): each binary is started alone with the default 1 s interval, left idle (no page open) for 15 s,
# then read by tests/gpu/rss.py, then its loops' CPU is measured over 20 s by tests/gpu/sampler_cost.py
# (an opt-level that saves pages may cost cycles); the runs alternate (A B A B) so a drift of the
# machine shows as a spread.
#
#   bash tests/gpu/rss_builds.sh NAME=BIN [NAME=BIN ...]
#   e.g. release=target/carry/gpudash-release dist=target/carry/gpudash "dist, MALLOC_ARENA_MAX=2=target/carry/gpudash"
# Each "MALLOC_…=N" a name contains (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_: glibc's
# malloc settings) is set in that binary's environment.
set -uo pipefail
cd "$(dirname "$0")/../.."
PORT=${GPUDASH_PORT:-7075}
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
status=0
for round in 1 2; do
  for spec in "$@"; do
    name=${spec%=*} bin=${spec##*=}
    env=()
    for word in ${name//,/ }; do
      if [[ "$word" =~ ^(MALLOC_[A-Z_]+=[0-9]+)$ ]]; then env+=("${BASH_REMATCH[1]}"); fi
    done
    env "${env[@]}" "$bin" --listen "127.0.0.1:$PORT" --data-dir "$(mktemp -d)" >/dev/null 2>&1 &
    pid=$!
    up=0
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && { up=1; break; }; sleep 0.1; done
    if [ "$up" -ne 1 ]; then echo "$name: did not answer /healthz within 10 s"; status=1; kill $pid 2>/dev/null; continue; fi
    sleep 15  # idle on purpose: what an unwatched server holds, not a wait for a condition
    echo "== $name (round $round, $(stat -c %s "$bin") bytes)"
    python3 tests/gpu/rss.py $pid || status=1
    python3 tests/gpu/sampler_cost.py $pid 20 1000 "$GPUS" || status=1
    kill $pid; wait $pid 2>/dev/null
  done
done
exit $status
