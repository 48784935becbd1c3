#!/usr/bin/env bash
# Alerts on a real GPU, delivered to a webhook receiver on this machine:
#   1. a PyTorch job allocates 2 GiB and sleeps: an idle_held alert names its pid (--idle-after 10s);
#   2. the job exits: a gpu_free alert fires (held 2 s) and the idle_held alert resolves.
# Prints the time from the triggering sample (the alert's fired_ms) to the webhook's receipt, and
# from the job's exit to the gpu_free delivery.
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/alerts.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${GPUDASH_BIN:-target/release/gpudash}
PORT=${GPUDASH_PORT:-7072}
HOOK_PORT=${HOOK_PORT:-7073}
OUT=${OUT:-/tmp/gpudash-alerts}
URL="http://127.0.0.1:$PORT"
mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=0
DATA=$(mktemp -d)

cat >"$OUT/alerts.toml" <<'EOF'
[rules.gpu_free]
for = "2s"
[rules.idle_held]
for = "0s"
EOF

# The receiver: every POST body, with the time it arrived, one JSON line each.
python3 - "$HOOK_PORT" "$OUT/received.jsonl" >"$OUT/receiver.log" 2>&1 <<'PY' &
import http.server, json, sys, time
port, path = int(sys.argv[1]), sys.argv[2]
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(path, "a") as f:
            f.write(json.dumps({"received_ms": time.time() * 1000, "body": json.loads(body)}) + "\n")
        self.send_response(200); self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Hook).serve_forever()
PY
RECEIVER=$!
"$BIN" --listen "127.0.0.1:$PORT" --interval 500ms --data-dir "$DATA" --idle-after 10s --idle-memory 1GiB \
  --alerts-file "$OUT/alerts.toml" --alert-webhook "http://127.0.0.1:$HOOK_PORT/hook" >"$OUT/gpudash.log" 2>&1 &
SERVER=$!
JOB=
trap 'kill $SERVER $RECEIVER $JOB 2>/dev/null || true; rm -rf "$DATA"' EXIT
for _ in $(seq 100); do curl -sf "$URL/healthz" >/dev/null && break; sleep 0.1; done
head -5 "$OUT/gpudash.log"
status=0
fail() { echo "FAIL: $*"; status=1; }

# Waits (up to $2 s) for a delivery matching the Python expression $1 over `a` (the alert) and `s` (the state).
delivery() {
  local test=$1 limit=$2
  for _ in $(seq $((limit * 2))); do
    found=$(python3 - "$OUT/received.jsonl" "$test" <<'PY'
import json, sys
try:
    lines = open(sys.argv[1]).read().splitlines()
except FileNotFoundError:
    lines = []
for line in lines:
    r = json.loads(line); a = r["body"]["alert"]; s = r["body"]["state"]
    if eval(sys.argv[2]):
        print(json.dumps(r)); break
PY
)
    [ -n "$found" ] && { echo "$found"; return 0; }
    sleep 0.5
  done
  return 1
}

echo "== a job that allocates 2 GiB and sleeps"
python3 -c '
import torch, time
x = torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
time.sleep(35)
' &
JOB=$!
idle=$(delivery "a['rule'] == 'idle_held' and a.get('pid') == $JOB and s == 'firing'" 60) \
  || fail "no idle_held alert for pid $JOB was delivered within 60 s"
[ -n "${idle:-}" ] && echo "  delivered: $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(r['body']['alert']['message'])" "$idle")"

echo "== the job exits"
kill "$JOB" 2>/dev/null; wait "$JOB" 2>/dev/null
exited_ms=$(python3 -c 'import time; print(time.time() * 1000)')
JOB=
free=$(delivery "a['rule'] == 'gpu_free' and s == 'firing' and a['fired_ms'] >= $exited_ms - 1000" 30) \
  || fail "no gpu_free alert was delivered within 30 s of the job's exit"
[ -n "${free:-}" ] && echo "  delivered: $(python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(r['body']['alert']['message'])" "$free")"
delivery "a['rule'] == 'idle_held' and s == 'resolved'" 20 >/dev/null || fail "the idle_held alert did not resolve"

echo "== stored and served"
curl -sf "$URL/api/alerts?state=all" >"$OUT/alerts.json" || fail "GET /api/alerts failed"
python3 - "$OUT/alerts.json" <<'PY' || status=1
import json, sys
body = json.load(open(sys.argv[1]))
rules = sorted({a["rule"] for a in body["alerts"]})
print(f"  /api/alerts: {len(body['alerts'])} alerts ({', '.join(rules)}), {body['firing']} firing; webhooks {body['webhooks']}")
if any(a.get("simulated") for a in body["alerts"]):
    sys.exit("FAIL: a real GPU's alert is labelled simulated")
PY

echo "== delivery times (receipt − the alert's fired_ms; job exit → gpu_free receipt)"
python3 - "$OUT/received.jsonl" "$exited_ms" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    a, s = r["body"]["alert"], r["body"]["state"]
    stamp = a["fired_ms"] if s == "firing" else a["resolved_ms"]
    print(f"  {a['rule']:<11} {s:<8} sample→receipt {r['received_ms'] - stamp:7.1f} ms")
free = [r for r in rows if r["body"]["alert"]["rule"] == "gpu_free" and r["body"]["state"] == "firing"]
if free:
    print(f"  job exit → gpu_free receipt {free[0]['received_ms'] - float(sys.argv[2]):.0f} ms (includes the 2 s hold)")
PY
[ $status -eq 0 ] && echo "PASS" || echo "FAILED"
exit $status
