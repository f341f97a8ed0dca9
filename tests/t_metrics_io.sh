#!/usr/bin/env bash
# t_metrics_io.sh — a metrics file that cannot be written (disk full: /dev/full gives ENOSPC on
# every write) stops `loom train` with exit 5 (EXIT_IO) and one message naming the file, rather
# than training on while the history is lost.
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
[ -w /dev/full ] || { echo "SKIP: no /dev/full"; exit 77; }
mkshard "$d/train.bin" 64 5000 1
base="--data $d/train.bin --batch 2 --seq 8 --progress off --layers 1 --heads 2 --dim 16
      --vocab 64 --block-size 16 --steps 3"
set +e
# shellcheck disable=SC2086
$LOOM train $base --metrics /dev/full 2> "$d/err"; rc=$?
set -e
cat "$d/err"
[ "$rc" -eq 5 ] || { echo "expected exit 5, got $rc"; exit 1; }
[ "$(grep -c "/dev/full: cannot write metrics: No space left on device" "$d/err")" -eq 1 ]
# the same run with a writable file logs every step
# shellcheck disable=SC2086
$LOOM train $base --metrics "$d/m.jsonl" 2> "$d/err2"
[ "$(wc -l < "$d/m.jsonl")" -eq 3 ]
echo "disk-full metrics stop the run with exit 5"
