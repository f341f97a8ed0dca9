#!/usr/bin/env bash
# t_co2_checkpoint.sh — CO2 checkpoints resume exactly:
#   * 2 workers, tau 3, adaptive gap penalty: 12 steps straight vs a run saved every 6 steps and
#     resumed from step 6; losses of steps 7-12 and the exported final anchor bit-identical.
#     The saved average of round 2 is in flight at the save and is applied at step 9's round end
#     by the resumed run, so a resume that dropped or re-applied it would differ;
#   * the same with the outer state sharded (--zero 1, 3 workers, constant gap penalty);
#   * clear errors: a CO2 checkpoint resumed with another worker count, another tau or the other
#     sharding; --save-every that is not a multiple of --tau; a corrupted worker state file;
#   * a checkpoint without CO2 state (the end of a CO2 run) starts new rounds from its weights;
#     a mid-run CO2 checkpoint resumed without --co2 continues as data parallelism, with a note.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/d.bin" 64 60000 3
flags="--data $d/d.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2 --seq 16
       --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --steps 12 --co2 --tau 3 --outer-momentum 0.6
       --outer-clip 0.004 --progress off --seed 5"

for mode in "2 adaptive" "3 constant --zero 1"; do
    set -- $mode
    n=$1; shift
    extra="--gap-mode $*"
    tag="n$n"
    $MPI -np $n $LOOM train $flags --dp $n $extra --metrics "$d/$tag.full.jsonl" \
        --export "$d/$tag.full.st" 2>/dev/null
    $MPI -np $n $LOOM train $flags --dp $n $extra --save "$d/ck_$tag" --save-every 6 --keep 5 \
        --metrics /dev/null 2>/dev/null
    test -s "$d/ck_$tag/step_00000006/co2_00000.bin"
    grep -q '"workers"' "$d/ck_$tag/step_00000006/checkpoint.json"
    $MPI -np $n $LOOM train $flags --dp $n $extra --resume "$d/ck_$tag/step_00000006" \
        --metrics "$d/$tag.res.jsonl" --export "$d/$tag.res.st" 2>/dev/null
    same --part --steps 7-12 "co2 $n workers $*: resumed at step 6" "$d/$tag.res.jsonl" \
        "$d/$tag.full.jsonl" "$d/$tag.res.st" "$d/$tag.full.st"
done

echo "== errors name the problem"
ck="$d/ck_n2/step_00000006"
expect_fail "resume it with --dp 2" $MPI -np 3 $LOOM train $flags --dp 3 --resume "$ck"
expect_fail "resume it with --tau 3" $MPI -np 2 $LOOM train ${flags/--tau 3/--tau 2} --dp 2 --resume "$ck"
expect_fail "co2-sharded" $MPI -np 2 $LOOM train $flags --dp 2 --zero 1 --resume "$ck"
expect_fail "multiple of --tau" $LOOM train $flags --save "$d/x" --save-every 4
cp -r "$ck" "$d/bad"
printf 'XXXX' | dd of="$d/bad/co2_00001.bin" bs=1 seek=200 conv=notrunc 2>/dev/null
expect_fail "co2_00001.bin: checksum mismatch" $MPI -np 2 $LOOM train $flags --dp 2 --resume "$d/bad"

echo "== a checkpoint without CO2 state starts new rounds from its weights"
$MPI -np 2 $LOOM train $flags --dp 2 --steps 15 --resume "$d/ck_n2/step_00000012" \
    --metrics "$d/more.jsonl" > "$d/more.log" 2>&1
grep -q "holds no CO2 state" "$d/more.log"
[ "$(grep -c '"loss"' "$d/more.jsonl")" = 3 ]
echo "resumed the final anchor for 3 more steps"

echo "== a CO2 checkpoint resumed without --co2 continues as data parallelism, and says so"
$MPI -np 2 $LOOM train ${flags/--co2/} --dp 2 --resume "$ck" --metrics "$d/dp.jsonl" > "$d/dp.log" 2>&1
grep -q "saved mid-run by CO2" "$d/dp.log"
[ "$(grep -c '"loss"' "$d/dp.jsonl")" = 6 ]
echo "resumed as DP for steps 7-12"
