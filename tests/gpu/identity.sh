#!/usr/bin/env bash
# Workload identity on a real GPU. This machine has no Slurm (nothing can be installed on it), so
# the job is made the shape a real one has: a PyTorch process with a Slurm job's environment
# (SLURM_JOB_ID, SLURM_JOB_USER, SLURM_JOB_UID, SLURM_JOB_ACCOUNT, SLURM_JOB_PARTITION, as srun sets
# them) in a cgroup where slurmd's proctrack/cgroup puts it (v1 slurm/uid_N/job_M/step_0, v2
# system.slice/slurmstepd.scope/job_M/step_0). gpudash, on real NVML, must name its job (verified)
# and owner in /api/processes, in usage (group=job and group=user) and in /metrics. Beside it, a
# second PyTorch process claims ana's job 4343 in its environment alone (the forgery gpudash once
# believed): it must stay its Unix user's, its job shown unverified, counted under no job.
# Then the identity lookup's cost (gpudash-bench identity) on this machine's /proc.
#
#   cargo build --release && cargo build --release -p gpudash-tests --bin gpudash-bench
#   bash tests/gpu/identity.sh     # on the GPU machine, with both binaries carried
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
BENCH=${GPUDASH_BENCH:-target/release/gpudash-bench}
PORT=${GPUDASH_PORT:-7074}
OUT=${OUT:-/tmp/gpudash-identity}
URL="http://127.0.0.1:$PORT"
JOB_ID=4242
mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=0
DATA=$(mktemp -d)
status=0
fail() { echo "FAIL: $*"; status=1; }

"$BIN" --listen "127.0.0.1:$PORT" --interval 500ms --data-dir "$DATA" >"$OUT/gpudash.log" 2>&1 &
SERVER=$!
JOB=
FORGER=
CGROUP=
cleanup() {
  kill $SERVER $JOB 2>/dev/null || true
  wait $JOB 2>/dev/null || true
  kill $FORGER 2>/dev/null || true
  [ -n "$CGROUP" ] && rmdir "$CGROUP" "$(dirname "$CGROUP")" 2>/dev/null
  rm -rf "$DATA"
}
trap cleanup EXIT
for _ in $(seq 100); do curl -sf "$URL/healthz" >/dev/null && break; sleep 0.1; done
head -3 "$OUT/gpudash.log"

ME=$(id -un); MY_UID=$(id -u)
echo "== a PyTorch job with a Slurm job's environment (SLURM_JOB_ID=$JOB_ID, user $ME, account vision, partition gpu)"
SLURM_JOB_ID=$JOB_ID SLURM_JOB_USER=$ME SLURM_JOB_UID=$MY_UID SLURM_JOB_ACCOUNT=vision SLURM_JOB_PARTITION=gpu python3 -c '
import torch, time
a = torch.randn(4096, 4096, device="cuda"); b = torch.randn(4096, 4096, device="cuda")
end = time.time() + 40
while time.time() < end:
    for _ in range(20):
        a @ b
    torch.cuda.synchronize(); time.sleep(0.05)
' &
JOB=$!

# Its cgroup, as slurmd makes it: cgroup v2 (one tree) or v1 (a hierarchy per controller).
if [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ]; then
  CGROUP=/sys/fs/cgroup/system.slice/slurmstepd.scope/job_$JOB_ID/step_0
else
  CGROUP=/sys/fs/cgroup/freezer/slurm/uid_$MY_UID/job_$JOB_ID/step_0
fi
if mkdir -p "$CGROUP" 2>"$OUT/cgroup.err" && echo "$JOB" >"$CGROUP/cgroup.procs" 2>>"$OUT/cgroup.err"; then
  echo "moved PID $JOB into $CGROUP"
else
  echo "could not make the job's cgroup ($(cat "$OUT/cgroup.err")): the environment alone names the job, unverified"
  CGROUP=
fi
VERIFIED=$([ -n "$CGROUP" ] && echo True || echo False)

echo "== a second PyTorch process claiming ana's job 4343 in its environment alone"
SLURM_JOB_ID=4343 SLURM_JOB_USER=ana SLURM_JOB_UID=1000 python3 -c '
import torch, time
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
time.sleep(60)
' &
FORGER=$!
echo "/proc/$JOB/cgroup:"; sed 's/^/  /' "/proc/$JOB/cgroup"

