#!/usr/bin/env bash
# The container image (Containerfile), as far as a machine without an image registry can go:
# its runtime stage built with Podman on a Debian base made here by mmdebstrap, from the binary
# this checkout built (the `build` stage, FROM rust:1-bookworm, needs the registry and is not
# run). Then, with --simulate 4: /healthz, /metrics and the page in headless Chromium answer,
# the HEALTHCHECK passes, gpudash runs as uid 10001, a reservation survives a new container on
# the same volume, and without tokens the image refuses to serve on 0.0.0.0.
source "$(dirname "$0")/lib.sh"
need_binary
need_apt podman runc mmdebstrap chromium

tag=gpudash-packaging-$$
image=localhost/gpudash:$tag
volume=$tag-data
port=$(free_port)
token=$(new_token)
url=http://127.0.0.1:$port
# Podman's own complaints (here: no systemd to run healthcheck timers) go to this log.
log=$OUT/container-podman.log
: >"$log"

cleanup() {
    local c
    for c in "$tag" "$tag-refused"; do
        "${PODMAN[@]}" rm --ignore -f -v -t 5 "$c" >/dev/null 2>&1 || true
    done
    "${PODMAN[@]}" volume rm -f "$volume" >/dev/null 2>&1 || true
    # The image with its layers; and the `context` stage's image (the binary alone), which
    # Buildah keeps untagged and `rmi` of the image leaves: its id is in the build's log.
    "${PODMAN[@]}" rmi "$image" >/dev/null 2>&1 || true
    local stage
    stage=$(awk '/COPY target\/container\/gpudash/ {copy = 1; next} copy && /^--> [0-9a-f]+$/ {print $2; exit}' "$OUT/container-build.log" 2>/dev/null || true)
    [ -z "$stage" ] || "${PODMAN[@]}" rmi "$stage" >/dev/null 2>&1 || true
}
trap cleanup EXIT

