#!/usr/bin/env bash
# Every packaging recipe, proven one after the other: the systemd unit, the Kubernetes
# manifests, the container image and the .deb. Each script installs what it needs (Debian's
# podman, runc, mmdebstrap, systemd, chromium, help2man; cargo-deb from crates.io; the manifest
# validators from PyPI) and prints what it checked. Needs root, Debian 12, and the gpudash binary
# this checkout built (target/debug/gpudash, as `cargo test` leaves it; GPUDASH_BIN to choose
# another). Runs every step even after a failure, prints each step's seconds, and exits
# non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

steps=(systemd kubernetes container deb)
failed=()
timings=()
started_all=$SECONDS
for step in "${steps[@]}"; do
    printf '\n== packaging: %s (tests/packaging/%s.sh)\n' "$step" "$step"
    started=$SECONDS
    if bash "tests/packaging/$step.sh"; then
        result=passed
    else
        result=FAILED
        failed+=("$step")
    fi
    timings+=("$(printf '%-11s %-7s %4ds' "$step" "$result" $((SECONDS - started)))")
done

printf '\n== packaging: seconds per step\n'
printf '  %s\n' "${timings[@]}"
printf '  %-19s %4ds\n' total $((SECONDS - started_all))
passed=$((${#steps[@]} - ${#failed[@]}))
echo "packaging: ${passed} passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
