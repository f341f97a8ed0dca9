#!/usr/bin/env bash
# t_dp_equivalence.sh — data parallelism under mpirun: N ranks × K micro-batches reproduce
# 1 rank × N·K micro-batches on the same data windows (losses within 1e-5 per step), for ZeRO
# stages 0–3, with weight decay and clipping on, at N = 2 and N = 4 (oversubscribed), with
# several gradient buckets. Then checkpoints across layouts: 2 ranks ZeRO-2 → 1 rank, and
# 1 rank → 4 ranks ZeRO-3, continue the uninterrupted trajectory (losses within 1e-5). With
# --shuffle on (every row of a micro-batch its own sequence of the permutation) 2 ranks × 1
# equal 1 rank × 2, and a run stopped at step 3 and resumed on the other layout continues it.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
$PY -c "import numpy" 2>/dev/null || missing_dep "python3-numpy for $PY"   # compare-st
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 60000 3
flags="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2
       --seq 16 --steps 6 --lr 3e-3 --warmup 2 --weight-decay 0.1 --grad-clip 0.5 --progress off
       --bucket-mb 0.02 --seed 5"
$LOOM train $flags --grad-accum 4 --metrics "$d/ref4.jsonl"
for z in 0 1 2 3; do
    $MPI -np 2 $LOOM train $flags --grad-accum 2 --dp 2 --zero $z --metrics "$d/n2z$z.jsonl"
    same --tol 1e-5 "dp 2 zero $z" "$d/n2z$z.jsonl" "$d/ref4.jsonl"
    $MPI -np 4 $LOOM train $flags --grad-accum 1 --dp 4 --zero $z --metrics "$d/n4z$z.jsonl"
    same --tol 1e-5 "dp 4 zero $z" "$d/n4z$z.jsonl" "$d/ref4.jsonl"
done

# --shuffle on: the windows are split over the ranks the same way, whatever rows they hold
$LOOM train $flags --shuffle on --grad-accum 2 --save "$d/sh" --save-every 3 --keep 0 \
    --metrics "$d/sh1.jsonl"
$MPI -np 2 $LOOM train $flags --shuffle on --grad-accum 1 --dp 2 --zero 1 --metrics "$d/sh2.jsonl"
same --tol 1e-5 "shuffle on, dp 2 x 1 vs 1 x 2" "$d/sh2.jsonl" "$d/sh1.jsonl"
$MPI -np 2 $LOOM train $flags --shuffle on --grad-accum 1 --dp 2 --resume "$d/sh/step_00000003" \
    --metrics "$d/sh_resumed.jsonl"
tail -n 3 "$d/sh1.jsonl" > "$d/sh1_tail.jsonl"
same --tol 1e-5 "shuffle on, 1 rank -> 2 ranks at step 3" "$d/sh_resumed.jsonl" "$d/sh1_tail.jsonl"

# checkpoints across layouts; the reference is 1 rank x 4 micro-batches for 6 steps
$MPI -np 2 $LOOM train $flags --grad-accum 2 --dp 2 --zero 2 --steps 6 --save "$d/z2" \
    --save-every 3 --keep 0 --metrics "$d/z2.jsonl"
$LOOM train $flags --grad-accum 4 --resume "$d/z2/step_00000003" --metrics "$d/z2to1.jsonl"
tail -n 3 "$d/ref4.jsonl" > "$d/ref4_tail.jsonl"
same --tol 1e-5 "2 ranks ZeRO-2 -> 1 rank" "$d/z2to1.jsonl" "$d/ref4_tail.jsonl"
$LOOM train $flags --grad-accum 4 --steps 6 --save "$d/one" --save-every 3 --keep 0
$MPI -np 4 $LOOM train $flags --grad-accum 1 --dp 4 --zero 3 --resume "$d/one/step_00000003" \
    --metrics "$d/1to4.jsonl"
same --tol 1e-5 "1 rank -> 4 ranks ZeRO-3" "$d/1to4.jsonl" "$d/ref4_tail.jsonl"
# the exported model is the same whichever layout trained it
$MPI -np 4 $LOOM train $flags --grad-accum 1 --dp 4 --zero 3 --export "$d/z3.safetensors"
$LOOM train $flags --grad-accum 4 --export "$d/one.safetensors"
$PY "$(dirname "$0")/torch_ref.py" compare-st "$d/z3.safetensors" "$d/one.safetensors" --tol 1e-5
# `loom export` turns a sharded checkpoint (4 shards) into one safetensors file
$MPI -np 4 $LOOM train $flags --grad-accum 1 --dp 4 --zero 3 --save "$d/z3ck"
$LOOM export "$d/z3ck" -o "$d/z3ck.safetensors"
cmp "$d/z3.safetensors" "$d/z3ck.safetensors"
echo "export of a 4-shard ZeRO-3 checkpoint equals the run's --export"
