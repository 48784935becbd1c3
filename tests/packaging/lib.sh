# Shared by tests/packaging/*.sh (sourced, not run): paths, installs, waiting, Podman, the bases.
# Every script runs as root on Debian 12 (as CI does) and installs what it needs.

set -euo pipefail
shopt -s inherit_errexit
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

# What is packaged: the binary this checkout built. CI builds the debug one (`cargo test` does);
# GPUDASH_BIN=target/release/gpudash packages a release build instead.
BIN=$(realpath -m "${GPUDASH_BIN:-target/debug/gpudash}")
# Work files, logs and the .deb.
OUT=$ROOT/target/packaging
# Debian bases made by mmdebstrap, kept between runs of this checkout.
CACHE=$OUT/cache
mkdir -p "$OUT" "$CACHE"

# Podman as it works on these machines: runc, and cgroupfs (no systemd as PID 1).
PODMAN=(podman --runtime runc --cgroup-manager cgroupfs)
# Explicit limits on every `podman run`: this host's hard RLIMIT_NOFILE, and room for threads.
NOFILE=$(ulimit -Hn)
RUN_LIMITS=(--ulimit "nofile=$NOFILE:$NOFILE" --ulimit nproc=4096:4096)

say() { printf '  %s\n' "$*"; }
fail() {
    printf 'FAIL: %s\n' "$*" >&2
    exit 1
}

# need_apt PACKAGE...: installs the Debian packages that are missing (one apt-get update first).
need_apt() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

need_binary() {
    [ -x "$BIN" ] || fail "no gpudash binary at $BIN: build it first (cargo build -p gpudash), or set GPUDASH_BIN"
}

# eventually SECONDS WHAT COMMAND...: runs COMMAND every half second until it succeeds.
eventually() {
    local seconds=$1 what=$2
    shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || fail "$what: not within ${seconds}s"
        sleep 0.5
    done
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A token in gpudash's format (64 hex digits), for GPUDASH_TOKENS.
new_token() { od -An -N32 -tx1 /dev/urandom | tr -d ' \n'; }

# ensure_base NAME PACKAGES [MMDEBSTRAP-OPTION...]: a Debian 12 image localhost/NAME:KEY with
# PACKAGES (comma-separated) on Debian's minimal base, made with mmdebstrap and imported (no
# registry is reachable).
# KEY hashes the recipe and the ISO week, so a base is remade weekly with Debian's updates.
# Reused from Podman's store, else from its tarball in $CACHE. Prints the image's name.
ensure_base() {
    local name=$1 packages=$2
    shift 2
    local args=(--variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
        "--include=$packages" --aptopt='Acquire::Languages "none"'
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' "$@")
    local mirrors=("deb http://deb.debian.org/debian bookworm main"
        "deb http://deb.debian.org/debian bookworm-updates main"
        "deb http://deb.debian.org/debian-security bookworm-security main")
    local key
    key=$(printf '%s\n' "${args[@]}" "${mirrors[@]}" "$(date -u +%G-W%V)" | sha256sum | cut -c1-12)
    local image=localhost/$name:$key tarball=$CACHE/$name-$key.tar part=$CACHE/$name-$key.part.tar
    if ! "${PODMAN[@]}" image exists "$image"; then
        if [ ! -s "$tarball" ]; then
            rm -f "$CACHE/$name"-*.tar
            say "mmdebstrap bookworm +$packages -> $tarball" >&2
            # (mmdebstrap picks the output's format by its extension: .tar)
            mmdebstrap "${args[@]}" bookworm "$part" "${mirrors[@]}" >"$OUT/mmdebstrap-$name.log" 2>&1 ||
                fail "mmdebstrap failed; see $OUT/mmdebstrap-$name.log"
            mv "$part" "$tarball"
        fi
        # Older keys of this base are ours alone: drop them.
        "${PODMAN[@]}" images --format '{{.Repository}}:{{.Tag}}' | grep "^localhost/$name:" | grep -v ":$key\$" |
            xargs -r "${PODMAN[@]}" rmi >/dev/null 2>&1 || true
        "${PODMAN[@]}" import --quiet "$tarball" "$image" >/dev/null
        say "imported $image" >&2
    else
        say "reusing $image" >&2
    fi
    echo "$image"
}
