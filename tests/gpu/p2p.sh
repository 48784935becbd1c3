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
# Exit status: 1 on any FAIL, MISSING row, failed check or topology mismatch; else 2 when a row is
# still INCONCLUSIVE (the comparison could not decide: not a pass), or with one GPU (nothing to test);
# else 0.
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
ROUNDS=${P2P_ROUNDS:-5}
MAX_ROUNDS=${P2P_MAX_ROUNDS:-15}
DEADLINE_S=${P2P_DEADLINE_S:-60}
mkdir -p "$OUT"
status=0        # 1: some step failed
inconclusive=0  # 1: the comparison exited 2 (rows it could not decide)

step() { printf '\n== %s\n' "$*"; }

step "GPUs"
nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.used --format=csv,noheader
count=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
if [ "$count" -lt 2 ]; then
  echo "one GPU: p2p needs two (gpudash answers 409 'P2P needs two GPUs; this server has one')"
  exit 2
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

step "gpudash vs PyTorch ($ROUNDS interleaved rounds, up to $MAX_ROUNDS for undecided rows) and nvidia-smi"
# With pipefail the pipeline's status is the script's (or timeout's 124): 2 means INCONCLUSIVE rows only.
rc=0
timeout $((DEADLINE_S + 20)) python3 tests/gpu/p2p_vs_torch.py "$BIN" "$OUT/topology.json" "$OUT" --rounds "$ROUNDS" \
  --max-rounds "$MAX_ROUNDS" --deadline-s "$DEADLINE_S" | tee "$OUT/compare.txt" || rc=$?
if [ "$rc" -eq 2 ]; then
  inconclusive=1
elif [ "$rc" -ne 0 ]; then
  status=1
fi

source tests/gpu/result.sh
finish "$status" "$inconclusive"
