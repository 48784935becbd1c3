#!/usr/bin/env bash
# Sharing a server on a real GPU (issue 18): usage accounting against a PyTorch job's own wall time and
# memory, and stopping the job with SIGTERM through the API as an admin (loopback: the local user is admin).
#   1. gpudash runs with --allow-signals and a fresh history database;
#   2. a PyTorch job holds a fixed tensor and runs GEMMs for JOB_SECONDS (default 240);
#   3. the admin sends SIGTERM through POST /api/processes/{pid}/signal; the job's exit status says SIGTERM;
#   4. /api/usage?group=user must match the job's wall time (GPU-hours) and its NVML memory × wall time
#      (GiB-hours) within 2%; energy is printed beside NVML's own counter over the job.
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/team.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
PORT=${GPUDASH_PORT:-7074}
OUT=${OUT:-/tmp/gpudash-team}
JOB_SECONDS=${JOB_SECONDS:-240}
URL="http://127.0.0.1:$PORT"
mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=0
DATA=$(mktemp -d)
"$BIN" --listen "127.0.0.1:$PORT" --interval 500ms --data-dir "$DATA" --allow-signals >"$OUT/gpudash.log" 2>&1 &
SERVER=$!
JOB=
trap 'kill $SERVER $JOB 2>/dev/null || true; rm -rf "$DATA"' EXIT
for _ in $(seq 100); do curl -sf "$URL/healthz" >/dev/null && break; sleep 0.1; done
head -3 "$OUT/gpudash.log"
status=0
fail() { echo "FAIL: $*"; status=1; }
now_ms() { python3 -c 'import time; print(int(time.time() * 1000))'; }
# NVML's total energy counter (mJ), which nvidia-smi does not offer as a query field.
energy_mj() { python3 -c 'import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetTotalEnergyConsumption(pynvml.nvmlDeviceGetHandleByIndex(0)))' 2>/dev/null || echo nan; }

from_ms=$(now_ms)
energy_before=$(energy_mj)
echo "== a PyTorch job: 8 GiB held, bf16 GEMMs until SIGTERM"
python3 - "$OUT/job.json" <<'PY' &
import json, sys, time, torch
started = time.time()
x = torch.empty(8 * 2**30, dtype=torch.uint8, device="cuda")   # the memory it holds throughout
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
json.dump({"context_ms": started * 1000, "ready_ms": time.time() * 1000}, open(sys.argv[1], "w"))
while True:
    for _ in range(50):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
PY
JOB=$!
for _ in $(seq 200); do [ -s "$OUT/job.json" ] && break; sleep 0.1; done
[ -s "$OUT/job.json" ] || fail "the job did not start within 20 s"
sleep 5
held=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | awk -F', ' -v p="$JOB" '$1 == p {print $2}')
echo "  pid $JOB holds ${held:-?} MiB (nvidia-smi)"
curl -sf "$URL/api/processes" | python3 -c "
import json, sys
body = json.load(sys.stdin)
rows = [p for p in body['processes'] if p['pid'] == $JOB]
print('  gpudash sees it:', rows[0]['used_memory'] >> 20 if rows else None, 'MiB; free GPUs', body.get('free_devices'))
sys.exit(0 if rows else 1)" || fail "gpudash does not list pid $JOB"
sleep $((JOB_SECONDS - 5))

echo "== the admin sends SIGTERM through the API"
code=$(curl -s -o "$OUT/signal.json" -w '%{http_code}' -X POST -H 'content-type: application/json' \
  -d '{"signal":"SIGTERM"}' "$URL/api/processes/$JOB/signal")
echo "  POST /api/processes/$JOB/signal → $code $(cat "$OUT/signal.json")"
[ "$code" -lt 300 ] || fail "the signal was refused ($code)"
wait "$JOB"; rc=$?
gone_ms=$(now_ms)
JOB=
energy_after=$(energy_mj)
[ "$rc" -eq 143 ] && echo "  the job ended by SIGTERM (exit status 143)" || fail "the job's exit status is $rc, not 143 (SIGTERM)"
curl -sf "$URL/api/audit?action=process.signal" >"$OUT/audit.json" && python3 -c "
import json, sys
entries = json.load(open('$OUT/audit.json'))
entries = entries.get('entries', entries) if isinstance(entries, dict) else entries
print('  audit:', json.dumps(entries[0]) if entries else 'none')
sys.exit(0 if entries else 1)" || fail "no process.signal audit entry"

echo "== accounting against the job's own wall time and memory"
# The accountant charges what the last process reading showed: wait until the job's absence is read and flushed.
to_ms=$(( $(now_ms) + 60000 ))
for _ in $(seq 60); do
  curl -sf "$URL/api/usage?from=$from_ms&to=$to_ms&group=user" >"$OUT/usage.json" && python3 - "$OUT/usage.json" "$OUT/previous.json" <<'PY' && break
import json, os, sys
now = open(sys.argv[1]).read()
before = open(sys.argv[2]).read() if os.path.exists(sys.argv[2]) else ""
open(sys.argv[2], "w").write(now)
sys.exit(0 if now == before and '"gpu_hours"' in now else 1)
PY
  sleep 2
done
python3 - "$OUT/usage.json" "$OUT/job.json" "$gone_ms" "${held:-0}" "$energy_before" "$energy_after" <<'PY' || status=1
import json, sys
body = json.load(open(sys.argv[1]))
rows = body["rows"] if isinstance(body, dict) else body
job = json.load(open(sys.argv[2]))
gone_ms, held_mib = float(sys.argv[3]), float(sys.argv[4])
energy_kwh = (float(sys.argv[6]) - float(sys.argv[5])) / 1e3 / 3.6e6
wall_h = (gone_ms - job["context_ms"]) / 3.6e6
print(f"  rows: {json.dumps(rows)}")
row = next((r for r in rows if r.get("user") == "root"), rows[0] if len(rows) == 1 else None)
if row is None:
    sys.exit("FAIL: no usage row for the job's user")
expected_gib_h = held_mib / 1024 * wall_h
checks = [("GPU-hours", row["gpu_hours"], wall_h), ("memory GiB-hours", row["memory_gib_hours"], expected_gib_h)]
failed = False
for name, got, want in checks:
    off = (got - want) / want * 100
    verdict = "PASS" if abs(off) <= 2 else "FAIL"
    failed |= verdict == "FAIL"
    print(f"  {name:<17} gpudash {got:.5f}  job {want:.5f}  ({off:+.2f}%)  {verdict}")
print(f"  idle GiB-hours    gpudash {row['idle_gib_hours']:.5f}  (the job computed throughout: expected ~0)")
print(f"  energy kWh        gpudash {row['energy_kwh']:.5f}  NVML counter over the whole window {energy_kwh:.5f}"
      " (gpudash charges only the job's readings)")
sys.exit(1 if failed else 0)
PY
[ $status -eq 0 ] && echo "PASS" || echo "FAILED"
exit $status
