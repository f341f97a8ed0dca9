#!/usr/bin/env bash
# serial: a holder process killed after a short sleep
# t_offload_tier.sh — the slow tier (src/offload/tier.c) on real filesystems, through the unit
# test's modes (build/tests/test_tier --open / --hold / --roundtrip):
#   * nothing is left in the --offload-dir after a tier was opened and closed, nor after the
#     process holding one open is killed with SIGKILL (the scratch file is unlinked at once);
#   * in a private mount namespace (`unshare -m` as root, else `unshare -rm`): a 2 MiB tmpfs is
#     too small for a 4 MiB tier ("No space left on device", naming the directory, what was
#     needed and what is free); a read-only tmpfs is refused ("Read-only file system"); on a
#     ramfs, which refuses O_DIRECT, the tier falls back to buffered I/O with one warning and
#     the round trip and ordering checks still pass.
# Exits 77 (skip) when no mount namespace can be made here (the first part still ran).
set -eu
cd "$(dirname "$0")/.."
. tests/lib.sh
T=${LOOM_BUILD:-build}/tests/test_tier
[ -x "$T" ] || { echo "FAILED: $T not built (make tests)"; exit 1; }

empty() { # DIR WHEN: DIR must hold nothing
    local left; left=$(ls -A "$1")
    [ -z "$left" ] || { echo "FAILED: $1 not empty $2: $left"; exit 1; }
    echo "ok: nothing left in the dir $2"
}

if [ "${1:-}" = --in-ns ]; then # the namespace part: DIR is private to this mount namespace
    d=$2
    mkdir -p "$d/full" "$d/ro" "$d/ram"
    mount -t tmpfs -o size=2m tmpfs "$d/full"
    mount -t tmpfs -o ro,size=2m tmpfs "$d/ro"
    mount -t ramfs ramfs "$d/ram"
    expect_fail "--offload-dir $d/full: No space left on device (needs 4.0 MiB, " "$T" --open "$d/full" 4M
    empty "$d/full" "after a full disk"
    expect_fail "--offload-dir $d/ro: cannot create a directory in it: Read-only file system" \
        "$T" --open "$d/ro" 1M
    "$T" --roundtrip "$d/ram" >"$d/rt.out" 2>"$d/rt.err" || {
        echo "FAILED: round trip on ramfs"; cat "$d/rt.out" "$d/rt.err"; exit 1; }
    cat "$d/rt.out"
    grep -qx "direct 0" "$d/rt.out" || { echo "FAILED: ramfs tier is not buffered"; exit 1; }
    n=$(grep -c "warning: --offload-dir $d/ram refuses direct I/O (O_DIRECT); falling back to buffered I/O whose pages are dropped" "$d/rt.err" || true)
    [ "$n" -eq 1 ] || { echo "FAILED: $n fallback warnings (want 1):"; cat "$d/rt.err"; exit 1; }
    echo "ok: ramfs refuses O_DIRECT: buffered, one warning: $(cat "$d/rt.err")"
    empty "$d/ram" "after the buffered round trip"
    umount "$d/full" "$d/ro" "$d/ram"
    exit 0
fi

d=$(mktemp -d); pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$d"' EXIT

# 1. nothing left behind on the machine's own disk
"$T" --open "$d" 8M
empty "$d" "after open + close"
"$T" --hold "$d" 64M >"$d.hold" &
pid=$!
for _ in $(seq 600); do grep -q holding "$d.hold" 2>/dev/null && break; sleep 0.1; done # waits for it, at most 60 s
grep -q holding "$d.hold" || { echo "FAILED: --hold did not open"; exit 1; }
rm -f "$d.hold"
empty "$d" "while a tier is open"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true; pid=
empty "$d" "after kill -9 of the holder"
if [ "$(id -u)" -ne 0 ]; then # root writes anywhere: only others see a mode-0555 dir refused
    mkdir "$d/noperm"; chmod 555 "$d/noperm"
    expect_fail "--offload-dir $d/noperm: cannot create a directory in it: Permission denied" \
        "$T" --open "$d/noperm" 1M
fi

# 2. small, read-only and O_DIRECT-refusing filesystems, mounted in a private namespace
if [ "$(id -u)" -eq 0 ]; then ns=(unshare -m); else ns=(unshare -rm); fi
if ! "${ns[@]}" true 2>/dev/null; then
    echo "cannot create a mount namespace here (${ns[*]}): full-disk, read-only and buffered-fallback checks not run"
    exit 77
fi
"${ns[@]}" bash "$0" --in-ns "$d"
echo "all tier checks passed"
