#!/usr/bin/env bash
# t_tp2d_cp.sh — 2D (SUMMA) tensor parallelism over a context-parallel ring (--tp 4 --tp-mode 2d
# --cp 2, 8 ranks): each 2x2 grid runs on its two chunks of every sequence (T/cp tokens), its
# attention around the ring (parallel/ring_attention.c), the embedding adding wpe at the chunks'
# global positions, the gradients summed over dp x cp. Against the same 2D grid without cp on
# the same data (losses within 1e-5 per step, validation losses, exported weights within 1e-5),
# with weight decay, clipping (active: the norms are above --grad-clip), grad-accum 3, a
# vocabulary of 65 (one padding row in the 2d wte blocks), with and without --recompute; the
# summary's communication line against its own table for the grid's tokens; --dump-grads within
# 1e-5 of the grid's without cp. Checkpoints stay in the whole layout: a 2d x cp 2 save at step
# 2 of 4 resumes in 2d x cp 2 onto the uninterrupted run's bytes and in 2d without cp within
# 1e-5. Negative control: a run on other data fails the comparison. ZeRO 1-3, --co2 and
# --offload with 2d x cp are refused (tests/test_compose.c).
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
$PY -c "import numpy" 2>/dev/null || missing_dep "python3-numpy for $PY"   # compare-st
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 60000 3
mkshard "$d/other.bin" 64 60000 4
g="--tp 4 --tp-mode 2d"
base="--layers 2 --heads 2 --dim 32 --vocab 65 --block-size 32 --batch 2 --seq 32 --lr 3e-3
      --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5 --threads 1"
flags="--data $d/train.bin $base --val-data $d/train.bin --val-every 2 --val-windows 2 --steps 4
       --grad-accum 3"
mrun() { # NAME NP FLAGS...
    local name=$1 np=$2; shift 2
    $MPI -np "$np" $LOOM train "$@" --metrics "$d/$name.jsonl" --export "$d/$name.st" \
        2>"$d/$name.err" || { cat "$d/$name.err"; exit 1; }
}
for extra in "" "--recompute"; do
    mrun ref 4 $flags $g $extra
    mrun cp 8 $flags $g --cp 2 $extra
    grep -q "x cp 2 (ring attention)" "$d/cp.err" || { echo "the run does not say it runs cp"; exit 1; }
    # the summary: what the layers received per micro-batch (the grid's T/cp tokens) equals the
    # SUMMA table it prints for them
    $PY - "$(grep -F "received per layer and micro-batch" "$d/cp.err")" <<'PY' || exit 1
import re, sys
m = re.search(r"micro-batch ([0-9.]+) MiB .* per linear ([0-9.]+) MiB", sys.argv[1])
got, table = float(m.group(1)), float(m.group(2))
assert got > 0 and abs(got - table) <= 0.002 * table, (got, table)
print(f"per layer and micro-batch: measured {got} MiB, table {table} MiB")
PY
    same --tol 1e-5 "2d x cp 2 ${extra:-} vs 2d" "$d/cp.jsonl" "$d/ref.jsonl" "$d/cp.st" "$d/ref.st" || exit 1
    python3 - "$d/ref.jsonl" "$d/cp.jsonl" <<'PY' || exit 1
import json, sys
r, c = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
n = [x["grad_norm"] for x in r if "grad_norm" in x]
if not n or min(n) <= 0.5: sys.exit(f"clipping inactive: norms {n}")
rv, cv = ([x["val_loss"] for x in y if "val_loss" in x] for y in (r, c))
if len(rv) != 2 or len(cv) != 2 or max(abs(a - b) for a, b in zip(rv, cv)) > 1e-5:
    sys.exit(f"validation losses differ: {rv} vs {cv}")
PY
done
# --dump-grads: the first step's gradient, gathered whole, within 1e-5 of the grid's without cp
$MPI -np 4 $LOOM train $flags $g --steps 1 --dump-grads "$d/g.st" 2>/dev/null
$MPI -np 8 $LOOM train $flags $g --cp 2 --steps 1 --dump-grads "$d/gcp.st" 2>/dev/null
$PY "$(dirname "$0")/torch_ref.py" compare-st "$d/gcp.st" "$d/g.st" --tol 1e-5 ||
    { echo "2d x cp 2: --dump-grads differs from 2d"; exit 1; }

# negative control: other data must fail the comparison
mrun bad 8 ${flags/$d\/train.bin/$d/other.bin} $g --cp 2
if same --tol 1e-5 "negative control" "$d/bad.jsonl" "$d/ref.jsonl" >/dev/null; then
    echo "negative control: a run on other data passed"; exit 1
fi
echo "negative control: a run on other data differs"

# checkpoints: a save at step 2 of 4 resumed in 2d x cp 2 (bit for bit) and in 2d (within 1e-5)
lin="--data $d/train.bin $base --lr-schedule constant --grad-accum 2 --steps 4"
mrun full 8 $lin $g --cp 2
$MPI -np 8 $LOOM train $lin $g --cp 2 --save-every 2 --save "$d/ck" 2>/dev/null
rm -rf "$d/ck/step_00000004"; echo step_00000002 >"$d/ck/latest"
mrun res 8 $lin $g --cp 2 --resume "$d/ck"
cmp -s "$d/full.st" "$d/res.st" || { echo "2d x cp 2: the resume differs from the uninterrupted run"; exit 1; }
echo "2d x cp 2: resume from step 2: the uninterrupted run's bytes"
mrun res2d 4 $lin $g --resume "$d/ck"
same --tol 1e-5 --part "2d x cp 2 checkpoint resumed in 2d" "$d/res2d.jsonl" "$d/full.jsonl" \
    "$d/res2d.st" "$d/full.st" || exit 1
