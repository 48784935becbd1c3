#!/usr/bin/env bash
# Each correctness check of the Lab's CUDA path catching the fault it is there to catch, on the GPU
# (docs/LAB.md has the table). GPUDASH_BENCH_FAULT, read by `gpudash bench` alone (never by the server),
# spoils what one check sees; the run must exit non-zero with that check's [FAIL] line. A fifth argument
# names a check the fault must leave passing: the fault is placed where that check does not look.
# p2p's fault (skip-p2p-copy) needs two GPUs and runs in tests/gpu/p2p.sh.
# Exit status (tests/gpu/result.sh): 0 when every fault was caught as its line says, else 1.
#
#   cargo build --release    # here, then on the GPU machine, with target/release/gpudash carried:
#   bash tests/gpu/faults.sh # ~1 to 2 minutes (13 short bench runs); all.sh runs it as the part "faults"
set -euo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0
BIN=${GPUDASH_BIN:-target/release/gpudash}
status=0

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# Each fault spoils what one check is there to catch, on this GPU: the check must fail (exit non-zero)
# and its line must say so; a fault nobody catches fails the suite.
# A fifth argument names a check the fault must leave passing (the fault is beyond what that check sees).
fault() {
  local name=$1 kind=$2 params=$3 check=$4 spared=${5:-} out rc=0
  out=$(GPUDASH_BENCH_FAULT=$name timeout 120 "$BIN" bench --device 0 --force --params "$params" "$kind" 2>&1) || rc=$?
  # The check's own line, marked as the fault's (all.sh's summary lists unmarked [FAIL] lines as failures).
  echo "$out" | grep -E "injecting|\[FAIL\]" | head -5 | sed "s/\[FAIL\]/[FAIL as injected: $name]/"
  if [ -n "$spared" ] && ! echo "$out" | grep -E "\[PASS\] .*$spared" >/dev/null; then
    echo "FAIL: fault $name should leave '$spared' passing (it is placed where that check does not look)"
    status=1
  fi
  if [ "$rc" -ne 0 ] && echo "$out" | grep -E "\[FAIL\] .*$check" >/dev/null; then
    echo "fault $name: caught by '$check' (exit $rc)"
  else
    echo "FAIL: fault $name was not caught by '$check' (exit $rc)"
    status=1
  fi
}
fault skip-copy transfer '{"kind":"transfer","copies":["h2d_pinned"],"sizes":[16777216],"warmup":2,"repetitions":5}' \
  "h2d_pinned copies are byte-exact"
fault corrupt-tile precision '{"kind":"precision","sizes":[4096],"dtypes":["fp32"],"warmup":1,"repetitions":3}' \
  "every timed GEMM matches the host on a random tile"
fault skip-gemm precision '{"kind":"precision","sizes":[4096],"dtypes":["bf16"],"warmup":1,"repetitions":3}' \
  "bf16 4096 matches the host"
fault corrupt-random precision '{"kind":"precision","sizes":[4096],"dtypes":["fp16"],"warmup":1,"repetitions":3}' \
  "every row and column sum matches the host" "fp16 4096 matches the host"
STREAMS_PARAMS='{"kind":"streams","copy_bytes":67108864,"gemm_size":2048,"kernels":4,"kernel_us":200,"warmup":1,"repetitions":2}'
fault skip-stream-copy streams "$STREAMS_PARAMS" "the copied bytes arrive intact"
fault skip-gemm streams "$STREAMS_PARAMS" "every timed GEMM wrote all of its output"
fault skip-spin streams "$STREAMS_PARAMS" "every spin kernel ran to its end"
fault skip-trim memory '{"kind":"memory","blocks":4,"block_bytes":67108864,"free_every":2,"repetitions":2}' \
  "empty_cache returns the cached memory" "the pool caches freed blocks"
fault skip-launch latency '{"kind":"latency","repetitions":2000}' "every kernel launched ran"
fault skip-copy to_device '{"kind":"to_device","bytes":16777216,"warmup":2,"repetitions":5}' \
  "h2d_pageable copies are byte-exact" "h2d_pinned copies are byte-exact"
fault kernel-no-tail transfer '{"kind":"transfer","copies":["d2d_kernel"],"sizes":[16777216],"warmup":1,"repetitions":3}' \
  "d2d_kernel copies byte-exact"

# collectives: a one-rank communicator on GPU 0 (NCCL from the loader's search or PyTorch's wheel).
fault skip-collective collectives \
  '{"kind":"collectives","gpus":[0],"collectives":["all_reduce"],"sizes":[16777216],"warmup":1,"repetitions":3,"ddp":null}' \
  "all_reduce 16.0 MiB on GPU 0"

if [ "$status" -eq 0 ]; then echo "== result: PASS (every fault caught by its check)"; else echo "== result: FAIL"; fi
exit "$status"
