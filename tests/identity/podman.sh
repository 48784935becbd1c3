#!/usr/bin/env bash
# Real Podman (Docker-compatible API) fixture for gpudash's workload-identity tests.
#
#   podman.sh service DIR             start `podman system service` on unix://DIR/podman.sock,
#                                     wait until GET /_ping answers, print the socket path
#   podman.sh image                   import localhost/gpudash-busybox:latest (once) from a
#                                     busybox-static rootfs
#   podman.sh run NAME [ARGS...]      (re)create detached container NAME running `sleep`,
#                                     print the HOST pid of that sleep; ARGS go to `podman run`
#                                     (e.g. --label gpudash.user=ana --label com.docker.compose.project=p)
#   podman.sh stop [DIR]              remove the containers, stop the service
#
# Storage is private to DIR (--root DIR/storage/root, --runroot, --tmpdir and file locks under
# DIR/storage), so concurrent users and the host's own podman storage never clash.  Set
# GPUDASH_PODMAN_SHARED_STORAGE=1 to use the default /var/lib/containers storage instead.
#
# The commands after `service` find DIR in $GPUDASH_PODMAN_DIR, else in the file
# ${TMPDIR:-/tmp}/gpudash-podman.dir that `service` writes.  Must run as root (cgroup v1,
# runc, cgroupfs).  Environment knobs: GPUDASH_PODMAN_TIMEOUT (seconds, default 30),
# GPUDASH_SLEEP (the container's sleep, default 3600 s), GPUDASH_IDENTITY_CACHE (where the
# rootfs tarball is cached, default ${XDG_CACHE_HOME:-$HOME/.cache}/gpudash-identity).
set -euo pipefail

IMAGE=localhost/gpudash-busybox:latest
TIMEOUT=${GPUDASH_PODMAN_TIMEOUT:-30}
POINTER=${TMPDIR:-/tmp}/gpudash-podman.dir
CACHE=${GPUDASH_IDENTITY_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/gpudash-identity}

ME=podman.sh
# shellcheck source=tests/identity/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"


resolve_dir() {   # sets DIR from $1, $GPUDASH_PODMAN_DIR or the pointer file
    DIR=${1:-${GPUDASH_PODMAN_DIR:-}}
    if [[ -z $DIR && -f $POINTER ]]; then
        DIR=$(<"$POINTER")
        [[ -d $DIR ]] || { rm -f "$POINTER"; DIR=; }   # stale: its directory was deleted
    fi
    [[ -n $DIR ]] || return 1
    DIR=$(cd "$DIR" 2>/dev/null && pwd) || die "directory '$DIR' does not exist"
}

# Sets the podman command line (array P) for DIR (or for the default storage without DIR).
setup_podman() {
    P=(podman --runtime runc --cgroup-manager cgroupfs)
    if [[ -n ${DIR:-} && ${GPUDASH_PODMAN_SHARED_STORAGE:-0} != 1 ]]; then
        local s=$DIR/storage
        mkdir -p "$s"
        if [[ ! -f $s/containers.conf ]]; then
            # file locks under --tmpdir: the default SHM lock table (/dev/shm/libpod_lock) is
            # shared by every storage on the host, and a fresh tmpdir would free all its locks.
            printf '[engine]\nlock_type = "file"\nevents_logger = "file"\n' > "$s/containers.conf"
        fi
        export CONTAINERS_CONF=$s/containers.conf
        P+=(--root "$s/root" --runroot "$s/run" --tmpdir "$s/tmp")
    fi
}

service_pid() {   # prints the pid of DIR's live podman service, 1 if none
    local pid
    [[ -f $DIR/podman-service.pid ]] || return 1
    pid=$(<"$DIR/podman-service.pid")
    [[ -r /proc/$pid/cmdline ]] || return 1
    tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF "system service" || return 1
    tr '\0' ' ' < "/proc/$pid/cmdline" | grep -qF "unix://$DIR/podman.sock" || return 1
    echo "$pid"
}


