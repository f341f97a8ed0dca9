#!/usr/bin/env bash
# t_zero_mp.sh — ZeRO stages with model parallelism under mpirun, each against the same layout at
# a lower stage and the single process (losses within 1e-5 per step, exported weights within
# 1e-5; bit-identical where the reduction order is the same), with weight decay, clipping and
# --grad-accum > 1:
#   * dp 2 x tp 2 ZeRO-3 = dp 2 x tp 2 ZeRO-2 bit for bit (the same reduce-scatters), and the
#     single process within 1e-5; dp 2 x cp 2 ZeRO-3 likewise against ZeRO-1 and one process;
#     its checkpoint resumes bit-identically on its own layout and onto one process;
#   * memory: the dry-run's per-rank parameters and the run's summary drop from ZeRO-1 to ZeRO-3;
#   * negative control: a run on other data fails the same comparison.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
$PY -c "import numpy" 2>/dev/null || missing_dep "python3-numpy for $PY"   # compare-st
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/v300.bin" 300 60000 3
REF="$PY $(dirname "$0")/torch_ref.py"
same() { # NAME A B [TOL]: losses of A and B within TOL (1e-5)
    echo "$1: $($REF compare-losses "$2" "$3" --tol "${4:-1e-5}" | tail -1)"
    $REF compare-losses "$2" "$3" --tol "${4:-1e-5}" > /dev/null
}
st() { # NAME A B TOL: exported weights within TOL
    local out
    out=$($REF compare-st "$2" "$3" --tol "$4" 2>&1) || { echo "FAILED: $1: $out"; exit 1; }
    echo "$1: $(tail -1 <<<"$out")"
}
common="--layers 2 --heads 4 --dim 32 --lr 3e-3 --warmup 2 --weight-decay 0.1 --grad-clip 0.5
        --progress off --seed 5 --batch 2 --steps 6"
f="--data $d/v300.bin --vocab 300 --block-size 128 --seq 96 $common"
$LOOM train $f --grad-accum 4 --metrics "$d/ref.jsonl" --export "$d/ref.st" 2>/dev/null
tail -n 3 "$d/ref.jsonl" > "$d/tail.jsonl"

# ---- tensor parallelism (and context parallelism, which runs in the same strategy)
tp() { $MPI -np 4 $LOOM train $f --grad-accum 2 --dp 2 "$@" 2>/dev/null; }
tp --tp 2 --zero 2 --metrics "$d/tz2.jsonl" --export "$d/tz2.st"
tp --tp 2 --zero 3 --metrics "$d/tz3.jsonl" --export "$d/tz3.st" --save "$d/ctz3" \
    --save-every 3 --keep 0
same "dp 2 x tp 2 ZeRO-3 vs one process" "$d/tz3.jsonl" "$d/ref.jsonl"
st "dp 2 x tp 2 ZeRO-3 vs one process" "$d/tz3.st" "$d/ref.st" 1e-5
same "dp 2 x tp 2 ZeRO-3 vs ZeRO-2 (bit-identical)" "$d/tz3.jsonl" "$d/tz2.jsonl" 0
st "dp 2 x tp 2 ZeRO-3 vs ZeRO-2 (bit-identical)" "$d/tz3.st" "$d/tz2.st" 0
tp --tp 2 --zero 3 --resume "$d/ctz3/step_00000003" --metrics "$d/tr.jsonl" --export "$d/tr.st"
tail -n 3 "$d/tz3.jsonl" > "$d/tz3tail.jsonl"
same "dp 2 x tp 2 ZeRO-3 checkpoint -> itself (bit-identical)" "$d/tr.jsonl" "$d/tz3tail.jsonl" 0
st "dp 2 x tp 2 ZeRO-3 checkpoint -> itself (bit-identical)" "$d/tr.st" "$d/tz3.st" 0
$LOOM train $f --grad-accum 4 --resume "$d/ctz3/step_00000003" --metrics "$d/tr1.jsonl" 2>/dev/null
same "dp 2 x tp 2 ZeRO-3 checkpoint -> one process" "$d/tr1.jsonl" "$d/tail.jsonl"
tp --cp 2 --zero 1 --metrics "$d/cz1.jsonl" --export "$d/cz1.st"
tp --cp 2 --zero 3 --metrics "$d/cz3.jsonl" --export "$d/cz3.st"
same "dp 2 x cp 2 ZeRO-3 vs one process" "$d/cz3.jsonl" "$d/ref.jsonl"
same "dp 2 x cp 2 ZeRO-3 vs ZeRO-1" "$d/cz3.jsonl" "$d/cz1.jsonl"
st "dp 2 x cp 2 ZeRO-3 vs ZeRO-1" "$d/cz3.st" "$d/cz1.st" 1e-5
st "dp 2 x cp 2 ZeRO-3 vs one process" "$d/cz3.st" "$d/ref.st" 1e-5

# ---- memory: parameters per rank at ZeRO-1 and ZeRO-3 (a model whose layers outweigh the
# gathered embedding and two gathered blocks)
big="--data $d/v300.bin --vocab 300 --block-size 128 --seq 32 --layers 8 --heads 4 --dim 64
     --batch 1 --steps 1 --progress off"
mem() { # NAME LOWER HIGHER: LOWER < HIGHER
    awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%s: %s MiB (ZeRO-3) < %s MiB (ZeRO-1)\n",
        n, a, b; exit !(a != "" && b != "" && a + 0 < b + 0) }' || { echo "FAILED: $1"; exit 1; }
}
dryp() { $LOOM train $big "$@" --dry-run | sed -n 's/^per rank.*params \([0-9.]*\) MiB.*/\1/p'; }
runp() { $MPI -np 4 $LOOM train $big "$@" 2>&1 >/dev/null |
         sed -n 's/.*holding params \([0-9.]*\) MiB.*/\1/p'; }
mem "dp 2 x tp 2 dry-run params per rank" "$(dryp --dp 2 --tp 2 --zero 3)" \
    "$(dryp --dp 2 --tp 2 --zero 1)"
mem "dp 2 x tp 2 run's params per rank" "$(runp --dp 2 --tp 2 --zero 3)" \
    "$(runp --dp 2 --tp 2 --zero 1)"

# negative control: other data must not pass the same comparison
mkshard "$d/other.bin" 300 60000 9
$MPI -np 4 $LOOM train ${f/v300.bin/other.bin} --grad-accum 2 --dp 2 --tp 2 --zero 3 \
    --metrics "$d/neg.jsonl" 2>/dev/null
if $REF compare-losses "$d/neg.jsonl" "$d/ref.jsonl" --tol 1e-5 > /dev/null 2>&1; then
    echo "FAILED: the comparison passed on other data"; exit 1
fi
echo "negative control: other data fails the comparison"
