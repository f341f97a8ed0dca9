#!/usr/bin/env bash
# t_data_position.sh — a resumed run continues at the next unread data window whatever its
# layout (dp × grad-accum), and metrics lines carry the cumulative "tokens".
# The data makes the windows tell: windows 0-7 hold one repeated token, every later window
# another, so a step reading later windows has the same loss however many of them it averages
# (the uninterrupted run's step 3 reads windows 8-11), and a resume that re-read early windows
# would show a very different loss.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
B=2 T=16
$PY - "$d/train.bin" $((8 * B * T)) <<'PY'
import struct, sys
path, first = sys.argv[1], int(sys.argv[2])
toks = [5] * first + [9] * 4000
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack(f"<{len(toks)}H", *toks))
PY
flags="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch $B
       --seq $T --lr 1e-2 --progress off --seed 3"
# uninterrupted: 1 rank x 4 micro-batches, 3 steps (windows 0-3, 4-7, 8-11), checkpoint at 2
$LOOM train $flags --grad-accum 4 --steps 3 --save "$d/ck" --save-every 2 --keep 0 \
    --metrics "$d/ref.jsonl"
loss_at() { sed -n "s/.*\"step\":$2,\"loss\":\([^,]*\),.*/\1/p" "$1"; }
tokens_at() { sed -n "s/.*\"step\":$2,.*\"tokens\":\([0-9]*\),.*/\1/p" "$1"; }
ref=$(loss_at "$d/ref.jsonl" 3)
[ "$(tokens_at "$d/ref.jsonl" 3)" = $((12 * B * T)) ] || { echo "tokens after step 3 != 12 windows"; exit 1; }
check() { # name metrics: step 3 must read windows from 8 on (same loss as the reference)
    local got; got=$(loss_at "$2" 3)
    $PY -c "import sys; a, b = float('$got'), float('$ref'); sys.exit(abs(a - b) > 1e-5 * abs(b))" ||
        { echo "$1: step 3 loss $got, uninterrupted $ref: it did not read windows 8+"; exit 1; }
    echo "$1: step 3 loss $got (uninterrupted $ref), tokens $(tokens_at "$2" 3)"
}
# resume with half the global batch: 1 rank x 2 micro-batches (windows 8-9)
$LOOM train $flags --grad-accum 2 --steps 3 --resume "$d/ck/step_00000002" --metrics "$d/k2.jsonl"
check "1 rank x 2" "$d/k2.jsonl"
[ "$(tokens_at "$d/k2.jsonl" 3)" = $((10 * B * T)) ]
# 2 ranks x 1 micro-batch (windows 8 and 9), and 2 ranks x 4 (windows 8-15)
$MPI -np 2 $LOOM train $flags --grad-accum 1 --dp 2 --steps 3 --resume "$d/ck/step_00000002" \
    --metrics "$d/d2.jsonl"
check "dp 2 x 1" "$d/d2.jsonl"
$MPI -np 2 $LOOM train $flags --grad-accum 4 --dp 2 --steps 3 --resume "$d/ck/step_00000002" \
    --metrics "$d/d8.jsonl" --save "$d/ck8"
check "dp 2 x 4" "$d/d8.jsonl"
[ "$(tokens_at "$d/d8.jsonl" 3)" = $((16 * B * T)) ]
grep -qE '"data_window":[[:space:]]*"16"' "$d/ck8/step_00000003/checkpoint.json"
echo "the next checkpoint records window 16"
