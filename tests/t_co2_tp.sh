#!/usr/bin/env bash
# t_co2_tp.sh — CO2 over tensor- and context-parallel workers equals CO2 over whole-model
# workers on the same data, W and tau: a worker is one tp (x cp) group whose ranks hold parts of
# one model copy, its gradients summed and clipped within it, the outer all-reduce of Delta run
# per part over dp. Weight decay, clipping, --grad-accum 2, a vocabulary split over tp and a
# partial last round (7 steps, tau 2) and validation mid-round (a worker's own weights) throughout:
#   * --dp 2 --tp 2 --co2 against --dp 2 --co2, adaptive (the per-tensor norms of the gap
#     penalty summed over tp, replicated tensors once) and constant gap penalty: losses within
#     1e-5 per step (validation too), exported weights within 1e-5; the same with --sp, and --dp 2 --cp 2 --co2;
#   * a round-end checkpoint (step 4) of --dp 2 --tp 2 resumes on the same layout bit-identically
#     (losses and exported bytes of the uninterrupted run); another layout is refused naming it;
#   * negative control: tau 3 must fail the comparison against tau 2.
# (A stop signal on one rank of one tp/cp worker: tests/t_stop.sh co2-tp-*, co2-cp-mid.)
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

for mode in adaptive constant; do
    g="$f --gap-mode $mode --gap-penalty 1.7"
    $MPI -np 2 $LOOM train $g --dp 2 --metrics "$d/ref_$mode.jsonl" --export "$d/ref_$mode.st" 2> /dev/null
    $MPI -np 4 $LOOM train $g --dp 2 --tp 2 --metrics "$d/tp_$mode.jsonl" --export "$d/tp_$mode.st" \
        --save "$d/ck_$mode" --save-every 2 --keep 0 2> /dev/null
    same --tol 1e-5 --wtol 1e-5 "co2 $mode: dp 2 x tp 2 = dp 2" "$d/tp_$mode.jsonl" "$d/ref_$mode.jsonl" \
        "$d/tp_$mode.st" "$d/ref_$mode.st"
done
# the two gap penalties give different runs (the comparisons above can tell them apart)
if same --tol 1e-5 --wtol 1e-5 "adaptive vs constant" "$d/tp_adaptive.jsonl" "$d/tp_constant.jsonl" \
    "$d/tp_adaptive.st" "$d/tp_constant.st" > /dev/null; then
    echo "FAILED: adaptive and constant gap penalty gave the same run"; exit 1
fi
$MPI -np 4 $LOOM train $f --dp 2 --tp 2 --sp --metrics "$d/sp.jsonl" --export "$d/sp.st" 2> /dev/null
same --tol 1e-5 --wtol 1e-5 "co2 adaptive: dp 2 x tp 2 --sp = dp 2" "$d/sp.jsonl" "$d/ref_adaptive.jsonl" \
    "$d/sp.st" "$d/ref_adaptive.st"
$MPI -np 4 $LOOM train $f --dp 2 --cp 2 --metrics "$d/cp.jsonl" --export "$d/cp.st" 2> /dev/null
same --tol 1e-5 --wtol 1e-5 "co2 adaptive: dp 2 x cp 2 = dp 2" "$d/cp.jsonl" "$d/ref_adaptive.jsonl" \
    "$d/cp.st" "$d/ref_adaptive.st"

echo "== a round-end checkpoint resumes on the same layout bit-identically"
ck="$d/ck_adaptive/step_00000004"
for r in 0 1 2 3; do [ -f "$ck/co2_0000$r.bin" ] || { echo "FAILED: no co2_0000$r.bin"; exit 1; }; done
$MPI -np 4 $LOOM train $f --dp 2 --tp 2 --resume "$ck" --metrics "$d/res.jsonl" --export "$d/res.st" 2> /dev/null
awk -F'"step":' '{ split($2, a, ","); if (a[1] + 0 > 4) print }' "$d/tp_adaptive.jsonl" > "$d/tail.jsonl"
same --tol 0 "resumed at step 4" "$d/res.jsonl" "$d/tail.jsonl"
cmp "$d/res.st" "$d/tp_adaptive.st" && echo "resumed export: the uninterrupted run's bytes"
expect_fail "holds the CO2 state of workers of --tp 2 --cp 1 ranks (each rank's own part); this run has --tp 1 --cp 2: resume it with --tp 2 --cp 1" \
    $MPI -np 4 $LOOM train $f --dp 2 --cp 2 --resume "$ck"
expect_fail "holds the CO2 state of 2 workers; resume it with --dp 2" \
    $MPI -np 4 $LOOM train $f --dp 1 --tp 4 --resume "$ck"

echo "== negative control: tau 3 against tau 2"
$MPI -np 4 $LOOM train ${f/--tau 2/--tau 3} --dp 2 --tp 2 --metrics "$d/neg.jsonl" --export "$d/neg.st" 2> /dev/null
if same --tol 1e-5 --wtol 1e-5 "tau 3" "$d/neg.jsonl" "$d/ref_adaptive.jsonl" "$d/neg.st" \
    "$d/ref_adaptive.st" > /dev/null; then
    echo "FAILED: tau 3 passed the comparison against tau 2"; exit 1
fi
echo "negative control: tau 3 fails the comparison"
