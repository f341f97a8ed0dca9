#!/usr/bin/env bash
# t_cp.sh — context parallelism (--cp, ring attention) under mpirun equals the single process
# on the same data (losses within 1e-5 per step, exported weights within 1e-5): cp 2 (chunks of
# 68 tokens: two query tiles of the ring kernels), cp 4, cp 2 x tp 2 (and + sp), dp 2 x cp 2
# (ZeRO 1 and 2), cp 2 --recompute; weight decay, clipping and grad-accum > 1 throughout, validation losses
# too. Checkpoints resume across layouts (cp 2 -> 1 rank, 1 rank -> cp 2, dp 2 x cp 2 ZeRO-1
# -> cp 4). Negative control: a cp run on other data must fail the comparison. Bad layouts
# are clear errors naming the numbers.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
$PY -c "import numpy" 2>/dev/null || missing_dep "python3-numpy for $PY"   # compare-st
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/v300.bin" 300 60000 3
mkshard "$d/val.bin" 300 20000 4
val() { # the final validation loss a run printed
    grep -o 'val loss [0-9.]*' "$1" | tail -1 | cut -d' ' -f3
}
f="--data $d/v300.bin --vocab 300 --block-size 272 --seq 272 --layers 2 --heads 4 --dim 32
   --lr 3e-3 --warmup 2 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5 --batch 2
   --steps 6 --grad-accum 2 --val-data $d/val.bin --val-windows 2"

$LOOM train $f --metrics "$d/ref.jsonl" --export "$d/ref.st" --save "$d/one" --save-every 3 \
    --keep 0 2> "$d/ref.err"
$MPI -np 2 $LOOM train $f --cp 2 --metrics "$d/cp2.jsonl" --export "$d/cp2.st" \
    --save "$d/c2" --save-every 3 --keep 0 2> "$d/cp2.err"
same --tol 1e-5 "cp 2" "$d/cp2.jsonl" "$d/ref.jsonl" "$d/cp2.st" "$d/ref.st"
grep -F "sent around the ring per layer" "$d/cp2.err"
$PY - "$(val "$d/cp2.err")" "$(val "$d/ref.err")" <<'PY'
import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
print(f"cp 2 validation loss {a} vs one process {b}")
assert abs(a - b) <= 1e-4, "validation losses differ"
PY
$MPI -np 4 $LOOM train $f --cp 4 --metrics "$d/cp4.jsonl" --export "$d/cp4.st"
same --tol 1e-5 "cp 4" "$d/cp4.jsonl" "$d/ref.jsonl" "$d/cp4.st" "$d/ref.st"
$MPI -np 4 $LOOM train $f --cp 2 --tp 2 --metrics "$d/ct.jsonl" --export "$d/ct.st"
same --tol 1e-5 "cp 2 x tp 2" "$d/ct.jsonl" "$d/ref.jsonl" "$d/ct.st" "$d/ref.st"
$MPI -np 4 $LOOM train $f --cp 2 --tp 2 --sp --metrics "$d/cts.jsonl" --export "$d/cts.st"
same --tol 1e-5 "cp 2 x tp 2 + sp" "$d/cts.jsonl" "$d/ref.jsonl" "$d/cts.st" "$d/ref.st"
$MPI -np 4 $LOOM train ${f/--grad-accum 2/--grad-accum 1} --dp 2 --cp 2 --zero 1 \
    --metrics "$d/dc.jsonl" --save "$d/cdc" --save-every 3 --keep 0
same --tol 1e-5 "dp 2 x cp 2, ZeRO-1" "$d/dc.jsonl" "$d/ref.jsonl"
$MPI -np 4 $LOOM train ${f/--grad-accum 2/--grad-accum 1} --dp 2 --cp 2 --zero 2 \
    --metrics "$d/dc2.jsonl" --export "$d/dc2.st"
same --tol 1e-5 "dp 2 x cp 2, ZeRO-2" "$d/dc2.jsonl" "$d/ref.jsonl" "$d/dc2.st" "$d/ref.st"
$MPI -np 2 $LOOM train $f --cp 2 --recompute --metrics "$d/rc.jsonl"
same --tol 1e-5 "cp 2 --recompute" "$d/rc.jsonl" "$d/ref.jsonl"

# negative control: other data must not pass the same comparison
mkshard "$d/other.bin" 300 60000 9
$MPI -np 2 $LOOM train ${f/v300.bin/other.bin} --cp 2 --metrics "$d/neg.jsonl"
if same --tol 1e-5 "negative control" "$d/neg.jsonl" "$d/ref.jsonl" > /dev/null; then
    echo "FAILED: the comparison passed on other data"; exit 1
fi
echo "negative control: other data fails the comparison"

# checkpoints across layouts, against the uninterrupted single process's last 3 steps
grep -v val_loss "$d/ref.jsonl" | tail -n 3 > "$d/tail.jsonl"
$LOOM train $f --resume "$d/c2/step_00000003" --metrics "$d/c2to1.jsonl"
same --tol 1e-5 "cp 2 checkpoint -> 1 rank" "$d/c2to1.jsonl" "$d/tail.jsonl"
$MPI -np 2 $LOOM train $f --cp 2 --resume "$d/one/step_00000003" --metrics "$d/1to2.jsonl"
same --tol 1e-5 "1-rank checkpoint -> cp 2" "$d/1to2.jsonl" "$d/tail.jsonl"
$MPI -np 4 $LOOM train $f --cp 4 --resume "$d/cdc/step_00000003" --metrics "$d/dcto4.jsonl"
same --tol 1e-5 "dp 2 x cp 2 ZeRO-1 checkpoint -> cp 4" "$d/dcto4.jsonl" "$d/tail.jsonl"

# bad layouts
expect_fail "--cp 2 cuts every sequence into 2 x 2 = 4 chunks: --seq 270 is not a multiple of 4" \
    $MPI -np 2 $LOOM train ${f/--seq 272/--seq 270} --cp 2
expect_fail "--dump-grads with --zero 3" $MPI -np 2 $LOOM train $f --cp 2 --zero 3 \
    --dump-grads "$d/g.bin"
expect_fail "--co2 with --zero 1: CO2 over tensor- or context-parallel workers" \
    $MPI -np 2 $LOOM train $f --cp 2 --co2 --zero 1
expect_fail "--seq 66 (a context-parallel rank's tokens) is not divisible by --tp 4" \
    $MPI -np 8 $LOOM train ${f/--seq 272/--seq 132} --cp 2 --tp 4 --sp
# --cp with --tp-mode 2d runs (tests/t_tp2d_cp.sh)
expect_fail "--offload with --zero 1: a tensor- or context-parallel part swaps its blocks with ZeRO 0" \
    $MPI -np 2 $LOOM train $f --cp 2 --zero 1 --offload disk --offload-dir "$d/off" --fast-mem 64M
expect_fail "more than one message carries" $MPI -np 2 $LOOM train --data "$d/v300.bin" --vocab 300 \
    --layers 1 --heads 4 --dim 65536 --block-size 256 --seq 256 --batch 128 --cp 2 --steps 1
