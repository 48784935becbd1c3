#!/usr/bin/env bash
# The packaged build's layout step: measures which functions an idle dashboard runs and writes
# target/symbol-order.txt, the order the linker lays them out in when a build is given it
# (`GPUDASH_SYMBOL_ORDER=target/symbol-order.txt`, read by server/build/layout.rs). The list names
# functions by mangled names, which change with the toolchain, the lockfile and the profile: it is
# made on the machine that packages, from the same sources, just before the build that uses it,
# and never committed (packaging/README.md, "The binary's layout").
#
# How: the dist build (which keeps function names) is copied out of the page cache and started
# with the block device's read-ahead at 0, so that each code page it runs is read alone; after a
# quarter minute of idling with one simulated GPU, the resident code pages are the ones it ran
# (packaging/symbol_order.py). Read-ahead is restored on exit.
#
# Usage, from the repository root:
#   cargo +1.95.0 build --profile dist -p gpudash && sudo packaging/symbol-order.sh   # measures, writes the list
#   GPUDASH_SYMBOL_ORDER=target/symbol-order.txt cargo +1.95.0 build --profile dist -p gpudash
# (1.95.0: the channel of packaging/rust-toolchain.toml, which this script reads)
#   packaging/symbol-order.sh --check        # the list against the build: exit 1 when stale
# (root's PATH rarely has cargo: without it the script measures the dist binary already built). The
# copy it runs lives under target/, on the disk whose read-ahead it sets (a tmpfs /tmp has none).
#
# `--check` (any user) says how many of the listed functions the dist binary has and whether they
# lead its code; under 90% it exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
# The pinned toolchain (packaging/rust-toolchain.toml): the order is only good for the compiler that
# built the binary it was measured on.
toolchain=$(sed -n 's/^channel = "\(.*\)"$/\1/p' packaging/rust-toolchain.toml)
if [ "${1:-}" = --check ]; then
  [ -f target/symbol-order.txt ] || { echo "symbol-order.sh: no target/symbol-order.txt: run it as root first"; exit 1; }
  exec python3 packaging/symbol_order.py --check target/dist/gpudash target/symbol-order.txt
fi
[ "$(id -u)" -eq 0 ] || { echo "symbol-order.sh: run as root (it sets the disk's read-ahead to 0 for a minute)"; exit 1; }
if command -v cargo >/dev/null; then
  cargo "+$toolchain" build --profile dist -p gpudash || {
    echo "symbol-order.sh: the packaged build failed; it needs Rust $toolchain (packaging/rust-toolchain.toml) with the wasm32 target: rustup toolchain install $toolchain --target wasm32-unknown-unknown"
    exit 1
  }
else
  echo "cargo is not on PATH: measuring the dist binary already built, $(stat -c %y target/dist/gpudash)"
fi
work=$(mktemp -d -p target symbol-order.XXXXXX)
cp target/dist/gpudash "$work/gpudash"
device=$(lsblk -no PKNAME "$(df --output=source "$work" | tail -1)" 2>/dev/null || true)
[ -n "$device" ] || device=$(basename "$(df --output=source "$work" | tail -1)")
ra=/sys/block/$device/queue/read_ahead_kb
[ -w "$ra" ] || { echo "symbol-order.sh: cannot set $ra"; exit 1; }
saved=$(cat "$ra")
pid=
cleanup() { echo "$saved" >"$ra"; [ -z "$pid" ] || kill "$pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
echo 0 >"$ra"
python3 -c "import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)" "$work/gpudash"
port=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
"$work/gpudash" --simulate 1 --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 300); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$port/healthz" >/dev/null || { cat "$work/log"; echo "symbol-order.sh: the dashboard did not answer"; exit 1; }
sleep 15  # idle on purpose: what an unwatched server runs, not a wait for a condition
python3 packaging/symbol_order.py "$pid" "$work/gpudash" target/symbol-order.txt
echo "wrote target/symbol-order.txt ($(wc -l <target/symbol-order.txt) functions); build with it:"
echo "  GPUDASH_SYMBOL_ORDER=target/symbol-order.txt cargo +$toolchain build --profile dist -p gpudash"
