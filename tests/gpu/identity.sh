#!/usr/bin/env bash
# Workload identity on a real GPU. This machine has no Slurm (nothing can be installed on it), so
# the job is made the shape a real one has: a PyTorch process with a Slurm job's environment
# (SLURM_JOB_ID, SLURM_JOB_USER, SLURM_JOB_ACCOUNT, SLURM_JOB_PARTITION, as srun sets them) in a
# cgroup named as slurmd's proctrack/cgroup names it (.../job_N/step_0). gpudash, on real NVML, must
# name its job and owner in /api/processes, in usage (group=job and group=user) and in /metrics.
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
CGROUP=
cleanup() {
  kill $SERVER $JOB 2>/dev/null || true
  wait $JOB 2>/dev/null || true
  [ -n "$CGROUP" ] && rmdir "$CGROUP" "$(dirname "$CGROUP")" 2>/dev/null
  rm -rf "$DATA"
}
trap cleanup EXIT
for _ in $(seq 100); do curl -sf "$URL/healthz" >/dev/null && break; sleep 0.1; done
head -3 "$OUT/gpudash.log"

echo "== a PyTorch job with a Slurm job's environment (SLURM_JOB_ID=$JOB_ID, user ana, account vision, partition gpu)"
SLURM_JOB_ID=$JOB_ID SLURM_JOB_USER=ana SLURM_JOB_ACCOUNT=vision SLURM_JOB_PARTITION=gpu python3 -c '
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
  CGROUP=/sys/fs/cgroup/gpudash_slurm/job_$JOB_ID/step_0
else
  CGROUP=/sys/fs/cgroup/freezer/slurm/uid_0/job_$JOB_ID/step_0
fi
if mkdir -p "$CGROUP" 2>"$OUT/cgroup.err" && echo "$JOB" >"$CGROUP/cgroup.procs" 2>>"$OUT/cgroup.err"; then
  echo "moved PID $JOB into $CGROUP"
else
  echo "could not make the job's cgroup ($(cat "$OUT/cgroup.err")): the environment alone names the job"
  CGROUP=
fi
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
checks = [('job user', job.get('user'), 'ana'), ('account', job.get('account'), 'vision'),
          ('partition', job.get('partition'), 'gpu'), ('owner', owner['name'], 'ana'),
          ('owner source', owner['source'], 'slurm_job')]
bad = [f'{n}: {got!r}, not {want!r}' for n, got, want in checks if got != want]
print('owner ana from the Slurm job; Unix user', p.get('user'), '(shown beside it)' if p.get('user') != 'ana' else '')
sys.exit('; '.join(bad) if bad else 0)" || fail "the job's identity"
else
  fail "gpudash did not name Slurm job $JOB_ID on PID $JOB within 30 s"
fi

echo "== /metrics"
line=$(curl -sf "$URL/metrics" | grep "^gpudash_process_memory_bytes{.*pid=\"$JOB\"")
echo "  $line"
[[ "$line" == *"hpc_job=\"$JOB_ID\""* && "$line" == *'user="ana"'* ]] || fail "the job's metrics labels"

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
usage job | python3 -c "
import json, sys
rows = [r for r in json.load(sys.stdin)['rows'] if r.get('workload') == '$JOB_ID']
sys.exit(0 if rows and rows[0]['gpu_hours'] > 0 and rows[0]['memory_gib_hours'] > 0 else 'no GPU-hours charged to job $JOB_ID')
" || fail "usage by job"
usage user | grep -q '"user":"ana"' || fail "usage by owner has no row for ana"

echo "== the lookup's cost on this machine (gpudash-bench identity)"
[ -x "$BENCH" ] && "$BENCH" identity --processes 400 --passes 2000

[ $status -eq 0 ] && echo "identity: PASS" || echo "identity: FAIL"
exit $status
