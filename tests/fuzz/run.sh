#!/usr/bin/env bash
# Fuzzes the decoding of everything a client can send (WebSocket messages,
# run requests, logins, metric names) for MINUTES minutes (default 10).
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`); the stable toolchain is
# let through its nightly-only flags with RUSTC_BOOTSTRAP, as no nightly can be fetched here.
set -euo pipefail
cd "$(dirname "$0")"
MINUTES=${1:-10}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir . client_messages corpus/client_messages -- \
  -max_total_time=$((MINUTES * 60)) -print_final_stats=1
