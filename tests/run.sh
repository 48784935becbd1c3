#!/usr/bin/env bash
# gpudash's whole test suite, from a fresh Debian machine with only Rust:
# installs what the tests need (the wasm32 target, Chromium and ChromeDriver,
# Prometheus for promtool, curl, nginx for the reverse-proxy test, npm for axe-core and oidc-provider, and a real
# Podman and Slurm for the workload-identity tests),
# then runs formatting, lints, unit, integration and browser tests.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "toolchain: wasm32 target, rustfmt, clippy"
rustup target add wasm32-unknown-unknown
rustup component add rustfmt clippy >/dev/null 2>&1 || true

need=()
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
command -v promtool >/dev/null || need+=(prometheus)
[ -x /usr/bin/victoria-metrics ] || need+=(victoria-metrics)
command -v curl >/dev/null || need+=(curl)
[ -x /usr/sbin/nginx ] || need+=(nginx)
command -v python3 >/dev/null || need+=(python3)
command -v npm >/dev/null || need+=(npm)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# Workload identity (tests/integration/identity.rs, fixtures in tests/identity/): containers through
# Podman's Docker-compatible API, jobs of a one-node Slurm.
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || [ -x /usr/sbin/runc ] || need+=(runc)
[ -x /usr/sbin/slurmd ] || need+=(slurm-wlm)
[ -x /usr/sbin/munged ] || need+=(munge)
[ -x /bin/busybox ] || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
  step "Debian packages: ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

step "format"
cargo fmt --all -- --check

# Under clippy, web/build/assets.rs embeds an empty app instead of building the wasm; the test build
# below builds it (once) for real.
step "clippy (every crate but the page; then the browser app on wasm32, and natively with its tests)"
cargo clippy --workspace --exclude gpudash-frontend --all-targets -- -D warnings
cargo clippy -p gpudash-frontend --target wasm32-unknown-unknown -- -D warnings
cargo clippy -p gpudash-frontend --all-targets -- -D warnings

step "without CUDA (the lab crate's cuda feature off: a monitoring-only build, the Lab on simulated GPUs)"
cargo clippy -p gpudash-lab --no-default-features --all-targets -- -D warnings
cargo clippy -p gpudash --no-default-features -- -D warnings
! cargo tree -p gpudash --no-default-features -e normal | grep cudarc || { echo "cudarc is in the build without CUDA"; exit 1; }
cargo test -p gpudash-lab --no-default-features --lib every_way_in_says_cuda_is_not_built_in

step "axe-core and oidc-provider (npm, pinned in tests/axe and tests/oidc package-lock.json) for the accessibility and sign-in tests"
(cd tests/axe && npm ci --no-audit --no-fund --loglevel=error)
(cd tests/oidc && npm ci --no-audit --no-fund --loglevel=error)

step "Python virtualenv (target/py): pytest, and aiosmtpd, the real SMTP server the job notices' test mails (tests/mail/receiver.py)"
python3 -m venv target/py
target/py/bin/pip install --quiet --upgrade pip pytest aiosmtpd

step "tests (unit, integration, browser)"
cargo test --workspace --exclude gpudash-frontend
cargo test -p gpudash-frontend

step "packaging: the systemd unit, the Kubernetes manifests, the container image and the .deb, from the binary the tests built (tests/packaging/)"
bash tests/packaging/run.sh

step "frontend budgets: the app's gzip size (target 450 KiB, printed; ceiling 500 KiB, asserted), first render and chart redraw times (printed)"
cargo test -p gpudash-tests --test integration budgets -- --nocapture --test-threads 1

step "Python client (python/): installs with pip, tests against gpudash --simulate with a stand-in torch"
target/py/bin/pip install --quiet ./python
GPUDASH_BIN="$PWD/target/debug/gpudash" target/py/bin/python -m pytest -q python/tests

step "GPU comparisons' verdict rule (tests/gpu/compare.py: paired intervals, INCONCLUSIVE exits 2) and page_open.py's handshake, without a GPU"
GPUDASH_BIN="$PWD/target/debug/gpudash" target/py/bin/python -m pytest -q -p no:cacheprovider tests/gpu/test_compare.py tests/gpu/test_page_open.py

step "the docs quote only figures their logs hold, by label, unit, sign and count (tests/docs_figures.py)"
python3 tests/docs_figures.py
target/py/bin/python -m pytest -q -p no:cacheprovider tests/test_docs_figures.py
