#!/usr/bin/env bash
# "Free" on a real GPU whose process gpudash cannot see. A PyTorch job holds 20 GiB and keeps the
# GPU busy with bf16 GEMMs; one gpudash runs in a PID namespace of its own (`unshare --pid --fork
# --mount-proc`, as in a container without --pid=host), another beside it on the host's PIDs. The
# hidden one must never call the GPU free: "in use (no process visible)" with its figures in
# /api/processes, not in free_devices. The host's one lists the job and says busy.
# Exit 0 pass, 1 fail, 3 skipped (this machine cannot make a PID namespace: said why).
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/unseen.sh    # ~40 s
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
OUT=${OUT:-/tmp/gpudash-unseen}
mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=0
status=0
fail() { echo "FAIL: $*"; status=1; }
JOB= INSIDE= OUTSIDE=
trap 'kill $JOB $INSIDE $OUTSIDE 2>/dev/null || true' EXIT

python3 -c '
import torch, time
held = torch.empty(20 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 60
while time.time() < end:
    for _ in range(10):
        a @ a
    torch.cuda.synchronize()
' &
JOB=$!
for _ in $(seq 120); do
  nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -qw "$JOB" && break
  sleep 0.25
done
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader | sed 's/^/nvidia-smi: /'

unshare --pid --fork --mount-proc "$BIN" --listen 127.0.0.1:7081 --interval 500ms --no-history >"$OUT/inside.log" 2>&1 &
INSIDE=$!
"$BIN" --listen 127.0.0.1:7082 --interval 500ms --no-history >"$OUT/outside.log" 2>&1 &
OUTSIDE=$!
up() { for _ in $(seq 100); do curl -sf "http://127.0.0.1:$1/healthz" >/dev/null && return 0; sleep 0.1; done; return 1; }
if ! up 7081; then
  echo "SKIPPED: gpudash in a PID namespace of its own did not start here: $(head -c 400 "$OUT/inside.log")"
  exit 3
fi
up 7082 || { echo "FAIL: gpudash on the host's PIDs did not start"; exit 1; }

# Reads /api/processes of port $1 until GPU 0's state is not "free" or 20 s pass; prints a summary.
judge() {
  for _ in $(seq 80); do
    summary=$(curl -sf "http://127.0.0.1:$1/api/processes" | python3 -c '
import json, sys
b = json.load(sys.stdin)
s = next((s for s in b["states"] if s["index"] == 0), {})
print(json.dumps({"processes": [p["pid"] for p in b["processes"] if p["device"] == 0], "state": s.get("state"),
                  "reason": s.get("reason"), "free_devices": b["free_devices"]}))')
    case "$summary" in *'"state": "free"'*|'') sleep 0.25 ;; *) break ;; esac
  done
  echo "$summary"
}
sleep 3   # both have sampled the job a few times (the slow loop lists processes every 2 s)
inside=$(judge 7081)
outside=$(judge 7082)
echo "in its own PID namespace: $inside"
echo "on the host's PIDs:       $outside"
python3 - "$inside" "$outside" "$JOB" <<'PY' || status=1
import json, sys
inside, outside, job = json.loads(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
bad = []
if 0 in inside["free_devices"] or inside["state"] == "free":
    bad.append("the hidden gpudash calls GPU 0 free")
if not inside["processes"] and inside["state"] != "in_use_unseen":
    bad.append(f"no process visible, yet the state is {inside['state']!r}, not 'in_use_unseen'")
if job not in outside["processes"] or outside["state"] != "busy":
    bad.append(f"the host's gpudash does not list job {job} as busy")
print("unseen:", "; ".join(bad) if bad else "the hidden gpudash says in use, the host's one names the job")
sys.exit(1 if bad else 0)
PY
[ $status -eq 0 ] && echo "unseen: PASS" || echo "unseen: FAIL"
exit $status
