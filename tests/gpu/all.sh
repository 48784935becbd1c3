#!/usr/bin/env bash
# Every GPU check in one call, for the device tool's machine (2×H200 is best: p2p needs two GPUs).
# Build here, then carry the release binaries:
#   cargo build --release && cargo build --release -p gpudash-tests --bin gpudash-bench
#   run(command="bash tests/gpu/all.sh h200 bridge gpm", carry=["target/release/gpudash", "target/release/gpudash-bench"],
#       kind="nvidia-h200-x2", timeout_s=600)       # then the same with "bash tests/gpu/all.sh lab p2p"
# Each part runs under its own timeout (h200 200 + bridge 120 + gpm 180 = 500 s; lab 420 + gpm 180 = 600 s, ~470 s as run;
# h200 200 + collectives 300 = 500 s), so each of these calls stays under the device tool's 10 minutes even
# when a part hangs: run `all.sh lab gpm`, then `all.sh h200 collectives`.
# Each part's log lands in $OUT (the device tool's output folder); the summary is printed last,
# and the exit status is non-zero when any part failed (or timed out).
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/gpudash-gpu}
mkdir -p "$OUT"
results=()
failed=0
inconclusive=0
part() {
  local name=$1 limit=$2; shift 2
  local started=$SECONDS rc=0
  mkdir -p "$OUT/$name"
  OUT="$OUT/$name" timeout "$limit" bash "$@" >"$OUT/$name.log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    results+=("$name: PASS ($((SECONDS - started)) s of $limit)")
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    results+=("$name: FAIL, timed out after $limit s — see $name.log")
    failed=1
  elif [ "$rc" -eq 2 ]; then
    # compare.py's rule: every row decided or more rounds, up to a bound; a row still undecided is no pass.
    results+=("$name: INCONCLUSIVE (exit 2: a row the interleaved rounds could not decide, $((SECONDS - started)) s) — see $name.log")
    inconclusive=1
  else
    results+=("$name: FAIL (exit $rc, $((SECONDS - started)) s) — see $name.log")
    failed=1
  fi
  tail -40 "$OUT/$name.log"
}
# Parts to run: the arguments (h200 bridge p2p gpm lab release collectives alerts team allocator), or all of them. All five take up to ~12 minutes,
# more than one device call allows (10), so run them in two calls, e.g. `all.sh h200 bridge gpm` then `all.sh lab p2p`.
wanted=("${@:-h200 bridge p2p gpm lab release collectives alerts team allocator identity}")
wanted=" ${wanted[*]} "
want() { [[ "$wanted" == *" $1 "* ]]; }
want h200 && part h200 200 tests/gpu/h200.sh      # gpudash vs nvidia-smi, processes, health, /metrics, RSS, sampler CPU per loop and call, peers' costs
want bridge && part bridge 120 tests/gpu/bridge.sh  # PyTorch client on a real training loop
if want p2p; then
  count=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  if [ "$count" -ge 2 ]; then
    part p2p 100 tests/gpu/p2p.sh      # p2p vs PyTorch, interleaved; topology vs nvidia-smi
  else
    results+=("p2p: skipped (one GPU; run on nvidia-h200-x2)")
  fi
fi
want gpm && part gpm 180 tests/gpu/gpm.sh         # SM/tensor activity vs pynvml GPM and a calibrated load, idle holder, DCGM_FI_PROF_*
want lab && part lab 420 tests/gpu/lab.sh         # every experiment vs PyTorch, interleaved rounds; the HTTP API
want release && part release 120 tests/gpu/lab_release.sh  # the lab's idle release gives the GPU back (nvidia-smi), twice
want collectives && part collectives 300 tests/gpu/collectives.sh  # NCCL on one rank, each collective checked; DDP compute vs PyTorch
want alerts && part alerts 150 tests/gpu/alerts.sh  # idle_held and gpu_free alerts from a PyTorch job, to a webhook
want team && part team 330 tests/gpu/team.sh        # usage accounting vs a PyTorch job's wall time and memory; SIGTERM from the API
want allocator && part allocator 150 tests/gpu/allocator.sh  # allocator map vs memory_snapshot(), no trace, OOM capture
want identity && part identity 90 tests/gpu/identity.sh      # a PyTorch job shaped as a Slurm job: its owner in the API, usage, /metrics

printf '
== figures
'
grep -h -E "sample→receipt|^  (fast loop|slow loop|GPM loop|sum)|^nvidia-smi --query|^pynvml|^nvitop|^lab vs PyTorch:|^p2p:|^collectives:|^allocator:|^  (GPU-hours|memory GiB-hours|energy kWh)|INCONCLUSIVE$|FAIL$|MISSING$|\[FAIL\]" \
  "$OUT"/h200.log "$OUT"/p2p.log "$OUT"/lab.log "$OUT"/collectives.log "$OUT"/gpm.log "$OUT"/alerts.log "$OUT"/team.log "$OUT"/allocator.log 2>/dev/null || true
printf '\n== summary\n'
printf '%s\n' "${results[@]}"
if [ "$failed" -ne 0 ]; then
  echo "all.sh: FAIL"
  exit 1
fi
if [ "$inconclusive" -ne 0 ]; then
  echo "all.sh: INCONCLUSIVE (not a pass)"
  exit 2
fi
echo "all.sh: PASS"
