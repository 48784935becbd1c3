#!/usr/bin/env bash
# The GPU check, run on a machine with an NVIDIA GPU (the device tool's H200): starts a PyTorch job that holds
# memory and computes, and two gpudash servers of the same build beside it:
#   - the busy one, at --interval 200ms: compared with nvidia-smi (its /ws stream included), its health and
#     /metrics printed, its sampler's CPU per loop and its whole process's CPU measured over 34 s while the
#     comparison reads it (tests/gpu/sampler_cost.py; one 30 s graphics-engine window included), its memory
#     read (tests/gpu/rss.py), its energy estimate checked against NVML's counter;
#   - the idle one, at the default interval (1 s), on its own port and empty data dir, never asked anything
#     for 15 s: then its memory (rss.py), then its CPU over 30 s (sampler_cost.py: the loops and the whole
#     process, measured at 1 s, not scaled), then a page open on it (tests/gpu/page_open.py: the page's
#     assets, its API calls and its /ws live stream, kept reading) and its memory again.
# Then gpudash-bench's fast-path sample and its loops at 1 s, and pynvml's and peers' costs (reference only).
# ~125 s (all.sh gives it 200; at most ~190 s when nvml_costs.py and peer_costs.py run to their timeouts): the
# idle server's ~53 s run beside the job's start and the busy server's 34 s.
#
# Goals, fixed before any run from what the issues and docs/BENCHMARKS.md state (not fitted to a result); the
# script exits 1 when one is missed or could not be measured, and lists every verdict at the end:
#   - idle resident memory ≤ 30 MiB (the issue's; BENCHMARKS.md "the 30 MiB goal"), applied to VmRSS (RssAnon +
#     RssFile + RssShmem) of the idle server: the goal names resident memory, and every figure quoted against it
#     (29.4–29.6 MiB, session 19) is the whole RSS, file-backed pages included; RssAnon alone (≈15 MiB) would be a
#     goal nobody set. It is meant for the shipped build (target/dist/gpudash, which keeps its symbol table), idle
#     (no client), at the default interval, with real NVML: the build measured is named beside the verdict.
#     RssAnon, RssFile, Pss, the cgroup's memory.current and all of them with a page open are printed, not judged.
#   - sampler ≤ 2000 µs CPU per GPU per second at the default 1 s (issue 39; BENCHMARKS.md "the 2000 µs goal"),
#     applied to what it names: the sum of the sampler's three loops (gpudash-sampler + gpudash-details +
#     gpudash-gpm), on the idle server at 1 s, and on gpudash-bench loops' sum. The whole process's CPU
#     (utime+stime, every thread: alerts, XID, recorder, HTTP/WebSockets, identity, the driver's) is printed
#     beside it and not judged: no goal was stated for it.
#   - the fast path ≤ 100 µs CPU per GPU per sample, and ≤ 1% of one core for 8 GPUs at 10 Hz (BENCHMARKS.md,
#     "The targets"; gpudash-bench sampler prints the first as its reference).
#   - the energy estimate within ±2% of NVML's counter over each 30 s (two-sided).
#   - gpudash agrees with nvidia-smi (tests/gpu/compare_nvidia_smi.py, by its own bounds).
GOAL_IDLE_VMRSS_MIB=30
GOAL_SAMPLER_US=2000
GOAL_FAST_PATH_US=100
GOAL_FAST_PATH_8X10HZ_PCT=1
GOAL_ENERGY_DRIFT_PCT=2
#
#   cargo build --profile dist -p gpudash && cargo build --release -p gpudash-tests --bin gpudash-bench
#   # then on the GPU machine, with target/dist/gpudash and target/release/gpudash-bench carried:
#   bash tests/gpu/h200.sh
# GPUDASH_BIN picks the build (default target/dist/gpudash, the shipped one; else target/release/gpudash,
# stripped and not what is shipped); GPUDASH_BENCH the gpudash-bench binary.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${GPUDASH_BIN:-}" ] && [ -x target/dist/gpudash ]; then BIN=target/dist/gpudash; else BIN=${GPUDASH_BIN:-target/release/gpudash}; fi
BENCH=${GPUDASH_BENCH:-$(dirname "$BIN")/gpudash-bench}
[ -x "$BENCH" ] || BENCH=target/release/gpudash-bench
PORT=${GPUDASH_PORT:-7070}
IDLE_PORT=$((PORT + 1))
OUT=${OUT:-/tmp}
mkdir -p "$OUT"
[ -x "$BIN" ] || { echo "h200.sh: no gpudash build at $BIN (carry target/dist/gpudash, or set GPUDASH_BIN)"; exit 1; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "build: $BIN ($(stat -c %s "$BIN") bytes); gpudash-bench: $BENCH"

# The idle server starts first: its 15 s of idleness overlap the job's start.
IDLE_DATA=$(mktemp -d)
"$BIN" --listen "127.0.0.1:$IDLE_PORT" --data-dir "$IDLE_DATA" >"$OUT/gpudash-idle.log" 2>&1 &
IDLE=$!
IDLE_STARTED=$SECONDS
SERVER=
trap 'kill $SERVER $IDLE ${JOB:-} 2>/dev/null || true; rm -rf "$IDLE_DATA"' EXIT

# A realistic neighbour: 20 GiB held and matmuls running, so memory and power are far from idle (through the
# idle server's measurements too: they end about 53 s after it starts, the job about 63 s).
python3 - <<'PY' &
import torch, time
x = torch.empty(20 * 2**30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda")
end = time.time() + 60
while time.time() < end:
    a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
PY
JOB=$!
sleep 8

# Debug lines of gpudash's own modules carry the energy estimate's drift (read below).
GPUDASH_LOG=info,telemetry::nvml=debug "$BIN" --listen "127.0.0.1:$PORT" --interval 200ms >"$OUT/gpudash.log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && curl -sf "http://127.0.0.1:$IDLE_PORT/healthz" >/dev/null && break
  sleep 0.1
done
head -3 "$OUT/gpudash.log"
GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)

status=0
VERDICTS=()
# judge NAME VALUE LIMIT UNIT [BESIDE] [SHOWN]: PASS when VALUE ≤ LIMIT, printed now and listed at the end; an
# empty VALUE (not measured) is a FAIL. SHOWN, when given, is printed instead of VALUE (VALUE stays exact).
judge() {
  local name=$1 value=$2 limit=$3 unit=$4 beside=${5:-} shown=${6:-$2} verdict line
  if [ -z "$value" ]; then
    line="FAIL  $name: not measured (goal ≤ $limit $unit)"; status=1
  else
    if awk -v v="$value" -v l="$limit" 'BEGIN { exit !(v <= l) }'; then verdict=PASS; else verdict=FAIL; status=1; fi
    line="$verdict  $name: $shown $unit, goal ≤ $limit $unit${beside:+ ($beside)}"
  fi
  echo "$line"
  VERDICTS+=("$line")
}
# figure FILE KEY: KEY's value on the last `figures:` line of FILE (empty when absent).
figure() { { grep '^figures:' "$1" 2>/dev/null || true; } | tail -1 | tr ' ' '\n' | sed -n "s/^$2=//p"; }

# The idle server's measurements run beside the busy server's, in the background, printed further down.
idle_server() {
  local rc=0 page settle=$((15 - (SECONDS - IDLE_STARTED)))
  # Idle on purpose for 15 s since its start: what an unwatched server holds, not a wait for a condition.
  if [ "$settle" -gt 0 ]; then sleep "$settle"; fi
  python3 tests/gpu/rss.py "$IDLE" --label "idle: no client yet, default 1 s interval" >"$OUT/rss-idle.txt" 2>&1 || rc=1
  python3 tests/gpu/sampler_cost.py "$IDLE" 30 1000 "$GPUS" "idle: no client, default 1 s interval" >"$OUT/cost-idle.txt" 2>&1 || rc=1
  python3 tests/gpu/page_open.py "http://127.0.0.1:$IDLE_PORT" --seconds 40 >"$OUT/page-open.txt" 2>&1 &
  page=$!
  for _ in $(seq 100); do grep -q '^page open:' "$OUT/page-open.txt" && break; sleep 0.1; done
  if grep -q '^page open:' "$OUT/page-open.txt"; then
    sleep 5  # the page's calls answered, ticks flowing and the GPM loop at its watched 1 s windows
    python3 tests/gpu/rss.py "$IDLE" --label "a page open: its assets, API calls and /ws stream" \
      --against "$OUT/rss-idle.txt" >"$OUT/rss-page.txt" 2>&1 || rc=1
  else
    echo "no page could be opened within 10 s: memory with a page open not measured" >"$OUT/rss-page.txt"; rc=1
  fi
  kill -TERM $page 2>/dev/null || true
  wait $page || rc=1
  return $rc
}
idle_server &
IDLE_JOB=$!

# The sampler's cost is measured on the running server while the comparison below reads it.
python3 tests/gpu/sampler_cost.py "$SERVER" 34 200 "$GPUS" "busy: 200 ms interval, answering the comparison" \
  >"$OUT/sampler-cost.txt" 2>&1 &
COST=$!
if python3 tests/gpu/compare_nvidia_smi.py "http://127.0.0.1:$PORT"; then
  VERDICTS+=("PASS  gpudash agrees with nvidia-smi (compare_nvidia_smi.py's bounds)")
else
  VERDICTS+=("FAIL  gpudash does not agree with nvidia-smi (compare_nvidia_smi.py's bounds; its lines above)"); status=1
fi

echo; echo "== health and metrics as gpudash serves them"
curl -sf "http://127.0.0.1:$PORT/api/devices" >"$OUT/devices.json"
python3 - "$OUT/devices.json" <<'PY'
import json, sys
for d in json.load(open(sys.argv[1]))["devices"]:
    s, h = d["latest"] or {}, d["health"] or {}
    print(f"GPU {d['index']}: P{s.get('pstate')} clocks={s.get('clock_events')} pcie={s.get('pcie_link')}/{d.get('pcie_max')} "
          f"fans={s.get('fan_speeds')} enforced={s.get('enforced_power_limit_mw')} mW")
    print(f"  persistence={h.get('persistence_mode')} compute={h.get('compute_mode')} mig={h.get('mig_enabled')} "
          f"ecc={h.get('ecc_enabled')} vol={h.get('ecc_volatile')} agg={h.get('ecc_aggregate')} remapped={h.get('remapped_rows')}")
    print(f"  bar1={h.get('bar1_used')}/{h.get('bar1_total')} nvlinks up={sum(l['active'] for l in h.get('nvlinks', []))}/{len(h.get('nvlinks', []))} "
          f"pcie tx/rx={h.get('pcie_tx_bytes_per_s')}/{h.get('pcie_rx_bytes_per_s')} B/s energy={h.get('energy_mj')} mJ xids={h.get('xids')}")
PY
curl -sf "http://127.0.0.1:$PORT/metrics" >"$OUT/metrics.txt"
echo "/metrics: $(grep -vc '^#' "$OUT/metrics.txt") series"; grep -E '^(DCGM_FI_DEV_FB_USED|DCGM_FI_DEV_POWER_USAGE|gpudash_process_memory_bytes)' "$OUT/metrics.txt" | head -6

echo; echo "== CPU of the busy server (200 ms, answering the comparison): the sampler's loops and the whole process"
wait $COST || status=1
cat "$OUT/sampler-cost.txt"

echo; echo "== what holds the busy server's memory (tests/gpu/rss.py; not judged: the memory goal is for an idle server)"
python3 tests/gpu/rss.py "$SERVER" --label "busy: 200 ms interval, after the comparison" || status=1

echo; echo "== energy: the counter every 30 s, the power draw integrated between (the estimate against the next counter read)"
for _ in $(seq 400); do grep -q 'drift_mj=' "$OUT/gpudash.log" && break; sleep 0.1; done
python3 - "$OUT/gpudash.log" >"$OUT/energy.txt" <<'PY' || true
import re, sys
rows = [tuple(map(int, m)) for m in re.findall(r"index=(\d+) drift_mj=(-?\d+) counted_mj=(\d+)", open(sys.argv[1]).read())]
if not rows:
    sys.exit("no second counter read within 40 s of waiting: the estimate was not checked")
for gpu, drift, counted in rows:
    share = 100 * drift / counted if counted else float("nan")
    print(f"  GPU {gpu}: estimate {drift / 1000:+.1f} J off the counter's {counted / 1000:.1f} J over 30 s ({share:+.2f}%)")
print(f"figures: worst_pct={100 * max(abs(d) / c for _, d, c in rows if c):.2f}")
PY
cat "$OUT/energy.txt"
judge "energy estimate against NVML's counter, worst GPU (two-sided)" "$(figure "$OUT/energy.txt" worst_pct)" \
  "$GOAL_ENERGY_DRIFT_PCT" "%"
kill $SERVER 2>/dev/null || true

echo; echo "== the idle server: the same build alone at the default 1 s interval (port $IDLE_PORT, empty data dir)"
wait $IDLE_JOB || status=1
cat "$OUT/rss-idle.txt" "$OUT/cost-idle.txt"
echo "-- with a page open (tests/gpu/page_open.py)"
cat "$OUT/page-open.txt" "$OUT/rss-page.txt"
kill $IDLE 2>/dev/null || true
mib() { awk -v k="$1" 'BEGIN { if (k != "") printf "%.1f MiB", k / 1024; else printf "not measured" }'; }
vmrss=$(figure "$OUT/rss-idle.txt" vmrss_kib)
case "$(figure "$OUT/rss-idle.txt" stripped)" in
  0) kind="not stripped: the shipped kind" ;;
  1) kind="STRIPPED: not the shipped build, which keeps its symbol table" ;;
  *) kind="stripped or not: unknown" ;;
