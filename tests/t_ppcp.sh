#!/usr/bin/env bash
# t_ppcp.sh — pipeline x context parallelism (--pp 2 --cp 2: every stage's part runs on the
# rank's two chunks of each sequence, its attention around the stage's ring) and pipeline x
# sequence parallelism (--pp 2 --tp 2 --sp: the activations between stages are the rank's rows)
# under mpirun equal the single process on the same data (losses within 1e-5 per step, exported
# weights within 1e-5, --val-every's losses within 1e-5): pp 2 x cp 2 1f1b, pp 2 x cp 2 gpipe
# --recompute, pp 2 x tp 2 + sp, pp 2 x cp 2 x tp 2 + sp and dp 2 x pp 2 x cp 2 with ZeRO-1
# (8 ranks); grad-accum > 1, weight decay and clipping throughout. 2bw with cp equals 2bw
# without it. Checkpoints stay in the whole flat layout: a pp 2 x cp 2 checkpoint resumes on
# 1 rank, a 1-rank checkpoint on pp 2 x cp 2. Negative control: other data must fail the
# comparison. Unsupported combinations are clear errors.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
$PY -c "import numpy" 2>/dev/null || missing_dep "python3-numpy for $PY"   # compare-st
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/v300.bin" 300 60000 3
REF="$PY $(dirname "$0")/torch_ref.py"
f="--data $d/v300.bin --vocab 300 --block-size 64 --seq 32 --layers 2 --heads 4 --dim 32
   --lr 3e-3 --warmup 2 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5 --batch 2
   --steps 6 --grad-accum 4"
ck="--save-every 3 --keep 0"
val="--val-data $d/v300.bin --val-every 2"

$LOOM train $f $val --metrics "$d/ref.jsonl" --export "$d/ref.st" --save "$d/one" $ck 2>/dev/null
$MPI -np 4 $LOOM train $f $val --pp 2 --cp 2 --schedule 1f1b --metrics "$d/a.jsonl" \
    --export "$d/a.st" --save "$d/ca" $ck 2> "$d/log"
grep -q "pipeline: pp 2 (1f1b) x tp 1 (1d) x cp 2 (ring attention)" "$d/log" || {
    cat "$d/log"; exit 1; }
grep -q "sent around the ring per layer" "$d/log" || { cat "$d/log"; exit 1; }
same --tol 1e-5 "pp 2 x cp 2, 1f1b" "$d/a.jsonl" "$d/ref.jsonl"
$PY - "$d/ref.jsonl" "$d/a.jsonl" <<'PY'
import json, sys
def vals(p):
    return {r["step"]: r["val_loss"] for r in map(json.loads, open(p)) if "val_loss" in r}
a, b = vals(sys.argv[1]), vals(sys.argv[2])
print("validation, single process:", a, "| pp 2 x cp 2:", b)
sys.exit(0 if sorted(a) == sorted(b) == [2, 4, 6] and all(abs(a[k] - b[k]) < 1e-5 for k in a) else 1)
PY
$REF compare-st "$d/a.st" "$d/ref.st" --tol 1e-5
$MPI -np 4 $LOOM train $f --pp 2 --cp 2 --schedule gpipe --recompute --metrics "$d/g.jsonl" \
    --export "$d/g.st" 2>/dev/null
same --tol 1e-5 "pp 2 x cp 2, gpipe --recompute" "$d/g.jsonl" "$d/ref.jsonl" "$d/g.st" "$d/ref.st"
$MPI -np 4 $LOOM train $f --pp 2 --tp 2 --sp --metrics "$d/s.jsonl" --export "$d/s.st" \
    2> "$d/slog"
grep -q "x tp 2 (1d + sequence parallel)" "$d/slog" || { cat "$d/slog"; exit 1; }
same --tol 1e-5 "pp 2 x tp 2 + sp, 1f1b" "$d/s.jsonl" "$d/ref.jsonl" "$d/s.st" "$d/ref.st"
$MPI -np 8 $LOOM train $f --pp 2 --cp 2 --tp 2 --sp --metrics "$d/x.jsonl" --export "$d/x.st" \
    2>/dev/null
