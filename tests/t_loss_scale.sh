#!/usr/bin/env bash
# t_loss_scale.sh — dynamic loss scaling (--loss-scale, optim/loss_scale.h) on the CPU in fp32,
# where scaling by a power of two is exact:
#   1. --loss-scale dynamic (interval 2: the scale doubles during the run) equals the unscaled
#      run bit for bit: every logged loss and grad norm, and the exported weights;
#   2. an overflow (LOOM_FAULT_OVERFLOW=3: step 3's backward starts from +inf) is skipped and
#      halves the scale: the weights after steps 1-3 equal those after steps 1-2 (constant
#      learning rate), the metrics
#      say the scale and the skip; without scaling the same fault stops the run with exit 4
#      (the negative control: the fault is a real non-finite gradient);
#   3. the scale and its clean-step count ride in the checkpoint: a run resumed at step 3
#      equals the uninterrupted one (losses, scales, weights);
#   4. --dp 2 --zero 1 with scaling equals it without (under mpirun);
#   5. bad values and layouts it does not run with are refused naming the flag.
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 20000 3
base="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 16 --batch 4
      --seq 16 --lr 3e-3 --progress off --seed 11"

echo "== 1. dynamic scaling equals no scaling (fp32)"
$LOOM train $base --steps 8 --metrics "$d/plain.jsonl" --export "$d/plain.safetensors"
$LOOM train $base --steps 8 --loss-scale dynamic --loss-scale-interval 2 \
    --metrics "$d/ls.jsonl" --export "$d/ls.safetensors" 2>"$d/err1"
cat "$d/err1"
diff <(metric_cols "$d/plain.jsonl" loss grad_norm) <(metric_cols "$d/ls.jsonl" loss grad_norm)
cmp "$d/plain.safetensors" "$d/ls.safetensors"
metric_cols "$d/ls.jsonl" loss_scale | tr '\n' ' '; echo
[ "$(metric_cols "$d/ls.jsonl" loss_scale | tail -1 | cut -d" " -f2)" = 524288 ] # 2^16 · 2^3 at step 8
echo "losses, norms and weights identical; the scale grew 65536 -> 524288 (step 8)"

echo "== 2. an overflow is skipped and halves the scale"
$LOOM train $base --steps 2 --lr-schedule constant --export "$d/two.safetensors"
LOOM_FAULT_OVERFLOW=3 $LOOM train $base --steps 3 --lr-schedule constant --loss-scale dynamic \
    --metrics "$d/ov.jsonl" --export "$d/three.safetensors" 2>"$d/err2"
cat "$d/err2"
cmp "$d/two.safetensors" "$d/three.safetensors"
grep -q "step 3: gradient overflow at loss scale 65536; update skipped, scale now 32768" "$d/err2"
grep -q "loss scale 32768 at the end; 1 steps skipped for gradient overflow" "$d/err2"
LOOM_FAULT_OVERFLOW=3 $LOOM train $base --steps 5 --loss-scale dynamic --metrics "$d/ov5.jsonl"
[ "$(metric_cols "$d/ov5.jsonl" loss_scale overflow_skips | tr '\n' ' ')" = \
  "1 65536 0 2 65536 0 4 32768 1 5 32768 1 " ]
set +e
LOOM_FAULT_OVERFLOW=3 $LOOM train $base --steps 5 2>"$d/err3"; rc=$?
set -e
[ "$rc" -eq 4 ] || { cat "$d/err3"; echo "without scaling: expected exit 4, got $rc"; exit 1; }
echo "step 3 skipped (weights as after step 2), scale 65536 -> 32768; unscaled: exit 4"

echo "== 3. resumed at step 3 equals the uninterrupted run"
full="--steps 6 --lr-schedule constant --loss-scale dynamic --loss-scale-interval 2"
LOOM_FAULT_OVERFLOW=2 $LOOM train $base $full --metrics "$d/u.jsonl" --export "$d/u.safetensors"
LOOM_FAULT_OVERFLOW=2 $LOOM train $base $full --save "$d/ck" --steps 3 --metrics "$d/r.jsonl"
grep -A2 '"loss_scale"' "$d/ck/step_00000003/checkpoint.json" | tr -d ' \n'; echo
$LOOM train $base $full --resume "$d/ck" --metrics "$d/r.jsonl" --export "$d/r.safetensors"
diff <(metric_cols "$d/u.jsonl" loss loss_scale) <(metric_cols "$d/r.jsonl" loss loss_scale)
cmp "$d/u.safetensors" "$d/r.safetensors"
echo "losses, scales and weights identical across the resume"

echo "== 4. --dp 2 --zero 1"
need_mpi
$MPI -np 2 $LOOM train $base --dp 2 --zero 1 --steps 4 --export "$d/dp.safetensors"
$MPI -np 2 $LOOM train $base --dp 2 --zero 1 --steps 4 --loss-scale dynamic \
    --loss-scale-interval 1 --export "$d/dpls.safetensors"
cmp "$d/dp.safetensors" "$d/dpls.safetensors"
echo "dp 2 zero 1 with scaling (doubling every step) equals without"

echo "== 5. refusals"
expect_fail "--loss-scale '3'" $LOOM train $base --steps 1 --loss-scale 3
expect_fail "--loss-scale-init 3" $LOOM train $base --steps 1 --loss-scale dynamic --loss-scale-init 3
expect_fail "--dtype fp16" $LOOM train $base --steps 1 --dtype fp16
expect_fail "not with --tp yet" $MPI -np 2 $LOOM train $base --tp 2 --steps 1 --loss-scale dynamic