# The runtime base: what debian:bookworm-slim has, plus the two packages the Containerfile's
# runtime stage installs (here already, so the build needs no network). Like the slim image,
# no documentation or manual pages.
base=$(ensure_base gpudash-packaging-base ca-certificates,busybox \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*')

# The binary goes in without its debug sections (a debug build's are ~200 MB).
mkdir -p target/container
objcopy --strip-debug "$BIN" target/container/gpudash
say "binary: $BIN ($(du -h target/container/gpudash | cut -f1) without debug sections)"

started=$SECONDS
"${PODMAN[@]}" build --format docker --target runtime \
    --build-arg "BASE=$base" --build-arg BINARY_FROM=context -t "$image" -f Containerfile . >"$OUT/container-build.log" 2>&1 ||
    { cat "$OUT/container-build.log"; fail "podman build"; }
size=$("${PODMAN[@]}" image inspect --format '{{.Size}}' "$image")
say "built $image in $((SECONDS - started))s: $((size / 1000000)) MB ($((size / 1048576)) MiB; the base $(($("${PODMAN[@]}" image inspect --format '{{.Size}}' "$base") / 1000000)) MB)"

# What the image says of itself.
"${PODMAN[@]}" image inspect "$image" | python3 -c '
import json, sys
image = json.load(sys.stdin)[0]
c = image["Config"]
checks = {
    "runs as 10001:10001": c.get("User") == "10001:10001",
    "a volume at /var/lib/gpudash": "/var/lib/gpudash" in (c.get("Volumes") or {}),
    "port 7070 exposed": "7070/tcp" in (c.get("ExposedPorts") or {}),
    "a HEALTHCHECK on /healthz": "/healthz" in " ".join((image.get("Healthcheck") or {}).get("Test") or []),
    "entrypoint /usr/bin/gpudash": c.get("Entrypoint") == ["/usr/bin/gpudash"],
}
for what, ok in checks.items():
    print(("  ok   " if ok else "  FAIL ") + "image config: " + what)
sys.exit(0 if all(checks.values()) else 1)
' || fail "image config"

# Safe by default: on 0.0.0.0 without tokens it refuses to start, and says what to do.
refused=0
"${PODMAN[@]}" run --name "$tag-refused" "${RUN_LIMITS[@]}" "$image" --simulate 1 >"$OUT/container-refused.log" 2>&1 || refused=$?
[ "$refused" -ne 0 ] || fail "without tokens on 0.0.0.0 it did not refuse"
grep -qi token "$OUT/container-refused.log" || fail "the refusal does not name tokens: $(cat "$OUT/container-refused.log")"
say "ok   without tokens it refuses (exit $refused): $(grep -i token "$OUT/container-refused.log" | head -1 | cut -c1-120)…"
"${PODMAN[@]}" rm -v "$tag-refused" >/dev/null 2>>"$log"

start() {
    "${PODMAN[@]}" run -d --name "$tag" "${RUN_LIMITS[@]}" -p "127.0.0.1:$port:7070" \
        -v "$volume:/var/lib/gpudash" -e "GPUDASH_TOKENS=admin:admin:$token" "$image" --simulate 4 >/dev/null 2>>"$log"
    eventually 30 "/healthz of the container" curl -fsS "$url/healthz"
}
api() { curl -fsS -H "Authorization: Bearer $token" "$@"; }

start
health=$(curl -fsS "$url/healthz")
echo "$health" | grep -q '"status":"ok"' && echo "$health" | grep -q '"devices":4' || fail "/healthz: $health"
say "ok   /healthz: $health"
temps=$(curl -fsS "$url/metrics" | grep -c '^DCGM_FI_DEV_GPU_TEMP{')
[ "$temps" -eq 4 ] || fail "/metrics has $temps DCGM_FI_DEV_GPU_TEMP series, not 4"
say "ok   /metrics: DCGM_FI_DEV_GPU_TEMP for 4 GPUs"

# Podman runs the check on demand here (its timers need systemd).
"${PODMAN[@]}" healthcheck run "$tag" >/dev/null 2>&1 || fail "the HEALTHCHECK failed"
[ "$("${PODMAN[@]}" inspect --format '{{.State.Health.Status}}' "$tag")" = healthy ] || fail "not healthy"
say "ok   HEALTHCHECK (busybox wget on /healthz): healthy"

pid=$("${PODMAN[@]}" inspect --format '{{.State.Pid}}' "$tag")
uids=$(awk '/^Uid:/ {print $2, $3, $4, $5}' "/proc/$pid/status")
[ "$uids" = "10001 10001 10001 10001" ] || fail "gpudash runs as uids $uids"
say "ok   non-root: uid 10001 (real, effective, saved, fs) in /proc/$pid/status; podman top: $("${PODMAN[@]}" top "$tag" user huser comm | tail -1 | tr -s ' ')"

# The page, in a real browser: the app has rendered once the loading line is gone and the
# cards name the 4 GPUs and the simulated banner.
page_rendered() {
    local profile
    profile=$(mktemp -d)
    timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync --disable-dev-shm-usage \
        --user-data-dir="$profile" --virtual-time-budget=10000 --dump-dom "$url/" >"$OUT/container-page.html" 2>/dev/null
    rm -rf "$profile"
    grep -q 'Simulated GPUs' "$OUT/container-page.html" && grep -q 'GPU 3' "$OUT/container-page.html" &&
        ! grep -q 'Loading gpudash' "$OUT/container-page.html"
}
eventually 90 "the page rendering in Chromium (last DOM in $OUT/container-page.html)" page_rendered
say "ok   the page in headless Chromium: GPU 0-3 cards and the 'Simulated GPUs' banner"

# Something stored: a reservation, through the API.
now=$(($(date +%s) * 1000))
api -H 'Content-Type: application/json' -d "{\"devices\":[2],\"start_ms\":$now,\"end_ms\":$((now + 3600000)),\"note\":\"packaging $tag\"}" \
    "$url/api/reservations" >/dev/null || fail "POST /api/reservations"
"${PODMAN[@]}" stop -t 20 "$tag" >/dev/null 2>>"$log"
code=$("${PODMAN[@]}" inspect --format '{{.State.ExitCode}}' "$tag")
[ "$code" = 0 ] || fail "gpudash exited $code on SIGTERM (podman stop)"
"${PODMAN[@]}" rm "$tag" >/dev/null 2>>"$log"
say "ok   a reservation made; podman stop: exit 0 (SIGTERM drains); the container removed"
start
api "$url/api/reservations" | grep -q "\"note\":\"packaging $tag\"" || fail "the reservation did not survive: $(api "$url/api/reservations")"
say "ok   a new container on the same volume lists the reservation"
