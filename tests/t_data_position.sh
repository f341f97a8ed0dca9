#!/usr/bin/env bash
# t_data_position.sh — a resumed run continues at the next unread data window whatever its
# layout (dp × grad-accum), and metrics lines carry the cumulative "tokens". A checkpoint written
# before windows were B independent sequences (its manifest has no "data_order") resumes, and
# when its run or the new one shuffles, the lead rank says once what its position means now.
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

# old checkpoints: the manifest without "data_order" (as written before it existed)
strip() { cp -r "$1" "$2"; $PY - "$2/checkpoint.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); del j["data_order"]; json.dump(j, open(sys.argv[1], "w"))
PY
}
note="was written before the rows of a micro-batch became independent sequences"
# no shuffle, first epoch: the same tokens as before, so no note and the same step 3
strip "$d/ck/step_00000002" "$d/old_off"
$LOOM train $flags --grad-accum 4 --steps 3 --resume "$d/old_off" --metrics "$d/old_off.jsonl" \
    2>"$d/old_off.err"
check "old checkpoint, no shuffle" "$d/old_off.jsonl"
! grep -q "$note" "$d/old_off.err" || { echo "a note for an unshuffled first-epoch checkpoint"; exit 1; }
# shuffled: one note on the lead rank of a dp 2 job (window 8 x B 2 = sequence 16 of 265)
$LOOM train $flags --grad-accum 4 --steps 2 --shuffle on --save "$d/cks" 2>/dev/null
strip "$d/cks/step_00000002" "$d/old_on"
$MPI -np 2 $LOOM train $flags --grad-accum 2 --dp 2 --steps 3 --shuffle on --resume "$d/old_on" \
    2>"$d/old_on.err"
grep "$note" "$d/old_on.err"
[ "$(grep -c "$note" "$d/old_on.err")" = 1 ] || { echo "want the note once"; exit 1; }
grep -q -- "--shuffle on, this one has --shuffle on): its data position, 8 windows, now counts \
windows of 2 sequences (T+1 = 17 tokens) of the per-epoch sequence permutation, so this run goes \
on in epoch 1 at sequence 16 of 265;" "$d/old_on.err"
$LOOM train $flags --grad-accum 4 --steps 3 --resume "$d/old_on" 2>&1 | grep -q -- \
    "its run had --shuffle on, this one has --shuffle off)"
$LOOM train $flags --grad-accum 4 --steps 3 --shuffle on --resume "$d/cks/step_00000002" \
    2>"$d/new_on.err"
! grep -q "$note" "$d/new_on.err" || { echo "a note for a checkpoint with data_order"; exit 1; }
echo "old checkpoints: no note without shuffle in the first epoch, one note when shuffled"
