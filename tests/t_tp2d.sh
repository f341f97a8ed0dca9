#!/usr/bin/env bash
# t_tp2d.sh — Colossal-AI 2D (SUMMA) tensor parallelism (--tp 4 --tp-mode 2d, a 2x2 grid) under
# mpirun equals the single process on the same data (losses within 1e-5 per step; exported
# weights, validation losses and --dump-grads within 1e-5), with weight decay, clipping and
# grad-accum > 1 throughout, over a vocabulary of 301 (one padding row in the 2d wte blocks):
# tp 4 (T = 100: the blockwise attention path), dp 2 x tp 4 with --recompute, and dp 2 x tp 4
# with --zero 1 (the moments sharded over dp: half of zero 0's; its --dump-grads too). ZeRO 2
# and 3 with 2d: t_tp2d_zero.sh.
# Checkpoints stay in the whole layout: a 2d checkpoint and a dp 2 x 2d ZeRO-1 one resume on 1
# rank and a 1-rank one in 2d and in dp 2 x 2d ZeRO 1, each against the uninterrupted single
# process's last steps, and 2d -> 2d bit for bit; `loom export`
# of a 2d checkpoint equals the run's export. The summary's communication line is checked
# against its own table. Negative control: a 2d run on other data must fail the comparison. Bad
# layouts and flags that 2d does not run with are clear errors naming the numbers.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
$PY -c "import numpy" 2>/dev/null || missing_dep "python3-numpy for $PY"   # compare-st
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/v300.bin" 300 60000 3
REF="$PY $(dirname "$0")/torch_ref.py"
common="--layers 2 --heads 4 --dim 32 --lr 3e-3 --warmup 2 --weight-decay 0.1 --grad-clip 0.5
        --progress off --seed 5 --batch 2 --steps 6"
f="--data $d/v300.bin --vocab 301 --block-size 128 --seq 100 $common"   # 2 x 151 rows: 1 padding
t2="--tp 4 --tp-mode 2d"

val="--val-data $d/v300.bin --val-every 3 --val-windows 2"
$LOOM train $f --grad-accum 4 --metrics "$d/ref.jsonl" --export "$d/ref.st" \
    --save "$d/one" --save-every 3 --keep 0 $val --dump-grads "$d/ref.grads.st"
$MPI -np 4 $LOOM train $f --grad-accum 4 $t2 --metrics "$d/2d.jsonl" --export "$d/2d.st" \
    --save "$d/c2d" --save-every 3 --keep 0 $val --dump-grads "$d/2d.grads.st" 2> "$d/2d.err"
same --tol 1e-5 "tp 4 (2d)" "$d/2d.jsonl" "$d/ref.jsonl" "$d/2d.st" "$d/ref.st"
$REF compare-st "$d/2d.grads.st" "$d/ref.grads.st" --tol 1e-5 # the last step's gradients
$PY - "$d/2d.jsonl" "$d/ref.jsonl" <<'PY'   # validation losses at steps 3 and 6
import json, sys
a, b = ([(r["step"], r["val_loss"]) for r in map(json.loads, open(p)) if "val_loss" in r]
        for p in sys.argv[1:])
assert len(a) == 2 and [s for s, _ in a] == [s for s, _ in b], (a, b)
worst = max(abs(x - y) for (_, x), (_, y) in zip(a, b))
assert worst <= 1e-5, (a, b)
print(f"validation losses {a}: max difference {worst:.2g}, tolerance 1e-5")
PY
$MPI -np 8 $LOOM train $f --grad-accum 2 --dp 2 $t2 --recompute --metrics "$d/dt.jsonl" \
    --export "$d/dt.st" 2> "$d/rc.err"
same --tol 1e-5 "dp 2 x tp 4 (2d) --recompute" "$d/dt.jsonl" "$d/ref.jsonl" "$d/dt.st" "$d/ref.st"
z1="--grad-accum 2 --dp 2 $t2 --zero 1"
$MPI -np 8 $LOOM train $f $z1 --metrics "$d/z1.jsonl" --export "$d/z1.st" --save "$d/cz1" \
    --save-every 3 --keep 0 --dump-grads "$d/z1.grads.st" 2> "$d/z1.err"
same --tol 1e-5 "dp 2 x tp 4 (2d) --zero 1" "$d/z1.jsonl" "$d/ref.jsonl" "$d/z1.st" "$d/ref.st"
$REF compare-st "$d/z1.grads.st" "$d/ref.grads.st" --tol 1e-5
$PY - "$d/rc.err" "$d/z1.err" <<'PY'   # ZeRO 1 holds half of zero 0's moments per rank
import re, sys
z0, z1 = (float(re.search(r"AdamW moments ([0-9.]+) MiB", open(p).read()).group(1))
          for p in sys.argv[1:])
