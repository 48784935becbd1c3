#!/usr/bin/env bash
# The systemd unit (packaging/gpudash.service) and its signals drop-in, offline:
# `systemd-analyze verify` on both, the environment file (packaging/gpudash.default) naming only
# variables gpudash reads, and `systemd-analyze security --offline` scoring the sandbox: above
# 2.0 fails, and a copy of the unit without its hardening is shown to fail that threshold.
# (deb.sh runs the installed unit for real, under systemd in a container.)
source "$(dirname "$0")/lib.sh"
need_binary
need_apt systemd man-db

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# verify checks that ExecStart's binary exists and runs: copies of the unit point at this
# checkout's binary. The unit as installed, /usr/bin/gpudash with its man page, is verified by
# deb.sh after dpkg -i.
mkdir -p "$work/plain" "$work/signals/gpudash.service.d" "$work/weak"
sed "s|^ExecStart=/usr/bin/gpudash\$|ExecStart=$BIN|" packaging/gpudash.service >"$work/plain/gpudash.service"
grep -qx "ExecStart=$BIN" "$work/plain/gpudash.service" || fail "no 'ExecStart=/usr/bin/gpudash' line in packaging/gpudash.service"
cp "$work/plain/gpudash.service" "$work/signals/"
cp packaging/gpudash.service.d/allow-signals.conf "$work/signals/gpudash.service.d/"
for variant in plain signals; do
    systemd-analyze verify --man=no "$work/$variant/gpudash.service" 2>&1 | tee "$OUT/systemd-verify-$variant.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] && [ ! -s "$OUT/systemd-verify-$variant.txt" ] || fail "systemd-analyze verify ($variant): see above"
done
say "ok   systemd-analyze verify: the unit, and the unit with allow-signals.conf, without a warning"

# Every variable the environment file names is one gpudash reads: a flag's (in --help) or the
# log filter (read by main.rs). Its settings are VARIABLE=value lines only.
known=$("$BIN" --help | grep -o 'GPUDASH_[A-Z][A-Z_]*' | sort -u)
grep -rqw GPUDASH_LOG server/src && known+=$'\nGPUDASH_LOG'
for variable in $(grep -o 'GPUDASH_[A-Z][A-Z_]*' packaging/gpudash.default | sort -u); do
    grep -qx "$variable" <<<"$known" || fail "packaging/gpudash.default names $variable, which gpudash does not read"
done
if grep -vE '^(#.*)?$' packaging/gpudash.default | grep -vE '^[A-Z_][A-Z0-9_]*=' >/dev/null; then
    fail "packaging/gpudash.default has a line that is neither a comment nor VARIABLE=value"
fi
say "ok   /etc/default/gpudash names $(grep -o 'GPUDASH_[A-Z][A-Z_]*' packaging/gpudash.default | sort -u | wc -l) variables, each one gpudash reads"

# The sandbox's score: 0 is locked down, 10 is none. Over 2.0 fails.
threshold=20
score() { grep -o 'Overall exposure level for [^:]*: [0-9.]*' "$1" | awk '{print $NF}'; }
for variant in plain signals; do
    systemd-analyze security --offline=yes --threshold=$threshold --no-pager "$work/$variant/gpudash.service" >"$OUT/systemd-security-$variant.txt" 2>&1 ||
        { cat "$OUT/systemd-security-$variant.txt"; fail "exposure of the unit ($variant) above 2.0"; }
done
grep -q '✓ CapabilityBoundingSet=~CAP_KILL' "$OUT/systemd-security-plain.txt" || fail "the unit alone may signal other users' processes"
grep -q '✗ CapabilityBoundingSet=~CAP_KILL' "$OUT/systemd-security-signals.txt" || fail "allow-signals.conf does not grant CAP_KILL"
say "ok   systemd-analyze security --offline: exposure $(score "$OUT/systemd-security-plain.txt") (with allow-signals.conf $(score "$OUT/systemd-security-signals.txt"): CAP_KILL only there); what stays exposed:"
grep '✗' "$OUT/systemd-security-plain.txt" | sed -E 's/ {2,}/ | /g; s/^/         /'

# The threshold can fail: the unit without its hardening section scores far above it.
sed '/^# Hardening/,/^\[Install\]/{/^\[Install\]/!d}' "$work/plain/gpudash.service" >"$work/weak/gpudash.service"
if systemd-analyze security --offline=yes --threshold=$threshold --no-pager "$work/weak/gpudash.service" >"$OUT/systemd-security-weak.txt" 2>&1; then
    fail "a unit without its hardening passed the threshold"
fi
say "ok   the same unit without its hardening section fails the threshold (exposure $(score "$OUT/systemd-security-weak.txt"))"
