#!/usr/bin/env bash
# serial: a stop within --stop-grace
# t_co2_pp.sh — CO2 over pipeline workers equals CO2 over whole-model workers on the same data,
# W and tau: a worker is one pipeline (its stages on pp ranks), its gradients never summed over
# dp, its norm and clipping its own; the outer rule runs per stage over dp. Weight decay,
# clipping, --grad-accum 2, a partial last round (7 steps, tau 2) and validation mid-round (a
# worker's own weights) throughout:
#   * --dp 2 --pp 2 --co2 (gpipe and 1f1b) against --dp 2 --co2, adaptive and constant gap
#     penalty: losses (validation too) within 1e-5 per step, exported weights within 1e-5;
#   * a round-end checkpoint (step 4) resumes on the same layout to the uninterrupted run's
#     bytes; another layout is refused naming it; 2bw and --zero are refused; a stop that falls
#     mid-round refuses its save clearly (a round-end stop: tests/t_stop.sh co2-pp-one);
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
# val A.jsonl B.jsonl: the same validation steps, losses within 1e-5 (mid-round: worker 0's own)
val() {
    paste -d' ' <(grep val_loss "$1" | tr -c '0-9.\n' ' ') <(grep val_loss "$2" | tr -c '0-9.\n' ' ') |
        awk '{ d = $2 - $4; if ($1 != $3 || d > 1e-5 || d < -1e-5) bad = 1; n++ }
             END { if (bad || !n) { print "FAILED: validation differs"; exit 1 } }'
}

for mode in adaptive constant; do
    g="$f --gap-mode $mode --gap-penalty 1.7"
    $MPI -np 2 $LOOM train $g --dp 2 --metrics "$d/ref_$mode.jsonl" --export "$d/ref_$mode.st" 2> /dev/null
    for sch in gpipe 1f1b; do
        $MPI -np 4 $LOOM train $g --dp 2 --pp 2 --schedule $sch --metrics "$d/${sch}_$mode.jsonl" \
            --export "$d/${sch}_$mode.st" --save "$d/ck_${sch}_$mode" --save-every 2 --keep 0 2> /dev/null
        same --tol 1e-5 --wtol 1e-5 "co2 $mode: dp 2 x pp 2 ($sch) = dp 2" "$d/${sch}_$mode.jsonl" \
            "$d/ref_$mode.jsonl" "$d/${sch}_$mode.st" "$d/ref_$mode.st"
        val "$d/${sch}_$mode.jsonl" "$d/ref_$mode.jsonl"
    done
done
# the two gap penalties give different runs (the comparisons above can tell them apart)
if same --tol 1e-5 --wtol 1e-5 "adaptive vs constant" "$d/gpipe_adaptive.jsonl" "$d/gpipe_constant.jsonl" \
    "$d/gpipe_adaptive.st" "$d/gpipe_constant.st" > /dev/null; then
    echo "FAILED: adaptive and constant gap penalty gave the same run"; exit 1
fi

echo "== a round-end checkpoint resumes on the same layout bit-identically"
ck="$d/ck_1f1b_adaptive/step_00000004"
for r in 0 1 2 3; do [ -f "$ck/co2_0000$r.bin" ] || { echo "FAILED: no co2_0000$r.bin"; exit 1; }; done
$MPI -np 4 $LOOM train $f --dp 2 --pp 2 --schedule 1f1b --resume "$ck" --metrics "$d/res.jsonl" \
    --export "$d/res.st" 2> /dev/null
awk -F'"step":' '{ split($2, a, ","); if (a[1] + 0 > 4) print }' "$d/1f1b_adaptive.jsonl" > "$d/tail.jsonl"
same --tol 0 "resumed at step 4" "$d/res.jsonl" "$d/tail.jsonl"
cmp "$d/res.st" "$d/1f1b_adaptive.st" && echo "resumed export: the uninterrupted run's bytes"
expect_fail "holds the CO2 state of workers of --pp 2 stages (each rank's own stage); this run has --pp 1: resume it with --pp 2" \
    $MPI -np 2 $LOOM train $f --dp 2 --resume "$ck"
expect_fail "--co2 with --schedule 2bw: 2bw applies every update one batch late" \
    $MPI -np 4 $LOOM train $f --dp 2 --pp 2 --schedule 2bw
expect_fail "--co2 with --zero 1: CO2 over pipeline workers keeps every stage's outer state unsharded" \
    $MPI -np 4 $LOOM train $f --dp 2 --pp 2 --zero 1

echo "== a stop that cannot reach the round end: its mid-round save is refused (no hang)"
rc=0
LOOM_FAULT_SIGNAL=3:3 $MPI -np 4 -x LOOM_FAULT_SIGNAL $LOOM train ${f/--steps 7/--steps 1005} --tau 1000 \
    --stop-grace 2 --dp 2 --pp 2 --save "$d/ck_mid" > "$d/mid.log" 2>&1 || rc=$?
grep -q "CO2 over pipeline workers saves only at round ends" "$d/mid.log" && [ "$rc" != 0 ] ||
    { echo "FAILED: mid-round stop (exit $rc)"; tail "$d/mid.log"; exit 1; }
echo "mid-round stop: exit $rc, the save refused with its reason"

echo "== negative control: tau 3 against tau 2"
$MPI -np 4 $LOOM train ${f/--tau 2/--tau 3} --dp 2 --pp 2 --metrics "$d/neg.jsonl" --export "$d/neg.st" 2> /dev/null
if same --tol 1e-5 --wtol 1e-5 "tau 3" "$d/neg.jsonl" "$d/ref_adaptive.jsonl" "$d/neg.st" \
    "$d/ref_adaptive.st" > /dev/null; then
    echo "FAILED: tau 3 passed the comparison against tau 2"; exit 1
fi
echo "negative control: tau 3 fails the comparison"