esac
idle_figures="RssAnon $(mib "$(figure "$OUT/rss-idle.txt" rss_anon_kib)"), RssFile $(mib "$(figure "$OUT/rss-idle.txt" rss_file_kib)")"
idle_figures+=", Pss $(mib "$(figure "$OUT/rss-idle.txt" pss_kib)"); with a page open VmRSS $(mib "$(figure "$OUT/rss-page.txt" vmrss_kib)")"
judge "idle resident memory (VmRSS), default 1 s, no page open" \
  "$(awk -v k="$vmrss" 'BEGIN { if (k != "") printf "%.4f", k / 1024 }')" "$GOAL_IDLE_VMRSS_MIB" "MiB" \
  "$vmrss kB; $BIN, $kind; not judged: $idle_figures" "$(awk -v k="$vmrss" 'BEGIN { printf "%.1f", k / 1024 }')"
cpu() { echo "$(figure "$1" process_us) ± $(figure "$1" process_error_us)"; }
beside="not judged, beside it: the whole process (utime+stime) $(cpu "$OUT/cost-idle.txt") µs per GPU per second at 1 s idle"
beside+=" (its threads' schedstat summed: $(figure "$OUT/cost-idle.txt" threads_us)), $(cpu "$OUT/sampler-cost.txt") at 200 ms busy"
judge "sampler: fast + slow + GPM loop at the default 1 s, idle server" "$(figure "$OUT/cost-idle.txt" loops_us)" \
  "$GOAL_SAMPLER_US" "µs CPU per GPU per second" "$beside"

