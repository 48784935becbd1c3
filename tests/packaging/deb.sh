#!/usr/bin/env bash
# The .deb: made by cargo-deb from the binary this checkout built (no second build), inspected,
# then installed, run and removed on a Debian 12 with systemd as PID 1 (a container made here
# with mmdebstrap, since CI's machine has no systemd running): dpkg -i lands every file where
# the unit expects it, the unit passes `systemd-analyze verify` as installed, the service runs
# sandboxed as a dynamic user, history survives a restart, the signals drop-in is needed and
# enough to stop another user's process, `dpkg -r` keeps the conffile and history, and
# `dpkg -P` leaves nothing behind.
source "$(dirname "$0")/lib.sh"
need_binary
need_apt help2man binutils podman runc mmdebstrap

# cargo-deb, pinned, through cargo (crates.io has no prebuilt binaries; a build takes about a
# minute on 2 cores). Kept in ~/.cargo/bin between runs.
CARGO_DEB_VERSION=3.8.0
if ! cargo deb --version 2>/dev/null | grep -qx "cargo-deb $CARGO_DEB_VERSION"; then
    started=$SECONDS
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked --quiet
    say "installed cargo-deb $CARGO_DEB_VERSION in $((SECONDS - started))s"
fi

# A Cargo target directory holding only what is packaged: cargo-deb reads assets from
# "target/release/" of the target directory it is given (CARGO_TARGET_DIR), so it takes this
# binary as it is (`--no-build`; without debug sections) and the man page made from its --help.
stage=$OUT/deb-target
rm -rf "$stage" "$OUT"/gpudash_*.deb
mkdir -p "$stage/release"
objcopy --strip-debug "$BIN" "$stage/release/gpudash"
SOURCE_DATE_EPOCH=$(git log -1 --format=%ct 2>/dev/null || date +%s) help2man --no-info --no-discard-stderr \
    --include packaging/gpudash.h2m --name 'a self-hosted live dashboard for NVIDIA GPUs' \
    --output "$stage/release/gpudash.1" "$stage/release/gpudash"
gzip -9nf "$stage/release/gpudash.1"
started=$SECONDS
CARGO_TARGET_DIR=$stage cargo deb -p gpudash --no-build --fast --output "$OUT/" >"$OUT/cargo-deb.log" 2>&1 ||
    { cat "$OUT/cargo-deb.log"; fail "cargo deb"; }
deb=$(ls "$OUT"/gpudash_*.deb)
say "built $(basename "$deb") in $((SECONDS - started))s: $(du -h "$deb" | cut -f1) (Depends: $(dpkg-deb -f "$deb" Depends))"

# What is in it.
expected="./etc/default/gpudash
./usr/bin/gpudash
./usr/lib/systemd/system/gpudash.service
./usr/share/doc/gpudash/copyright
./usr/share/doc/gpudash/examples/allow-signals.conf
./usr/share/man/man1/gpudash.1.gz"
files=$(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $6}' | sort)
[ "$files" = "$expected" ] || fail "the .deb holds: $files"
conffiles=$(dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./conffiles)
[ "$conffiles" = /etc/default/gpudash ] || fail "conffiles: $conffiles"
dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/lib/systemd/system/gpudash.service | cmp -s - packaging/gpudash.service ||
    fail "the packaged unit differs from packaging/gpudash.service"
say "ok   contents: the binary, the unit, /etc/default/gpudash (the conffile), the man page, the drop-in example"

# Debian 12 with systemd as PID 1, in a container (privileged: systemd sets up each service's
# namespaces). curl for the API; man-db so that verify checks Documentation=man:gpudash(1).
image=$(ensure_base gpudash-packaging-systemd systemd,systemd-sysv,libnss-systemd,curl,man-db)
box=gpudash-packaging-systemd-$$
log=$OUT/deb-podman.log
: >"$log"
trap '"${PODMAN[@]}" rm --ignore -f -v -t 5 "$box" >/dev/null 2>>"$log" || true' EXIT
"${PODMAN[@]}" run -d --name "$box" --systemd=always --privileged "${RUN_LIMITS[@]}" \
    -v "$OUT:/debs:ro" "$image" /sbin/init >/dev/null 2>>"$log"
in_box() { "${PODMAN[@]}" exec "$box" "$@"; }
booted() { in_box systemctl is-system-running | grep -qE '^(running|degraded)$'; }
eventually 60 "systemd booting in the container" booted

# Everything outside dpkg's, apt's and systemd's own records, to compare after the purge.
snapshot() {
    in_box find /etc /usr /var/lib /var/log -xdev \( -path /var/lib/dpkg -o -path /var/lib/apt \
        -o -path /var/lib/systemd -o -path /var/lib/private -o -path /var/log/journal -o -path /var/log/dpkg.log -o -path /var/lib/man-db \) -prune -o -print | sort
}
snapshot >"$OUT/deb-before.txt"

