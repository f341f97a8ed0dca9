#!/usr/bin/env bash
# serial: a stop within --stop-grace
# t_co2_tp2d.sh — CO2 over 2D tensor-parallel workers (--dp 2 --tp 4 --tp-mode 2d --co2, 8 ranks)
# equals CO2 over whole-model workers (--dp 2 --co2) on the same data, W and tau: a worker is one
# 2x2 SUMMA grid whose ranks hold blocks of one model copy, its gradients summed and clipped
# within it, the outer all-reduce of Delta run per block over dp (the ranks holding the same
# block). Weight decay, clipping, --grad-accum 2, a padded vocabulary (300 over q = 2), a partial
# last round (7 steps, tau 2) and validation mid-round (a worker's own weights) throughout:
#   * adaptive gap penalty (per-tensor norms summed over the grid, column-replicated tensors
#     once) and constant: losses within 1e-5 per step (validation too), exported weights 1e-5;
#   * a round-end checkpoint (step 4) resumes bit-identically (losses and exported bytes); a 1D
#     --tp 4 run is refused naming --tp-mode 2d, and a 1D run's checkpoint under 2D likewise;
#   * a stop signal on one rank of one grid, with no time left for the round end: every rank
#     saves mid-round (its own weights and the anchor) and the resume is bit-identical;
#   * negative control: tau 3 must fail the comparison against tau 2.
# asan: skip
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
$PY -c "import numpy" 2>/dev/null || missing_dep "python3-numpy for $PY" # same (weights)
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/v300.bin" 300 60000 3
f="--data $d/v300.bin --vocab 300 --block-size 128 --seq 32 --layers 2 --heads 4 --dim 32
   --lr 3e-3 --warmup 2 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5 --batch 2
   --steps 7 --grad-accum 2 --co2 --tau 2 --outer-lr 0.9 --outer-momentum 0.6 --outer-clip 0.05
   --val-data $d/v300.bin --val-windows 2 --val-every 3"
t2="--dp 2 --tp 4 --tp-mode 2d"

for mode in adaptive constant; do
    g="$f --gap-mode $mode --gap-penalty 1.7"
    $MPI -np 2 $LOOM train $g --dp 2 --metrics "$d/ref_$mode.jsonl" --export "$d/ref_$mode.st" 2> /dev/null
    $MPI -np 8 $LOOM train $g $t2 --metrics "$d/2d_$mode.jsonl" --export "$d/2d_$mode.st" \
        --save "$d/ck_$mode" --save-every 2 --keep 0 2> /dev/null
    same --tol 1e-5 --wtol 1e-5 "co2 $mode: dp 2 x 2d tp 4 = dp 2" "$d/2d_$mode.jsonl" \
        "$d/ref_$mode.jsonl" "$d/2d_$mode.st" "$d/ref_$mode.st"
done
if same --tol 1e-5 --wtol 1e-5 "adaptive vs constant" "$d/2d_adaptive.jsonl" "$d/2d_constant.jsonl" \
    "$d/2d_adaptive.st" "$d/2d_constant.st" > /dev/null; then
    echo "FAILED: adaptive and constant gap penalty gave the same run"; exit 1
fi

echo "== a round-end checkpoint resumes bit-identically"
ck="$d/ck_adaptive/step_00000004"
for r in 0 1 2 3 4 5 6 7; do
    [ -f "$ck/co2_0000$r.bin" ] || { echo "FAILED: no co2_0000$r.bin"; exit 1; }
done
$MPI -np 8 $LOOM train $f $t2 --resume "$ck" --metrics "$d/res.jsonl" --export "$d/res.st" 2> /dev/null
awk -F'"step":' '{ split($2, a, ","); if (a[1] + 0 > 4) print }' "$d/2d_adaptive.jsonl" > "$d/tail.jsonl"
same --tol 0 "resumed at step 4" "$d/res.jsonl" "$d/tail.jsonl"
cmp "$d/res.st" "$d/2d_adaptive.st" && echo "resumed export: the uninterrupted run's bytes"
expect_fail "holds the CO2 state of workers of --tp 4 --tp-mode 2d ranks (each rank's own part); this run has --tp-mode 1d: resume it with --tp 4 --tp-mode 2d" \
    $MPI -np 8 $LOOM train $f --dp 2 --tp 4 --resume "$ck"
$MPI -np 8 $LOOM train ${f/--steps 7/--steps 3} --dp 2 --tp 4 --save "$d/ck1d" --save-every 2 \
    --keep 0 2> /dev/null
expect_fail "holds the CO2 state of workers of --tp 4 --tp-mode 1d ranks (each rank's own part); this run has --tp-mode 2d: resume it with --tp 4 --tp-mode 1d" \
    $MPI -np 8 $LOOM train $f $t2 --resume "$d/ck1d/step_00000002"

echo "== a stop with no time for the round end saves mid-round, and resumes bit-identically"
m="${f/--steps 7/--steps 205}"
m="${m/--tau 2/--tau 200} --stop-grace 2 --val-every 0"
$MPI -np 8 $LOOM train $m $t2 --metrics "$d/full.jsonl" --export "$d/full.st" 2> /dev/null
rc=0
LOOM_FAULT_SIGNAL=5:5 $MPI -np 8 -x LOOM_FAULT_SIGNAL $LOOM train $m $t2 --save "$d/mid" \
    --metrics "$d/a.jsonl" > "$d/a.log" 2>&1 || rc=$?
[ "$rc" = 8 ] || { echo "FAILED: stopped run exit $rc, want 8"; tail -20 "$d/a.log"; exit 1; }
at=$(sed 's/^step_0*//' "$d/mid/latest")
[ $((at % 200)) != 0 ] || { echo "FAILED: saved step $at, a round end (want mid-round)"; exit 1; }
$MPI -np 8 $LOOM train $m $t2 --resume "$d/mid" --metrics "$d/b.jsonl" --export "$d/b.st" 2> /dev/null
awk -F'"step":' -v s="$at" '{ split($2, a, ","); if (a[1] + 0 > s) print }' "$d/full.jsonl" > "$d/ftail.jsonl"
same --tol 0 "resumed mid-round at step $at" "$d/b.jsonl" "$d/ftail.jsonl"
cmp "$d/b.st" "$d/full.st" && echo "mid-round resume: the uninterrupted run's bytes"

echo "== negative control: tau 3 against tau 2"
$MPI -np 8 $LOOM train ${f/--tau 2/--tau 3} $t2 --metrics "$d/neg.jsonl" --export "$d/neg.st" 2> /dev/null
if same --tol 1e-5 --wtol 1e-5 "tau 3" "$d/neg.jsonl" "$d/ref_adaptive.jsonl" "$d/neg.st" \
    "$d/ref_adaptive.st" > /dev/null; then
    echo "FAILED: tau 3 passed the comparison against tau 2"; exit 1
fi
echo "negative control: tau 3 fails the comparison"
