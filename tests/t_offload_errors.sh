#!/usr/bin/env bash
# t_offload_errors.sh — bad input to --offload is a clear error (exit 1..125, the flag, the
# directory or the combination named) and never a crash: a budget below the minimum (the
# message states it), a missing --offload-dir, one that is a file, missing flags, a bad size,
# --offload host on the CPU (no copy stream), over a disk tier without --host-mem, --host-mem
# with --offload disk or without --offload, an unknown tier,
# and the combinations it does not support:
# --pp, --zero 2/3, CO2's sharded outer state (--co2 --zero 1), --dump-grads. A full disk and a read-only directory are checked on
# real small filesystems where this machine lets the test mount one (unshare), else skipped
# with a note.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 20000 3
mkdir "$d/off"; touch "$d/file"
flags="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2
       --seq 16 --steps 2 --progress off --threads 1"
OFF="--offload disk --offload-dir $d/off"
expect_fail "needs at least" $LOOM train $flags $OFF --fast-mem 64K
expect_fail "--offload-dir $d/missing: No such file" $LOOM train $flags --offload disk \
    --offload-dir "$d/missing" --fast-mem 64M
expect_fail "Not a directory" $LOOM train $flags --offload disk --offload-dir "$d/file" \
    --fast-mem 64M
expect_fail "needs --offload-dir" $LOOM train $flags --offload disk --fast-mem 64M
expect_fail "needs --fast-mem" $LOOM train $flags $OFF
expect_fail "--fast-mem: '12X' is not a size" $LOOM train $flags $OFF --fast-mem 12X
expect_fail "--offload host --offload-dir $d/off needs --host-mem SIZE" $LOOM train $flags \
    --offload host --offload-dir "$d/off" --fast-mem 64M
expect_fail "--host-mem bounds --offload host's host memory" $LOOM train $flags $OFF \
    --host-mem 64M --fast-mem 64M
expect_fail "--host-mem: '1Q' is not a size" $LOOM train $flags --offload host --host-mem 1Q \
    --fast-mem 64M
expect_fail "--offload-dir, --fast-mem, --host-mem and --offload-units need" $LOOM train $flags \
    --host-mem 64M
expect_fail "--offload host with --device cpu: the cpu backend lacks a copy stream" $LOOM train \
    $flags --offload host --fast-mem 64M
expect_fail "--offload: 'tape' is not one of disk|host" $LOOM train $flags --offload tape \
    --offload-dir "$d/off" --fast-mem 64M
expect_fail "--offload with --dump-grads" $LOOM train $flags $OFF --fast-mem 64M \
    --dump-grads "$d/g.bin"
expect_fail "--offload-dir, --fast-mem, --host-mem and --offload-units need --offload" $LOOM \
    train $flags --fast-mem 64M
expect_fail "--offload with --zero 3" $MPI -np 2 $LOOM train $flags $OFF --fast-mem 64M \
    --dp 2 --zero 3
expect_fail "--offload with --zero 1: CO2's sharded outer state" $MPI -np 2 $LOOM train $flags $OFF --fast-mem 64M \
    --dp 2 --co2 --zero 1
[ -z "$(ls -A "$d/off")" ] || { echo "scratch files left behind"; exit 1; }

# a full disk and a read-only directory: small tmpfs mounts in a private mount namespace
flags=$(echo $flags) # one line, for sh -c
ns="unshare -m"; [ "$(id -u)" = 0 ] || ns="unshare -r -m"
if ! $ns true 2>/dev/null || ! $ns sh -c "mount -t tmpfs -o size=1m none $d/off" 2>/dev/null; then
    echo "note: cannot mount a small filesystem here ($ns): full-disk and read-only cases not run"
    exit 0
fi
expect_fail "No space left on device" $ns sh -c "mount -t tmpfs -o size=128k none $d/off &&
    exec $LOOM train $flags $OFF --fast-mem 64M"
expect_fail "Read-only file system" $ns sh -c "mount -t tmpfs -o ro,size=1m none $d/off &&
    exec $LOOM train $flags $OFF --fast-mem 64M"