same --tol 1e-5 "pp 2 x cp 2 x tp 2 + sp" "$d/x.jsonl" "$d/ref.jsonl" "$d/x.st" "$d/ref.st"
$MPI -np 8 $LOOM train ${f/grad-accum 4/grad-accum 2} --dp 2 --pp 2 --cp 2 --zero 1 \
    --metrics "$d/z.jsonl" --export "$d/z.st" 2>/dev/null
same --tol 1e-5 "dp 2 x pp 2 x cp 2, ZeRO-1" "$d/z.jsonl" "$d/ref.jsonl" "$d/z.st" "$d/ref.st"

# 2bw: the same delayed updates with and without context parallelism
$MPI -np 2 $LOOM train $f --pp 2 --schedule 2bw --metrics "$d/b1.jsonl" 2>/dev/null
$MPI -np 4 $LOOM train $f --pp 2 --cp 2 --schedule 2bw --metrics "$d/b.jsonl" 2>/dev/null
same --tol 1e-5 "2bw: pp 2 x cp 2 = pp 2" "$d/b.jsonl" "$d/b1.jsonl"

# negative control: other data must not pass the same comparison
mkshard "$d/other.bin" 300 60000 9
$MPI -np 4 $LOOM train ${f/v300.bin/other.bin} --pp 2 --cp 2 --metrics "$d/neg.jsonl" 2>/dev/null
if same --tol 1e-5 "negative control" "$d/neg.jsonl" "$d/ref.jsonl" > /dev/null; then
    echo "FAILED: the comparison passed on other data"; exit 1
fi
echo "negative control: other data fails the comparison"

# checkpoints across layouts, against the uninterrupted single process's last 3 steps
grep -v val_loss "$d/ref.jsonl" | tail -n 3 > "$d/tail.jsonl"
$LOOM train $f --resume "$d/ca/step_00000003" --metrics "$d/a1.jsonl" 2>/dev/null
same --tol 1e-5 "pp 2 x cp 2 checkpoint -> 1 rank" "$d/a1.jsonl" "$d/tail.jsonl"
$MPI -np 4 $LOOM train $f --pp 2 --cp 2 --resume "$d/one/step_00000003" \
    --metrics "$d/1a.jsonl" 2>/dev/null
same --tol 1e-5 "1-rank checkpoint -> pp 2 x cp 2" "$d/1a.jsonl" "$d/tail.jsonl"

# 2bw with ZeRO-2 (a dp group of one here: the sharded path, the same numbers)
$MPI -np 4 $LOOM train $f --pp 2 --cp 2 --zero 2 --schedule 2bw --metrics "$d/bz.jsonl" 2>/dev/null
same --tol 1e-5 "2bw zero 2: pp 2 x cp 2 = pp 2" "$d/bz.jsonl" "$d/b1.jsonl"

# what pp x cp / sp does not run
expect_fail "--cp 2 cuts every sequence into 2 x 2 = 4 chunks: --seq 30 is not a multiple of 4" \
    $MPI -np 4 $LOOM train ${f/--seq 32/--seq 30} --pp 2 --cp 2
expect_fail "--sp with --pp splits the sequence over each stage's 1D tensor-parallel group: it \
needs --tp >= 2 (got --tp 1)" $MPI -np 2 $LOOM train $f --pp 2 --sp
expect_fail "--seq 30 is not divisible by --tp 4" \
    $MPI -np 8 $LOOM train ${f/--seq 32/--seq 30} --pp 2 --tp 4 --sp
expect_fail "--co2 with --cp 2: CO2 over pipeline workers runs plain stages" \
    $MPI -np 4 $LOOM train $f --pp 2 --cp 2 --co2
expect_fail "= 8 ranks, but the job has 4" $MPI -np 4 $LOOM train $f --pp 2 --cp 2 --tp 2
