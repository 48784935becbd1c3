#!/usr/bin/env bash
# Resident memory and CPU of gpudash builds side by side, on real NVML (the device tool's H200): each binary is
# started alone with the default 1 s interval, left idle (no client) for 15 s, then read by tests/gpu/rss.py (the
# build: path, size, stripped or not; VmRSS, RssAnon, RssFile, RssShmem, Pss, the cgroup's memory.current and the
# mappings), then its CPU is measured over 20 s by tests/gpu/sampler_cost.py (the sampler's three loops and the
# whole process beside them: an opt-level that saves pages may cost cycles), then a page is opened on it
# (tests/gpu/page_open.py: the page's assets, API calls and /ws stream, kept reading) and rss.py reads it again.
# The runs alternate (A B A B) so a drift of the machine shows as a spread; a table of every run ends the output.
# Figures only: the goals are judged by tests/gpu/h200.sh.
#
#   bash tests/gpu/rss_builds.sh NAME=BIN [NAME=BIN ...]
#   e.g. release=target/carry/gpudash-release dist=target/carry/gpudash "dist, MALLOC_ARENA_MAX=2=target/carry/gpudash"
# Each "MALLOC_…=N" a name contains (MALLOC_ARENA_MAX, MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_: glibc's
# malloc settings) is set in that binary's environment.
set -uo pipefail
cd "$(dirname "$0")/../.."
PORT=${GPUDASH_PORT:-7075}
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
figure() { { grep '^figures:' "$1" 2>/dev/null || true; } | tail -1 | tr ' ' '\n' | sed -n "s/^$2=//p"; }
mib() { awk -v k="$1" 'BEGIN { if (k != "") printf "%.1f", k / 1024; else printf "-" }'; }
status=0
rows=()
for round in 1 2; do
  for spec in "$@"; do
    name=${spec%=*} bin=${spec##*=}
    env=()
    for word in ${name//,/ }; do
      if [[ "$word" =~ ^(MALLOC_[A-Z_]+=[0-9]+)$ ]]; then env+=("${BASH_REMATCH[1]}"); fi
    done
    data=$(mktemp -d)
    env "${env[@]}" "$bin" --listen "127.0.0.1:$PORT" --data-dir "$data" >/dev/null 2>&1 &
    pid=$!
    up=0
    for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && { up=1; break; }; sleep 0.1; done
    if [ "$up" -ne 1 ]; then echo "$name: did not answer /healthz within 10 s"; status=1; kill $pid 2>/dev/null; continue; fi
    sleep 15  # idle on purpose: what an unwatched server holds, not a wait for a condition
    echo "== $name (round $round)"
    run="$OUT/rss-builds-$round-${#rows[@]}"
    python3 tests/gpu/rss.py $pid --label "$name: idle, no client, default 1 s" | tee "$run-idle.txt" || status=1
    python3 tests/gpu/sampler_cost.py $pid 20 1000 "$GPUS" "$name: idle, default 1 s" | tee "$run-cost.txt" || status=1
    python3 tests/gpu/page_open.py "http://127.0.0.1:$PORT" --seconds 30 >"$run-page.txt" 2>&1 &
    page=$!
    for _ in $(seq 100); do grep -q '^page open:' "$run-page.txt" && break; sleep 0.1; done
    if grep -q '^page open:' "$run-page.txt"; then
      sleep 5  # the page's calls answered and ticks flowing
      python3 tests/gpu/rss.py $pid --label "$name: a page open" --against "$run-idle.txt" | tee "$run-open.txt" || status=1
    else
      echo "$name: no page could be opened within 10 s"; status=1
    fi
    kill -TERM $page 2>/dev/null; wait $page || status=1
    cat "$run-page.txt"
    kill $pid; wait $pid 2>/dev/null
    rm -rf "$data"
    rows+=("$(printf '%-40s %5s %6s %7s %7s %6s %6s %7s %9s %9s' "$name" "$round" "$(mib "$(figure "$run-idle.txt" vmrss_kib)")" \
      "$(mib "$(figure "$run-idle.txt" rss_anon_kib)")" "$(mib "$(figure "$run-idle.txt" rss_file_kib)")" \
      "$(mib "$(figure "$run-idle.txt" pss_kib)")" "$(figure "$run-idle.txt" stripped)" "$(mib "$(figure "$run-open.txt" vmrss_kib)")" \
      "$(figure "$run-cost.txt" loops_us)" "$(figure "$run-cost.txt" process_us)")")
  done
done
echo; echo "== every run (MiB, idle unless named; open: VmRSS with a page open; µs CPU per GPU per second at the default 1 s, idle; strip: 1 stripped, 0 not)"
printf '%-40s %5s %6s %7s %7s %6s %6s %7s %9s %9s\n' build round VmRSS RssAnon RssFile Pss strip open loops process
printf '%s\n' "${rows[@]}"
exit $status