in_box dpkg -i "/debs/$(basename "$deb")" >"$OUT/deb-install.log" 2>&1 || { cat "$OUT/deb-install.log"; fail "dpkg -i"; }
in_box test -x /usr/bin/gpudash || fail "no /usr/bin/gpudash"
[ "$(in_box man -w gpudash)" = /usr/share/man/man1/gpudash.1.gz ] || fail "man gpudash finds no page"
in_box dpkg-query -W -f='${Conffiles}' gpudash | grep -q '^ /etc/default/gpudash ' || fail "/etc/default/gpudash is no conffile"
# It may hold webhook URLs and fleet credentials: systemd reads it as root (EnvironmentFile=), nobody else.
[ "$(in_box stat -c %a:%U:%G /etc/default/gpudash)" = 600:root:root ] ||
    fail "/etc/default/gpudash is $(in_box stat -c %a:%U:%G /etc/default/gpudash), not 600:root:root"
in_box systemd-analyze verify /usr/lib/systemd/system/gpudash.service >"$OUT/deb-verify.txt" 2>&1 && [ ! -s "$OUT/deb-verify.txt" ] ||
    { cat "$OUT/deb-verify.txt"; fail "systemd-analyze verify of the installed unit"; }
say "ok   dpkg -i: $(in_box /usr/bin/gpudash --version), man gpudash, the conffile; the installed unit verifies (binary and man page where it says)"

