#!/usr/bin/env bash
# t_sp.sh — Megatron sequence parallelism (--sp with --tp N) under mpirun equals the single
# process on the same data (losses within 1e-5 per step, exported weights within 1e-5): tp 2,
# tp 4, dp 2 x tp 2 with ZeRO-1, tp 2 --recompute; weight decay, clipping and grad-accum > 1
# throughout, batch 2 (the shards' rows are reordered across sequences) and T = 100 (the
# blockwise attention path); validation under sp equals the single process's. Checkpoints
# resume across layouts (tp 2 + sp -> 1 rank, 1 rank -> tp 2 + sp). The run's summary shows the
# residual regions' memory divided by tp. Negative control: an sp run on other data must fail
# the comparison. Bad layouts are clear errors naming the numbers.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
$PY -c "import numpy" 2>/dev/null || missing_dep "python3-numpy for $PY" # compare-st
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/v300.bin" 300 60000 3
mkshard "$d/val.bin" 300 20000 4
f="--data $d/v300.bin --vocab 300 --block-size 128 --seq 100 --layers 2 --heads 4 --dim 32
   --lr 3e-3 --warmup 2 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5 --batch 2
   --steps 6"
v="--val-data $d/val.bin --val-every 3 --val-windows 2"

$LOOM train $f $v --grad-accum 4 --metrics "$d/ref.jsonl" --export "$d/ref.st" \
    --save "$d/one" --save-every 3 --keep 0
$MPI -np 2 $LOOM train $f $v --grad-accum 4 --tp 2 --sp --metrics "$d/sp2.jsonl" \
    --export "$d/sp2.st" --save "$d/c2" --save-every 3 --keep 0 2> "$d/sp2.log"
same --tol 1e-5 "tp 2 + sp" "$d/sp2.jsonl" "$d/ref.jsonl" "$d/sp2.st" "$d/ref.st"
$PY - "$d/sp2.jsonl" "$d/ref.jsonl" <<'PY' # validation losses under sp equal the single process's
import json, sys
val = [[r["val_loss"] for r in map(json.loads, open(p)) if "val_loss" in r] for p in sys.argv[1:]]
assert len(val[0]) == 2 and len(val[0]) == len(val[1]), val
d = max(abs(a - b) for a, b in zip(*val))
assert d <= 1e-5, val
print(f"validation under tp 2 + sp: {len(val[0])} evaluations, max difference {d:.2e}")
PY
$MPI -np 4 $LOOM train $f --grad-accum 4 --tp 4 --sp --metrics "$d/sp4.jsonl" \
    --export "$d/sp4.st" 2> "$d/sp4.log"
same --tol 1e-5 "tp 4 + sp" "$d/sp4.jsonl" "$d/ref.jsonl" "$d/sp4.st" "$d/ref.st"
$MPI -np 4 $LOOM train $f --grad-accum 2 --dp 2 --tp 2 --sp --zero 1 --metrics "$d/z1.jsonl" \
    --export "$d/z1.st"
same --tol 1e-5 "dp 2 x tp 2 + sp, ZeRO-1" "$d/z1.jsonl" "$d/ref.jsonl" "$d/z1.st" "$d/ref.st"
$MPI -np 2 $LOOM train $f --grad-accum 4 --tp 2 --sp --recompute --metrics "$d/rc.jsonl"
same --tol 1e-5 "tp 2 + sp --recompute" "$d/rc.jsonl" "$d/ref.jsonl"

# the summary: with sp a rank holds less activation memory than plain tp 2, and reports the
# all-gathered and reduce-scattered volume
$MPI -np 2 $LOOM train $f --steps 1 --tp 2 2> "$d/tp2.log" > /dev/null
act() { grep -o 'activations [0-9.]* MiB' "$1" | grep -o '[0-9.]*'; }
grep -q "sp: all-gathered" "$d/sp2.log" || { echo "FAILED: no sp volume in the summary"; exit 1; }
$PY -c "import sys; a, b = map(float, sys.argv[1:]); assert a < b, (a, b)" \
    "$(act "$d/sp2.log")" "$(act "$d/tp2.log")"
echo "activations per rank: tp 2 $(act "$d/tp2.log") MiB, tp 2 + sp $(act "$d/sp2.log") MiB"

# negative control: other data must not pass the same comparison
mkshard "$d/other.bin" 300 60000 9
$MPI -np 2 $LOOM train ${f/v300.bin/other.bin} --grad-accum 4 --tp 2 --sp \
    --metrics "$d/neg.jsonl"
if same --tol 1e-5 "negative control" "$d/neg.jsonl" "$d/ref.jsonl" > /dev/null; then
    echo "FAILED: the comparison passed on other data"; exit 1
fi
echo "negative control: other data fails the comparison"

# checkpoints across layouts, against the uninterrupted single process's last 3 steps
grep -v val_loss "$d/ref.jsonl" | tail -n 3 > "$d/tail.jsonl"
$LOOM train $f --grad-accum 4 --resume "$d/c2/step_00000003" --metrics "$d/c2to1.jsonl"
same --tol 1e-5 "tp 2 + sp checkpoint -> 1 rank" "$d/c2to1.jsonl" "$d/tail.jsonl"
$MPI -np 2 $LOOM train $f --grad-accum 4 --tp 2 --sp --resume "$d/one/step_00000003" \
    --metrics "$d/1tosp.jsonl"
same --tol 1e-5 "1-rank checkpoint -> tp 2 + sp" "$d/1tosp.jsonl" "$d/tail.jsonl"

# bad layouts
expect_fail "--seq 30 is not divisible by --tp 4" $MPI -np 4 $LOOM train $f --tp 4 --sp --seq 30
expect_fail "it needs --tp >= 2 (got --tp 1)" $LOOM train $f --sp
