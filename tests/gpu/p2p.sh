#!/usr/bin/env bash
# The p2p experiment and /api/topology on a machine with two or more GPUs (the device tool's
# nvidia-h200-x2), side by side with PyTorch and nvidia-smi in the same run:
#   1. `nvidia-smi topo -m` and `topo -p2p r|w|a|n`;
#   2. a gpudash server's GET /api/topology;
#   3. tests/gpu/p2p_vs_torch.py: ROUNDS interleaved rounds of `gpudash bench --json p2p` (1 GiB copies)
#      and PyTorch's b.copy_(a) cuda:0→cuda:1 and back, both ways at once on a stream of each GPU, and
#      4-byte copies; every peer-access-on bandwidth row judged by the 95% interval of its paired
#      per-round ratios against 1 ± 5% (compare.py), with extra rounds while a row is undecided (up to
#      P2P_MAX_ROUNDS or the deadline); /api/topology checked against topo -m and topo -p2p.
# Tolerance, interval, rounds and deadline come from tests/gpu/rules.json (schedule "p2p"); P2P_ROUNDS,
# P2P_MAX_ROUNDS and P2P_DEADLINE_S override them, and the summary line then says "overridden".
# Exit status (tests/gpu/result.sh): 1 on any FAIL, MISSING row, failed check or topology mismatch; else 2
# when a row is still INCONCLUSIVE (the comparison could not decide: not a pass); else 0; 3 (SKIPPED) with
# one GPU: nothing to test.
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/p2p.sh    # ~1 minute; artifacts land in $OUT (default /tmp/gpudash-p2p)
set -euo pipefail
cd "$(dirname "$0")/../.."
# No NVLink SHARP / multicast objects: nothing here uses NCCL, and nothing may create multicast objects.
export NCCL_NVLS_ENABLE=0
# PyTorch numbers GPUs like NVML (and gpudash) do.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
BIN=${GPUDASH_BIN:-target/release/gpudash}
PORT=${GPUDASH_PORT:-7072}
OUT=${OUT:-/tmp/gpudash-p2p}
mkdir -p "$OUT"
status=0        # 1: some step failed
inconclusive=0  # 1: the comparison exited 2 with an INCONCLUSIVE summary (rows it could not decide)

step() { printf '\n== %s\n' "$*"; }
source tests/gpu/result.sh

load_rules p2p
ROUNDS=${P2P_ROUNDS:-$RULES_ROUNDS}
MAX_ROUNDS=${P2P_MAX_ROUNDS:-$RULES_MAX_ROUNDS}
DEADLINE_S=${P2P_DEADLINE_S:-$RULES_DEADLINE_S}

step "GPUs"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.used --format=csv,noheader
count=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
if [ "$count" -lt 2 ]; then
  skip "one GPU: p2p needs two; gpudash answers 409 'P2P needs two GPUs; this server has one'"
fi

step "nvidia-smi topo -m"
nvidia-smi topo -m | tee "$OUT/topo-m.txt"
for cap in r w a n; do
  nvidia-smi topo -p2p "$cap" >"$OUT/topo-p2p-$cap.txt" 2>&1 || true
done
cat "$OUT/topo-p2p-r.txt"

step "GET /api/topology of a running gpudash"
"$BIN" --listen "127.0.0.1:$PORT" --interval 1s --no-history --lab-idle-release 10s >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$PORT/api/topology" >"$OUT/topology.json" || { echo "GET /api/topology failed"; status=1; }
kill $SERVER 2>/dev/null || true
wait $SERVER 2>/dev/null || true

step "fault skip-p2p-copy (GPUDASH_BENCH_FAULT): the first pair's first mode's timed copies not made"
# The destinations are poisoned again after the warm-ups, so only what the timed copies wrote can pass.
rc=0
out=$(GPUDASH_BENCH_FAULT=skip-p2p-copy timeout 120 "$BIN" bench --force \
  --params '{"kind":"p2p","size":67108864,"warmup":2,"repetitions":3}' p2p 2>&1) || rc=$?
echo "$out" | grep -E "injecting|\[FAIL\]" | head -4 | sed "s/\[FAIL\]/[FAIL as injected: skip-p2p-copy]/"
if [ "$rc" -ne 0 ] && echo "$out" | grep -E "\[FAIL\] GPU 0 → 1 copies are byte-exact, peer access disabled" >/dev/null; then
  echo "fault skip-p2p-copy: caught by 'GPU 0 → 1 copies are byte-exact, peer access disabled' (exit $rc)"
else
  echo "FAIL: fault skip-p2p-copy was not caught (exit $rc)"
  status=1
fi

step "gpudash vs PyTorch ($ROUNDS interleaved rounds, up to $MAX_ROUNDS for undecided rows) and nvidia-smi"
# With pipefail the pipeline's status is the script's (or timeout's 124); compare_status counts an exit 2 as
# INCONCLUSIVE only when the script's summary line says so.
rc=0
timeout $((DEADLINE_S + RULES_GRACE_S)) python3 tests/gpu/p2p_vs_torch.py "$BIN" "$OUT/topology.json" "$OUT" \
  --rounds "$ROUNDS" --max-rounds "$MAX_ROUNDS" --deadline-s "$DEADLINE_S" | tee "$OUT/compare.txt" || rc=$?
case "$(compare_status "$rc" "$OUT/compare.txt")" in
  inconclusive) inconclusive=1 ;;
  fail) status=1; echo "FAIL: the comparison exited $rc" ;;
esac

finish "$status" "$inconclusive"