# The package enabled and started the service; without a driver it serves and says why.
[ "$(in_box systemctl is-enabled gpudash)" = enabled ] || fail "gpudash.service is not enabled"
healthz() { in_box curl -fsS http://127.0.0.1:7070/healthz; }
eventually 30 "/healthz of the service started by the package" healthz
healthz | grep -q '"status":"degraded"' || fail "without a driver /healthz says: $(healthz)"
say "ok   enabled and started on install; without a driver: $(healthz | cut -c1-110)…"

# Configured through /etc/default/gpudash: simulated GPUs, a token, signals allowed, and a
# process of another user (nobody) listed as GPU 0's.
token=$(new_token)
in_box systemd-run --quiet --unit gpudash-victim --uid=65534 /bin/sleep 600
victim=$(in_box systemctl show -p MainPID --value gpudash-victim)
in_box sh -c "printf '%s\n' GPUDASH_SIMULATE=4 'GPUDASH_TOKENS=admin:admin:$token' GPUDASH_ALLOW_SIGNALS=true \
    'GPUDASH_SIMULATE_FAULT=pid:0:$victim' >>/etc/default/gpudash"
serving() { healthz | grep -q '"devices":4'; }
restart() {
    in_box systemctl restart gpudash
    eventually 30 "/healthz after a restart" serving
}
restart
api() { in_box curl -sS -H "Authorization: Bearer $token" -H 'Content-Type: application/json' "$@"; }

# The sandbox as the running process has it.
pid=$(in_box systemctl show -p MainPID --value gpudash)
status=$(in_box cat "/proc/$pid/status")
uid=$(awk '/^Uid:/ {print $2}' <<<"$status")
[ "$uid" -ge 61184 ] && [ "$uid" -le 65519 ] || fail "gpudash runs as uid $uid, not a dynamic user"
for want in 'NoNewPrivs:	1' 'Seccomp:	2' 'CapBnd:	0000000000000000' 'CapAmb:	0000000000000000'; do
    grep -qF "$want" <<<"$status" || fail "/proc/$pid/status lacks '$want'"
done
mounts=$(in_box cat "/proc/$pid/mountinfo")
# The options of the mount that holds DIR in the service's namespace (the longest mount point).
mount_of() { awk -v d="$1" '(d == $5 || index(d, ($5 == "/" ? "/" : $5 "/")) == 1) && length($5) >= n {n = length($5); o = $6} END {print o}' <<<"$mounts"; }
for dir in /usr/bin /etc/default /var/lib; do
    mount_of "$dir" | grep -q '^ro' || fail "$dir is writable for the service ($(mount_of "$dir"))"
done
mount_of /var/lib/private/gpudash | grep -q '^rw' || fail "its state directory is not writable"
in_box sh -c 'ls /var/lib/gpudash/*.db' >/dev/null || fail "no history database in /var/lib/gpudash"
say "ok   sandboxed: dynamic uid $uid ($(in_box getent passwd "$uid" | cut -d: -f1,5)), no capabilities, no new privileges, seccomp, /usr, /etc and /var/lib read-only but its own state directory, history in /var/lib/gpudash -> private/gpudash"

now=$(($(date +%s) * 1000))
api -f -o /dev/null -d "{\"devices\":[1],\"start_ms\":$now,\"end_ms\":$((now + 3600000)),\"note\":\"deb $$\"}" \
    http://127.0.0.1:7070/api/reservations || fail "POST /api/reservations"

# Signals: allowed by the flag, refused by the OS until the drop-in grants CAP_KILL.
signal() { api -o /tmp/signal.json -w '%{http_code}' -d '{"signal":"SIGTERM"}' "http://127.0.0.1:7070/api/processes/$victim/signal"; }
code=$(signal)
[ "$code" = 403 ] && in_box grep -q 'the OS refused' /tmp/signal.json || fail "without CAP_KILL: $code $(in_box cat /tmp/signal.json)"
say "ok   --allow-signals without the drop-in: 403, $(in_box cat /tmp/signal.json | cut -c1-100)…"
in_box install -D -m 0644 /usr/share/doc/gpudash/examples/allow-signals.conf /etc/systemd/system/gpudash.service.d/allow-signals.conf
in_box systemctl daemon-reload
restart
pid=$(in_box systemctl show -p MainPID --value gpudash)
in_box grep -qF 'CapAmb:	0000000000000020' "/proc/$pid/status" || fail "the drop-in did not give CAP_KILL"
api "http://127.0.0.1:7070/api/reservations" | grep -q "\"note\":\"deb $$\"" || fail "the reservation did not survive the restart"
say "ok   history survives a restart of the service (the reservation is listed)"
code=$(signal)
[ "$code" = 200 ] && in_box grep -q '"exited":true' /tmp/signal.json || fail "with CAP_KILL: $code $(in_box cat /tmp/signal.json)"
in_box systemctl is-active --quiet gpudash-victim && fail "nobody's process still runs"
say "ok   with allow-signals.conf (CAP_KILL bounding and ambient): $(in_box cat /tmp/signal.json); nobody's process is gone"

# Reload: without an alerts file nothing to do (the process stays); with one, SIGHUP re-reads it.
in_box systemctl reload gpudash
[ "$(in_box systemctl show -p MainPID --value gpudash)" = "$pid" ] && serving || fail "systemctl reload (no alerts file) ended the service"
in_box sh -c 'mkdir -p /etc/gpudash && : >/etc/gpudash/alerts.toml && echo GPUDASH_ALERTS_FILE=/etc/gpudash/alerts.toml >>/etc/default/gpudash'
restart
pid=$(in_box systemctl show -p MainPID --value gpudash)
in_box systemctl reload gpudash
reloaded() { in_box journalctl -u gpudash --no-pager | grep -q 'alerts file /etc/gpudash/alerts.toml reloaded'; }
eventually 10 "the alerts file re-read on reload" reloaded
[ "$(in_box systemctl show -p MainPID --value gpudash)" = "$pid" ] && serving || fail "systemctl reload ended the service"
say "ok   systemctl reload: a no-op without an alerts file; with one, SIGHUP re-reads it; the same process serves on"

in_box systemctl stop gpudash
[ "$(in_box systemctl show -p Result --value gpudash)" = success ] || fail "gpudash did not stop cleanly"
say "ok   systemctl stop: SIGTERM, drained, Result=success"
# The drop-in and the alerts file are the administrator's, not the package's: removed by hand.
in_box rm -r /etc/systemd/system/gpudash.service.d /etc/gpudash
in_box systemctl daemon-reload

in_box dpkg -r gpudash >"$OUT/deb-remove.log" 2>&1 || { cat "$OUT/deb-remove.log"; fail "dpkg -r"; }
for gone in /usr/bin/gpudash /usr/lib/systemd/system/gpudash.service /usr/share/man/man1/gpudash.1.gz; do
    in_box test ! -e "$gone" || fail "dpkg -r left $gone"
done
in_box test -f /etc/default/gpudash || fail "dpkg -r removed the conffile"
in_box sh -c 'ls /var/lib/private/gpudash/*.db' >/dev/null || fail "dpkg -r removed the history"
[ "$(in_box dpkg-query -W -f='${Status}' gpudash)" = "deinstall ok config-files" ] || fail "after dpkg -r: $(in_box dpkg-query -W -f='${Status}' gpudash)"
say "ok   dpkg -r: the program, unit and man page gone; /etc/default/gpudash and the history kept"

in_box dpkg -P gpudash >"$OUT/deb-purge.log" 2>&1 || { cat "$OUT/deb-purge.log"; fail "dpkg -P"; }
in_box test ! -e /var/lib/private/gpudash || fail "dpkg -P left the history"
in_box dpkg-query -W gpudash >/dev/null 2>&1 && [ "$(in_box dpkg-query -W -f='${Status}' gpudash)" != "unknown ok not-installed" ] &&
    fail "dpkg still knows gpudash: $(in_box dpkg-query -W -f='${Status}' gpudash)"
snapshot >"$OUT/deb-after.txt"
diff -u "$OUT/deb-before.txt" "$OUT/deb-after.txt" || fail "dpkg -P left the files above (+) or took some (-)"
say "ok   dpkg -P: the conffile, the history and the enablement links gone; /etc, /usr, /var/lib, /var/log as before the install"