storage_users() {   # pids whose command line names DIR/storage/ (conmon, podman cleanup)
    local f
    # shellcheck disable=SC2013  # /proc/<pid>/cmdline names have no blanks
    for f in $(grep -laF -- "$DIR/storage/" /proc/[0-9]*/cmdline 2>/dev/null); do
        f=${f#/proc/}; echo "${f%/cmdline}"
    done
}
no_storage_users() { [[ -z $(storage_users) ]]; }

api_ping() { [[ $(curl -s --max-time 2 --unix-socket "$DIR/podman.sock" http://d/_ping 2>/dev/null) == OK ]]; }

cmd_service() {
    [[ $# -eq 1 ]] || die "usage: podman.sh service DIR"
    [[ $(id -u) -eq 0 ]] || die "must run as root"
    command -v podman >/dev/null || die "podman is not installed"
    command -v curl >/dev/null || die "curl is not installed"
    mkdir -p "$1"
    resolve_dir "$1"
    local sock=$DIR/podman.sock
    (( ${#sock} < 100 )) || die "socket path too long for a unix socket (${#sock} chars): $sock"
    setup_podman
    if service_pid >/dev/null && api_ping; then
        echo "$DIR" > "$POINTER"
        echo "$sock"
        return
    fi
    local pid
    if pid=$(service_pid); then   # alive but not answering: replace it
        note "podman service $pid of $DIR does not answer; restarting it"
        kill -9 "$pid" 2>/dev/null || true
        wait_until 5 gone "$pid" || true
    fi
    rm -f "$sock"
    # setsid: its own session, so that the caller's Ctrl-C or process group kill does not stop
    # it (a background job of a script is no group leader, so setsid execs podman: $! is podman)
    setsid "${P[@]}" system service --time=0 "unix://$sock" \
        > "$DIR/podman-service.log" 2>&1 < /dev/null &
    pid=$!
    echo "$pid" > "$DIR/podman-service.pid"
    # shellcheck disable=SC2317
    up_or_dead() { api_ping || gone "$pid"; }
    wait_until "$TIMEOUT" up_or_dead || true
    if ! api_ping; then
        local why="did not answer GET /_ping within ${TIMEOUT}s"
        gone "$pid" && why="exited"
        note "podman system service $why; last lines of $DIR/podman-service.log:"
        tail -n 20 "$DIR/podman-service.log" >&2 || true
        kill -9 "$pid" 2>/dev/null || true
        exit 1
    fi
    service_pid >/dev/null || die "pid $pid in $DIR/podman-service.pid is not the podman service"
    echo "$DIR" > "$POINTER"
    echo "$sock"
}

build_rootfs_tar() {   # prints the path of the (cached) busybox-static rootfs tarball
    local tar=$CACHE/busybox-rootfs.tar
    if [[ -s $tar ]]; then echo "$tar"; return; fi
    local bb=/bin/busybox
    if [[ ! -x $bb ]] || ldd "$bb" >/dev/null 2>&1; then   # missing or dynamically linked
        note "installing busybox-static with apt-get"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Dpkg::Use-Pty=0 busybox-static >&2 \
            || die "apt-get install busybox-static failed (apt-get update first?)"
        ldd "$bb" >/dev/null 2>&1 && die "$bb is dynamically linked (package busybox, not busybox-static?)"
    fi
    mkdir -p "$CACHE"
    local work; work=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    mkdir -p "$work/r/bin" "$work/r/tmp" "$work/r/etc" "$work/r/proc" "$work/r/sys" "$work/r/dev"
    chmod 1777 "$work/r/tmp"
    cp "$bb" "$work/r/bin/busybox"
    local a
    for a in $("$bb" --list); do [[ $a == busybox ]] || ln -s busybox "$work/r/bin/$a"; done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$work/r/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' > "$work/r/etc/group"
    # deterministic tarball: the same bytes (so the same layer digest) every time
    tar -C "$work/r" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$work/t.tar" .
    mv "$work/t.tar" "$tar"   # atomic for concurrent builders
    rm -rf "$work"
    echo "$tar"
}

ensure_image() {
    if "${P[@]}" image exists "$IMAGE" 2>/dev/null; then return; fi
    local tar; tar=$(build_rootfs_tar)
    "${P[@]}" import --quiet --change 'CMD ["/bin/sh"]' "$tar" "$IMAGE" >/dev/null \
        || die "podman import of $tar failed"
    "${P[@]}" image exists "$IMAGE" || die "image $IMAGE missing right after import"
}

cmd_image() {
    [[ $# -eq 0 ]] || die "usage: podman.sh image"
    [[ $(id -u) -eq 0 ]] || die "must run as root"
    resolve_dir || { DIR=; note "no service directory known: using podman's default storage"; }
    setup_podman
    ensure_image
    echo "$IMAGE"
}

json_pid() {   # State.Pid from a /containers/X/json body on stdin
    # compact JSON, State (Status, Running, ..., Pid) comes right after Id/Created/Path/Args
    local body; body=$(cat)
    body=${body#*\"State\":\{}
    [[ $body =~ \"Pid\":([0-9]+) ]] && echo "${BASH_REMATCH[1]}"
}

cmd_run() {
    [[ $# -ge 1 && $1 != -* ]] || die "usage: podman.sh run NAME [--label k=v ...]"
    local name=$1; shift
    resolve_dir || die "no service directory: run 'podman.sh service DIR' first (or set GPUDASH_PODMAN_DIR)"
    setup_podman
    if ! service_pid >/dev/null || ! api_ping; then
        die "the podman service of $DIR is not running: run 'podman.sh service $DIR'"
    fi
    ensure_image
    local err
    # not `run --replace`: that stops the old one with a 10 s grace (sleep as pid 1 ignores TERM)
    "${P[@]}" rm --force --ignore --time 0 "$name" >/dev/null 2>&1 || true
    if ! err=$("${P[@]}" run -d --name "$name" --network none \
            --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 "$@" \
            "$IMAGE" sleep "${GPUDASH_SLEEP:-3600}" 2>&1 >/dev/null); then
        die "podman run $name failed: $err"
    fi
    grep -qxF "$name" "$DIR/containers.list" 2>/dev/null || echo "$name" >> "$DIR/containers.list"
    local pid
    pid=$("${P[@]}" inspect --format '{{.State.Pid}}' "$name") || die "podman inspect $name failed"
    [[ $pid =~ ^[1-9][0-9]*$ ]] || die "container $name has no pid ('$pid')"
    [[ $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) == sleep* ]] \
        || die "host pid $pid of $name is not the sleep: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>&1)"
    local body api
    body=$(curl -sf --max-time 5 --unix-socket "$DIR/podman.sock" "http://d/containers/$name/json") \
        || die "GET /containers/$name/json over $DIR/podman.sock failed"
    api=$(json_pid <<< "$body") || die "no State.Pid in the API answer: ${body:0:300}"
    [[ $api == "$pid" ]] || die "podman inspect says pid $pid, the Docker API says $api"
    echo "$pid"
}

cmd_stop() {
    [[ $# -le 1 ]] || die "usage: podman.sh stop [DIR]"
    if ! resolve_dir "${1:-}"; then note "nothing to stop (no service directory known)"; return; fi
    setup_podman
    local name
    if [[ ${GPUDASH_PODMAN_SHARED_STORAGE:-0} != 1 ]]; then
        "${P[@]}" rm --all --force --time 0 >/dev/null 2>&1 || note "podman rm --all failed"
    elif [[ -f $DIR/containers.list ]]; then
        while read -r name; do
            "${P[@]}" rm --force --ignore --time 0 "$name" >/dev/null 2>&1 || note "podman rm $name failed"
        done < "$DIR/containers.list"
    fi
    rm -f "$DIR/containers.list"
    local pid
    if pid=$(service_pid); then
        kill "$pid" 2>/dev/null || true
        if ! wait_until 10 gone "$pid"; then
            note "podman service $pid ignored SIGTERM for 10s; SIGKILL"
            kill -9 "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$DIR/podman.sock" "$DIR/podman-service.pid"
    # conmon runs `podman container cleanup` when a container exits; wait for those (and any
    # other process of this storage), since each of them may mount the storage again
    wait_until 10 no_storage_users || note "processes still use $DIR/storage: $(storage_users | tr '\n' ' ')"
    # the overlay driver bind-mounts DIR/storage/root/overlay onto itself and podman's
    # shutdown does not always undo it; unmount leftovers so that DIR can be deleted
    local m
    { awk '{print $5}' /proc/self/mountinfo | grep -F "$DIR/storage/" || true; } | sort -r | while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || note "cannot unmount $m"
    done
    if [[ -f $POINTER && $(<"$POINTER") == "$DIR" ]]; then rm -f "$POINTER"; fi
}

case ${1:-} in
    service) shift; cmd_service "$@" ;;
    image) shift; cmd_image "$@" ;;
    run) shift; cmd_run "$@" ;;
    stop) shift; cmd_stop "$@" ;;
    *) die "usage: podman.sh service DIR | image | run NAME [--label k=v ...] | stop [DIR]" ;;
esac