# Waits (up to $2 s) for /api/processes' entry of the job to pass the Python test $1 over `p`.
process() {
  local test=$1 limit=$2
  for _ in $(seq $((limit * 4))); do
    found=$(curl -sf "$URL/api/processes" | python3 -c "
import json, sys
for p in json.load(sys.stdin)['processes']:
    if p['pid'] == $JOB and ($test):
        print(json.dumps(p)); break" 2>/dev/null)
    [ -n "$found" ] && { echo "$found"; return 0; }
    sleep 0.25
  done
  return 1
}

echo "== /api/processes"
if p=$(process "(p.get('workload') or {}).get('job', {}).get('id') == '$JOB_ID'" 30); then
  echo "$p" | python3 -m json.tool | sed 's/^/  /'
  echo "$p" | python3 -c "
import json, sys
p = json.load(sys.stdin); job = p['workload']['job']; owner = p['owner']
verified = $VERIFIED
want_owner, want_source = ('$ME', 'slurm_job') if verified else ('$ME', 'unix_user')
checks = [('job user', job.get('user'), '$ME'), ('account', job.get('account'), 'vision'),
          ('partition', job.get('partition'), 'gpu'), ('verified', job.get('verified'), verified),
          ('owner', owner['name'], want_owner), ('owner source', owner['source'], want_source)]
bad = [f'{n}: {got!r}, not {want!r}' for n, got, want in checks if got != want]
print('owner', owner['name'], 'from', owner['source'], '; job verified:', job.get('verified'))
sys.exit('; '.join(bad) if bad else 0)" || fail "the job's identity"
else
  fail "gpudash did not name Slurm job $JOB_ID on PID $JOB within 30 s"
fi

echo "== the forged claim"
forged() {
  for _ in $(seq 120); do
    f=$(curl -sf "$URL/api/processes" | python3 -c "
import json, sys
for p in json.load(sys.stdin)['processes']:
    if p['pid'] == $FORGER and (p.get('workload') or {}).get('job'):
        print(json.dumps(p)); break" 2>/dev/null)
    [ -n "$f" ] && { echo "$f"; return 0; }
    sleep 0.25
  done
  return 1
}
if f=$(forged); then
  echo "$f" | python3 -c "
import json, sys
p = json.load(sys.stdin); job = p['workload']['job']; owner = p['owner']
checks = [('claimed job', job.get('id'), '4343'), ('claimed user', job.get('user'), 'ana'),
          ('verified', job.get('verified'), False), ('owner', owner['name'], '$ME'), ('owner source', owner['source'], 'unix_user')]
bad = [f'{n}: {got!r}, not {want!r}' for n, got, want in checks if got != want]
print('claimed job', job.get('id'), 'of', job.get('user'), '-> owner', owner['name'], 'from', owner['source'])
sys.exit('; '.join(bad) if bad else 0)" || fail "the forged claim was believed"
  fline=$(curl -sf "$URL/metrics" | grep "^gpudash_process_memory_bytes{.*pid=\"$FORGER\"")
  echo "  $fline"
  [[ "$fline" != *'hpc_job="4343"'* && "$fline" != *'user="ana"'* ]] || fail "the forged claim reached /metrics"
else
  fail "gpudash did not list the forging process $FORGER within 30 s"
fi

echo "== /metrics"
line=$(curl -sf "$URL/metrics" | grep "^gpudash_process_memory_bytes{.*pid=\"$JOB\"")
echo "  $line"
if [ "$VERIFIED" = True ]; then
  [[ "$line" == *"hpc_job=\"$JOB_ID\""* && "$line" == *"user=\"$ME\""* ]] || fail "the job's metrics labels"
else
  [[ "$line" != *"hpc_job="* ]] || fail "an unverified job's id reached /metrics"
fi

echo "== usage (group=job, group=user) after the job has run a while"
sleep_until=$((SECONDS + 20))
NOW_MS=$(($(date +%s%3N)))
usage() { curl -sf "$URL/api/usage?from=$((NOW_MS - 3600000))&to=$((NOW_MS + 3600000))&group=$1"; }
while [ $SECONDS -lt $sleep_until ]; do
  rows=$(usage job)
  echo "$rows" | grep -q "\"workload\":\"$JOB_ID\"" && [ $SECONDS -ge $((sleep_until - 10)) ] && break
  sleep 1
done
echo "  group=job:  $(usage job)"
echo "  group=user: $(usage user)"
if [ "$VERIFIED" = True ]; then
usage job | python3 -c "
import json, sys
rows = [r for r in json.load(sys.stdin)['rows'] if r.get('workload') == '$JOB_ID']
sys.exit(0 if rows and rows[0]['gpu_hours'] > 0 and rows[0]['memory_gib_hours'] > 0 else 'no GPU-hours charged to job $JOB_ID')
" || fail "usage by job"
fi
usage user | grep -q "\"user\":\"$ME\"" || fail "usage by owner has no row for $ME"
usage job | grep -q '"workload":"4343"' && fail "the forged job 4343 was charged usage"

echo "== the lookup's cost on this machine (gpudash-bench identity)"
[ -x "$BENCH" ] && "$BENCH" identity --processes 400 --passes 2000

[ $status -eq 0 ] && echo "identity: PASS" || echo "identity: FAIL"
exit $status
