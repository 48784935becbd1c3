#!/usr/bin/env bash
# The lab gives its GPU back when idle: after every experiment has run over HTTP (lab_api.py, which
# creates cuBLAS handles, NVRTC kernels and pool memory), and the lab's idle release has come,
# nvidia-smi no longer lists gpudash on the GPU; then a second round runs (a fresh context works
# after the reset) and is given back the same way. The runs go to the lab's worker process
# (lab/src/isolated/), so the server itself never holds CUDA: prints the server's host RSS
# (VmRSS, RssAnon) before the first run, right after the runs and after the idle release, and the
# worker's peak RSS (VmHWM) while the runs go. Exits 1 when the GPU is not given back, a round
# fails, or the server's RSS after the release is not within 5 MiB of its idle figure.
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

# The server's Lab workers: its children with GPUDASH_LAB_WORKER in their environment.
workers() {
  for p in $(pgrep -P "$SERVER"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -q '^GPUDASH_LAB_WORKER=' && echo "$p"
  done
}
# gpudash on the GPU: the server or one of its workers.
on_gpu() {
  local pids; pids=" $SERVER $(workers | tr '\n' ' ')"
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader \
    | awk -F', ' -v pids="$pids" 'index(pids, " " $1 " ") {print "pid " $1 ": " $2}' | paste -sd' '
}
kib() { awk -v f="$2:" '$1 == f {print $2}' "/proc/$1/status" 2>/dev/null; }
host_rss() { echo "server VmRSS $(kib "$SERVER" VmRSS) kB, RssAnon $(kib "$SERVER" RssAnon) kB"; }
report() { echo "$1: on the GPU: ${2:-not listed}; $(host_rss)"; }
# Keeps the largest VmHWM any worker reached in $OUT/worker_peak_kib, until killed.
watch_worker_peak() {
  local peak=0 hwm
  while :; do
    for p in $(workers); do
      hwm=$(kib "$p" VmHWM)
      [ -n "$hwm" ] && [ "$hwm" -gt "$peak" ] && { peak=$hwm; echo "$peak" >"$OUT/worker_peak_kib"; }
    done
    sleep 0.2
  done
}
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
IDLE_RSS=$(kib "$SERVER" VmRSS)
for round in 1 2; do
  mkdir -p "$OUT/round$round"
  rm -f "$OUT/worker_peak_kib"
  watch_worker_peak & WATCHER=$!
  python3 tests/gpu/lab_api.py "http://127.0.0.1:$PORT" "$OUT/round$round" >"$OUT/round$round.log" 2>&1 \
    || { echo "round $round: lab_api.py failed"; tail -20 "$OUT/round$round.log"; status=1; }
  grep -E "^(API|[a-z]+ +run)" "$OUT/round$round.log" | sed "s/^/round $round: /" | cut -c1-140
  report "round $round: right after the runs" "$(on_gpu)"
  kill "$WATCHER" 2>/dev/null; wait "$WATCHER" 2>/dev/null
  echo "round $round: the Lab worker's peak RSS (VmHWM): $(cat "$OUT/worker_peak_kib" 2>/dev/null || echo '?') kB"
  given_back "round $round: after the lab's idle release" || status=1
  [ -z "$(workers)" ] || { echo "round $round: a Lab worker is still running after the idle release: $(workers)"; status=1; }
  after=$(kib "$SERVER" VmRSS)
  delta=$((after - IDLE_RSS)); [ "$delta" -lt 0 ] && delta=$((-delta))
  if [ "$delta" -gt 5120 ]; then
    echo "round $round: server VmRSS after the release is $after kB, idle was $IDLE_RSS kB: more than 5 MiB apart"
    status=1
  else
    echo "round $round: server VmRSS after the release $after kB, within 5 MiB of the idle $IDLE_RSS kB"
  fi
done
grep -iE "could not reset|still referenced|panick" "$OUT/server.log" && status=1
[ "$status" -eq 0 ] && echo "lab_release: PASS" || echo "lab_release: FAIL"
exit $status
