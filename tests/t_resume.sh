#!/usr/bin/env bash
# t_resume.sh — checkpoints: resume continues bit-identically (same exported bytes and the same
# per-step losses as an uninterrupted run, with cosine schedule, warmup, shuffling and
# accumulation); a failed save leaves the previous checkpoint intact; a corrupted file is
# refused with a checksum error naming it; export from a checkpoint matches --export.
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 20000 1
flags="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 4 --seq 16
       --grad-accum 2 --steps 8 --lr 3e-3 --warmup 2 --lr-schedule cosine --min-lr 1e-4 --shuffle on
       --seed 11 --progress off"
$LOOM train $flags --save "$d/ckA" --save-every 4 --keep 0 --metrics "$d/a.jsonl" --export "$d/a.safetensors"
test -f "$d/ckA/step_00000004/shard_00000.bin"
test "$(cat "$d/ckA/latest")" = step_00000008
# resume from step 4 into a fresh directory
cp -r "$d/ckA/step_00000004" "$d/from4"
$LOOM train $flags --resume "$d/from4" --metrics "$d/b.jsonl" --export "$d/b.safetensors"
cmp "$d/a.safetensors" "$d/b.safetensors"
tail -n 4 "$d/a.jsonl" | grep -o '"loss":[^,]*' > "$d/la"
grep -o '"loss":[^,]*' "$d/b.jsonl" > "$d/lb"
diff "$d/la" "$d/lb"
echo "resume: steps 5-8 and final weights bit-identical"

# a save that fails midway keeps the last good checkpoint
before=$(cat "$d/ckA/latest")
expect_fail "injected fault" env LOOM_FAULT_SAVE=1 $LOOM train $flags --steps 10 --resume "$d/ckA" --save "$d/ckA"
test "$(cat "$d/ckA/latest")" = "$before"
$LOOM export "$d/ckA" -o "$d/again.safetensors"
cmp "$d/a.safetensors" "$d/again.safetensors"
echo "failed save: latest still $before and loads"

# corrupted checkpoint
printf 'garbage' | dd of="$d/from4/shard_00000.bin" bs=1 seek=100 conv=notrunc 2>/dev/null
expect_fail "checksum mismatch" $LOOM train $flags --resume "$d/from4"
expect_fail "not a checkpoint" $LOOM train $flags --resume "$d"
