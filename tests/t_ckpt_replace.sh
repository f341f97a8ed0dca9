#!/usr/bin/env bash
# t_ckpt_replace.sh — re-saving a step that already has a directory never leaves `latest`
# naming nothing: a SIGKILL at the moment the older directory of that step has been moved out
# of the way (LOOM_FAULT_SAVE_KILL=replace) still leaves a complete checkpoint under `latest`,
# which loads and equals the uninterrupted run; a clean re-save afterwards leaves no debris.
# Both ways of replacing: renameat2(RENAME_EXCHANGE), and the fallback for filesystems without
# it (LOOM_SAVE_NO_EXCHANGE=1: the old directory moves to step_N.old, which `latest` resolves
# to until the new one is in place).
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 20000 1
flags="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 4
       --seq 16 --steps 8 --lr 3e-3 --seed 9 --progress off"
ck=$d/ck
$LOOM train $flags --save "$ck" --save-every 4 --keep 0 --export "$d/a.safetensors" 2>/dev/null
test "$(cat "$ck/latest")" = step_00000008
cp -r "$ck/step_00000004" "$d/from4"
for mode in exchange fallback; do
    [ $mode = fallback ] && export LOOM_SAVE_NO_EXCHANGE=1
    # resume from step 4 into the same directory: the step-8 save replaces step_00000008, which
    # `latest` names; the process dies in the middle of the replacement
    rc=0
    LOOM_FAULT_SAVE_KILL=replace $LOOM train $flags --resume "$d/from4" --save "$ck" 2>"$d/err" || rc=$?
    cat "$d/err"
    [ "$rc" -eq 137 ] || { echo "FAILED: expected a SIGKILL (137), got $rc"; exit 1; }
    grep -q "LOOM_FAULT_SAVE_KILL at 'replace'" "$d/err"
    ls "$ck"
    test "$(cat "$ck/latest")" = step_00000008
    $LOOM export "$ck" -o "$d/b.safetensors" 2>/dev/null
    cmp "$d/a.safetensors" "$d/b.safetensors"
    echo "$mode: killed while replacing step_00000008: latest still loads, same weights"
    # a clean re-save replaces it and cleans up
    $LOOM train $flags --resume "$d/from4" --save "$ck" --keep 0 2>/dev/null
    ls "$ck"
    test -z "$(find "$ck" -maxdepth 1 -name '*.old' -o -maxdepth 1 -name '*.partial')"
    $LOOM export "$ck" -o "$d/c.safetensors" 2>/dev/null
    cmp "$d/a.safetensors" "$d/c.safetensors"
    echo "$mode: clean re-save: no .old or .partial left, same weights"
done
