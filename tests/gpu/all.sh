#!/usr/bin/env bash
# Every GPU check in one call, for the device tool's machine (2×H200 is best: p2p needs two GPUs).
# Build here, then carry the binaries (the carried files and the tree must fit the tool's 64 MiB: the
# release gpudash and gpudash-bench are ~22 MiB each, the dist gpudash ~18 MiB):
#   cargo build --release && cargo build --release -p gpudash-tests --bin gpudash-bench
#   cargo build --profile dist -p gpudash   # what h200.sh measures memory on (the shipped build)
#   run(command="GPUDASH_BIN=target/dist/gpudash bash tests/gpu/all.sh h200 gpm",
#       carry=["target/dist/gpudash", "target/release/gpudash-bench"], timeout_s=600)
#   run(command="bash tests/gpu/all.sh faults lab", carry=["target/release/gpudash"], timeout_s=600)
#   run(command="bash tests/gpu/all.sh collectives p2p", carry=["target/release/gpudash"], kind="nvidia-h200-x2")
# Each part runs under its own timeout (h200 200 + bridge 120 + gpm 180 = 500 s; faults 150 + lab 420 = 570 s;
# collectives 300 + p2p 100 = 400 s), so each of these calls stays under the device tool's 10 minutes even
# when a part hangs: run `all.sh h200 gpm`, then `all.sh faults lab`, then `all.sh collectives p2p`.
# The timeouts of lab (420), p2p (100) and collectives (300) are the part_timeout_s their deadlines are cut
# from in tests/gpu/rules.json (test_compare.py checks that they agree).
# Each part's log lands in $OUT (the device tool's output folder); the summary is printed last, with the rules
# (version and sha256 of tests/gpu/rules.json) that judged the comparisons.
#
# Exit status (tests/gpu/result.sh maps each part's exit; a failure wins over INCONCLUSIVE, INCONCLUSIVE over
# a skipped part):
#   0  every wanted part ran and passed
#   1  a part failed: FAIL, a timeout, a script error (an exit 2 or 3 without the INCONCLUSIVE or SKIPPED line
#      that goes with it), or the rules file cannot be read
#   2  a part left a row INCONCLUSIVE (its script printed "== result: INCONCLUSIVE"): not a pass
#   3  a part was not run because this machine cannot (p2p on one GPU): the last line says
#      "all.sh: INCOMPLETE (skipped: p2p)"
set -uo pipefail
cd "$(dirname "$0")/../.."
source tests/gpu/result.sh
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/gpudash-gpu}
mkdir -p "$OUT"
results=()
failed=() inconclusive=() skipped=()
rules=$(python3 tests/gpu/rules.py label 2>&1) || { results+=("rules: FAIL ($rules)"); failed+=(rules); rules="rules unreadable"; }
echo "$rules (tests/gpu/rules.json)"
part() {
  local name=$1 limit=$2; shift 2
  local started=$SECONDS rc=0 verdict
  mkdir -p "$OUT/$name"
  OUT="$OUT/$name" timeout "$limit" bash "$@" >"$OUT/$name.log" 2>&1 || rc=$?
  verdict=$(part_verdict "$rc" "$OUT/$name.log" "$limit" "$((SECONDS - started))")
  case "$verdict" in
    PASS*) results+=("$name: $verdict") ;;
    INCONCLUSIVE*) results+=("$name: $verdict — see $name.log"); inconclusive+=("$name") ;;
    SKIPPED*) results+=("$name: $verdict — see $name.log"); skipped+=("$name") ;;
    *) results+=("$name: $verdict — see $name.log"); failed+=("$name") ;;
  esac
  tail -40 "$OUT/$name.log"
}
# Parts to run: the arguments (h200 bridge p2p gpm faults lab release collectives alerts team allocator identity jobs), or all of them. All five take up to ~12 minutes,
# more than one device call allows (10), so run them in two calls, e.g. `all.sh h200 bridge gpm` then `all.sh lab p2p`.
wanted=("${@:-h200 bridge p2p gpm faults lab release collectives alerts team allocator identity jobs}")
wanted=" ${wanted[*]} "
want() { [[ "$wanted" == *" $1 "* ]]; }
want h200 && part h200 200 tests/gpu/h200.sh      # gpudash vs nvidia-smi, processes, health, /metrics, RSS, sampler CPU per loop and call, peers' costs
want bridge && part bridge 120 tests/gpu/bridge.sh  # PyTorch client on a real training loop
if want p2p; then
  count=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  if [ "$count" -ge 2 ]; then
    part p2p 100 tests/gpu/p2p.sh      # p2p vs PyTorch, interleaved; topology vs nvidia-smi
  else
    results+=("p2p: SKIPPED (one GPU; run on nvidia-h200-x2)")
    skipped+=(p2p)
  fi
