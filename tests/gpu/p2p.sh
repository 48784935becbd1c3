#!/usr/bin/env bash
# The p2p experiment and /api/topology on a machine with two or more GPUs (the device tool's
# nvidia-h200-x2), side by side with PyTorch and nvidia-smi in the same run:
#   1. `nvidia-smi topo -m` and `topo -p2p r|w|a|n`;
#   2. `gpudash bench --json p2p` with 1 GiB copies (cudarc, no server);
#   3. a gpudash server's GET /api/topology;
#   4. tests/gpu/p2p_vs_torch.py: PyTorch 1 GiB b.copy_(a) cuda:0→cuda:1 and back, both ways at once on
#      a stream of each GPU, and 4-byte copies; a table beside gpudash's figures (±5% on bandwidth with
#      peer access, which is what PyTorch uses) and /api/topology checked against topo -m.
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
status=0

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

step "gpudash bench --json p2p (1 GiB, 3 warm-ups, 10 repetitions)"
P2P='{"kind":"p2p","size":1073741824,"warmup":3,"repetitions":10}'
if ! timeout 150 "$BIN" bench --device 0 --json --params "$P2P" p2p >"$OUT/p2p.json" 2>"$OUT/p2p.stderr"; then
  echo "bench exited non-zero (the run failed or a check failed); stderr:"; cat "$OUT/p2p.stderr"; status=1
fi

step "GET /api/topology of a running gpudash"
"$BIN" --listen "127.0.0.1:$PORT" --interval 1s --no-history --lab-idle-release 10s >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$PORT/api/topology" >"$OUT/topology.json" || { echo "GET /api/topology failed"; status=1; }
kill $SERVER 2>/dev/null || true
wait $SERVER 2>/dev/null || true

step "side by side: gpudash vs PyTorch and nvidia-smi"
timeout 120 python3 tests/gpu/p2p_vs_torch.py "$OUT/p2p.json" "$OUT/topology.json" "$OUT" | tee "$OUT/compare.txt" || status=1

step "result: $([ $status -eq 0 ] && echo PASS || echo FAIL)  (artifacts in $OUT)"
exit $status