echo; echo "== the same libraries step by step in a process of their own (tests/gpu/rss_parts.py; after the idle server's"
echo "   windows: it makes a CUDA context, a GPU process the idle server's slow loop would have read)"
python3 tests/gpu/rss_parts.py || status=1

echo; echo "== one fast-path sample in isolation (gpudash-bench sampler)"
"$BENCH" sampler --samples 2000 | tee "$OUT/bench-sampler.txt" || status=1
judge "fast path, CPU per GPU per sample (gpudash-bench sampler)" \
  "$(sed -n 's/.*CPU per GPU: *\([0-9.]*\) µs.*/\1/p' "$OUT/bench-sampler.txt" | head -1)" "$GOAL_FAST_PATH_US" "µs"
judge "fast path, 8 GPUs at 10 Hz (gpudash-bench sampler)" \
  "$(sed -n 's/.*8 GPUs at 10 Hz would cost \([0-9.]*\)% of one core.*/\1/p' "$OUT/bench-sampler.txt" | head -1)" \
  "$GOAL_FAST_PATH_8X10HZ_PCT" "% of one core"

echo; echo "== the sampler's loops at the default 1 s interval, per loop and per NVML call (gpudash-bench loops)"
"$BENCH" loops --seconds 35 | tee "$OUT/bench-loops.txt" || status=1
judge "sampler: the three loops' sum in gpudash-bench loops, default 1 s" \
  "$(sed -n 's/.*sum of the three loops: *\([0-9.]*\) µs.*/\1/p' "$OUT/bench-loops.txt" | head -1)" \
  "$GOAL_SAMPLER_US" "µs CPU per GPU per second"

echo; echo "== the same NVML calls from pynvml, once per 200 ms tick, cold (tests/gpu/nvml_costs.py; reference)"
timeout 50 python3 tests/gpu/nvml_costs.py --seconds 10 || echo "nvml_costs.py did not finish (reference only, not a failure)"

echo; echo "== peers' sampling cost on this machine (reference figures of docs/BENCHMARKS.md)"
timeout 40 python3 tests/gpu/peer_costs.py || echo "peer_costs.py did not finish (reference only, not a failure)"

echo; echo "== goals (fixed at the top of tests/gpu/h200.sh before the run)"
printf '%s\n' "${VERDICTS[@]}"
[ "$status" -eq 0 ] || echo "FAIL: a goal above was missed or not measured, or a step failed (exit 1)"
exit $status