fi
want gpm && part gpm 180 tests/gpu/gpm.sh         # SM/tensor activity vs pynvml GPM and a calibrated load, idle holder, DCGM_FI_PROF_*
want faults && part faults 150 tests/gpu/faults.sh  # each Lab check catches its injected fault (GPUDASH_BENCH_FAULT)
want lab && part lab 420 tests/gpu/lab.sh         # every experiment vs PyTorch, interleaved rounds; the HTTP API
want release && part release 120 tests/gpu/lab_release.sh  # the lab's idle release gives the GPU back (nvidia-smi), twice
want collectives && part collectives 300 tests/gpu/collectives.sh  # NCCL on one rank, each collective checked; DDP compute vs PyTorch
want alerts && part alerts 150 tests/gpu/alerts.sh  # idle_held and gpu_free alerts from a PyTorch job, to a webhook
want team && part team 330 tests/gpu/team.sh        # usage accounting vs a PyTorch job's wall time and memory; SIGTERM from the API
want allocator && part allocator 150 tests/gpu/allocator.sh  # allocator map vs memory_snapshot(), no trace, OOM capture
want identity && part identity 90 tests/gpu/identity.sh      # a PyTorch job shaped as a Slurm job: its owner in the API, usage, /metrics
want jobs && part jobs 150 tests/gpu/jobs.sh                  # a scripted PyTorch job's report (/api/jobs) vs its own timing and pynvml's GPM

printf '
== figures
'
grep -h -E "sample→receipt|^  (fast loop|slow loop|GPM loop|sum)|^nvidia-smi --query|^pynvml|^nvitop|^lab vs PyTorch:|^p2p:|^collectives:|^allocator:|^  (GPU-hours|memory GiB-hours|energy kWh)|INCONCLUSIVE$|FAIL$|MISSING$|\[FAIL\]" \
  "$OUT"/h200.log "$OUT"/p2p.log "$OUT"/lab.log "$OUT"/collectives.log "$OUT"/gpm.log "$OUT"/alerts.log "$OUT"/team.log "$OUT"/allocator.log 2>/dev/null || true
printf '\n== summary\n'
printf '%s\n' "${results[@]}"
echo "rules: $rules"
# What else stood in the way, after the headline's own parts: "; inconclusive: lab; skipped: p2p".
also() {
  local out="" kind
  for kind in "$@"; do
    case "$kind" in
      inconclusive) [ ${#inconclusive[@]} -gt 0 ] && out+="; inconclusive: ${inconclusive[*]}" ;;
      skipped) [ ${#skipped[@]} -gt 0 ] && out+="; skipped: ${skipped[*]}" ;;
    esac
  done
  echo "$out"
}
if [ ${#failed[@]} -gt 0 ]; then
  echo "all.sh: FAIL (failed: ${failed[*]}$(also inconclusive skipped)); $rules"
  exit 1
fi
if [ ${#inconclusive[@]} -gt 0 ]; then
  echo "all.sh: INCONCLUSIVE (inconclusive: ${inconclusive[*]}$(also skipped)), not a pass; $rules"
  exit 2
fi
if [ ${#skipped[@]} -gt 0 ]; then
  echo "all.sh: INCOMPLETE (skipped: ${skipped[*]}), not a pass; $rules"
  exit 3
fi
echo "all.sh: PASS; $rules"