assert "(zero 1 over dp 2)" in open(sys.argv[2]).read()
assert abs(z1 - z0 / 2) <= 0.05 * z0, (z0, z1)
print(f"AdamW moments per rank: zero 0 {z0} MiB, zero 1 {z1} MiB")
PY

# the summary: what the layers received per micro-batch equals the SUMMA table it prints
table() { tp2d_table "$1"; } # tests/lib.sh
table "$d/2d.err"
table "$d/rc.err"

# negative control: other data must not pass the same comparison
mkshard "$d/other.bin" 300 60000 9
$MPI -np 4 $LOOM train ${f/v300.bin/other.bin} --grad-accum 4 $t2 --metrics "$d/neg.jsonl"
if same --tol 1e-5 "negative control" "$d/neg.jsonl" "$d/ref.jsonl" > /dev/null; then
    echo "FAILED: the comparison passed on other data"; exit 1
fi
echo "negative control: other data fails the comparison"

# checkpoints across layouts, against the uninterrupted single process's last 3 steps
grep -v val_loss "$d/ref.jsonl" | tail -n 3 > "$d/tail.jsonl"
$LOOM train $f --grad-accum 4 --resume "$d/c2d/step_00000003" --metrics "$d/2dto1.jsonl" \
    --export "$d/2dto1.st"
same --tol 1e-5 "2d checkpoint -> 1 rank" "$d/2dto1.jsonl" "$d/tail.jsonl" "$d/2dto1.st" "$d/ref.st"
$LOOM train $f --grad-accum 4 --resume "$d/cz1/step_00000003" --metrics "$d/z1to1.jsonl" \
    --export "$d/z1to1.st"
same --tol 1e-5 "dp 2 x 2d ZeRO-1 checkpoint -> 1 rank" "$d/z1to1.jsonl" "$d/tail.jsonl" \
    "$d/z1to1.st" "$d/ref.st"
$MPI -np 8 $LOOM train $f $z1 --resume "$d/one/step_00000003" --metrics "$d/1toz1.jsonl" \
    --export "$d/1toz1.st"
same --tol 1e-5 "1-rank checkpoint -> dp 2 x 2d ZeRO 1" "$d/1toz1.jsonl" "$d/tail.jsonl" \
    "$d/1toz1.st" "$d/ref.st"
$MPI -np 4 $LOOM train $f --grad-accum 4 $t2 --resume "$d/one/step_00000003" \
    --metrics "$d/1to2d.jsonl" --export "$d/1to2d.st"
same --tol 1e-5 "1-rank checkpoint -> 2d" "$d/1to2d.jsonl" "$d/tail.jsonl" "$d/1to2d.st" "$d/ref.st"
$MPI -np 4 $LOOM train $f --grad-accum 4 $t2 --resume "$d/c2d/step_00000003" \
    --metrics "$d/2dto2d.jsonl" --export "$d/2dto2d.st"
$REF compare-st "$d/2dto2d.st" "$d/2d.st" --tol 0   # 2d -> 2d: bit for bit
$LOOM export "$d/c2d" -o "$d/c2d.st"
$REF compare-st "$d/c2d.st" "$d/2d.st" --tol 0

# bad layouts and flags 2d does not run with
g="--data $d/v300.bin --vocab 300 --block-size 32 --seq 16 --layers 1 --heads 4 --dim 32
   --batch 2 --steps 1 --progress off"
expect_fail "needs --tp = q*q with q >= 2 (a q x q grid: 4, 9, 16, ...; got --tp 3)" \
    $MPI -np 3 $LOOM train $g --tp 3 --tp-mode 2d
expect_fail "--batch 3 must be a multiple of q = 2" \
    $MPI -np 4 $LOOM train ${g/--batch 2/--batch 3} $t2
expect_fail "q must divide --dim 36 and --heads 3" \
    $MPI -np 4 $LOOM train ${g/--heads 4 --dim 32/--heads 3 --dim 36} $t2
expect_fail "with --sp: not available" $MPI -np 4 $LOOM train $g $t2 --sp
# --cp runs (tests/t_tp2d_cp.sh) with ZeRO 0
expect_fail "with --pp 2: not available" $MPI -np 8 $LOOM train $g $t2 --pp 2
# --co2 runs (tests/t_co2_tp2d.sh), with its outer state unsharded
expect_fail "--co2 with --zero 1: CO2 over 2D grids keeps its outer state unsharded (--zero 0)" \
    $MPI -np 8 $LOOM train $g $t2 --dp 2 --co2 --zero 1
# --offload runs (tests/t_offload_tp2d.sh) with ZeRO 0 only
expect_fail "--offload with --zero 1: a 2D tensor-parallel part swaps its blocks with ZeRO 0" \
    $MPI -np 8 $LOOM train $g $t2 --dp 2 --zero 1 --offload disk --offload-dir "$d/off" --fast-mem 1G
