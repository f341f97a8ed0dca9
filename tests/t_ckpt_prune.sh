#!/usr/bin/env bash
# t_ckpt_prune.sh — --keep prunes by save order, not by step number: resuming from an older
# step and saving with --keep 1 keeps the checkpoint just written (the one `latest` names) and
# drops the others loom wrote, so --keep bounds the directory across resumes; entries loom did
# not write (a step_* directory without a loom manifest, any other file) are never touched.
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 20000 1
flags="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 4
       --seq 16 --lr 3e-3 --lr-schedule constant --seed 5 --progress off"
ck=$d/ck
$LOOM train $flags --steps 6 --save "$ck" --save-every 2 --keep 0 2>/dev/null
ls "$ck"
test "$(cat "$ck/latest")" = step_00000006
# not loom's: must survive every prune
mkdir "$ck/step_99999999" "$ck/step_00000001"
echo '{"format": "something else"}' > "$ck/step_00000001/checkpoint.json"
echo notes > "$ck/notes.txt"
# resume from step 2, save step 4 with --keep 1
$LOOM train $flags --steps 4 --resume "$ck/step_00000002" --save "$ck" --keep 1 2>/dev/null
ls "$ck"
test "$(cat "$ck/latest")" = step_00000004
test -f "$ck/step_00000004/checkpoint.json"
test ! -e "$ck/step_00000002" && test ! -e "$ck/step_00000006"
test -d "$ck/step_99999999" && test -f "$ck/step_00000001/checkpoint.json" && test -f "$ck/notes.txt"
# `latest` resumes and equals an uninterrupted 4-step run
$LOOM train $flags --steps 4 --export "$d/a.safetensors" 2>/dev/null
$LOOM export "$ck" -o "$d/b.safetensors" 2>/dev/null
cmp "$d/a.safetensors" "$d/b.safetensors"
echo "keep 1 after resuming from step 2: step_00000004 kept, latest loads, foreign entries intact"
# and on: steps 5-8 saved every 2 with --keep 2 keep the two newest saves (6 and 8)
$LOOM train $flags --steps 8 --resume "$ck" --save "$ck" --save-every 2 --keep 2 2>/dev/null
ls "$ck"
test "$(cat "$ck/latest")" = step_00000008
test -d "$ck/step_00000006" && test ! -e "$ck/step_00000004"
test "$(find "$ck" -maxdepth 1 -name 'step_*' | wc -l)" -eq 4 # 6, 8 and the two foreign ones
echo "keep 2: step_00000006 and step_00000008 kept"
