#!/usr/bin/env bash
# Fuzzes the decoding of everything a client can send (WebSocket messages, run
# requests, logins, metric names) and of the lab's events every page decodes
# (`LabEvent`, alone and as a `{"type":"lab",…}` message), for MINUTES minutes
# in all (default 10), split between the two targets.
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`); the stable toolchain is
# let through its nightly-only flags with RUSTC_BOOTSTRAP, as no nightly can be fetched here.
set -euo pipefail
cd "$(dirname "$0")"
MINUTES=${1:-10}
SECONDS_EACH=$((MINUTES * 60 / 2))
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for target in client_messages lab_events; do
  RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir . "$target" "corpus/$target" -- \
    -max_total_time="$SECONDS_EACH" -print_final_stats=1
done
