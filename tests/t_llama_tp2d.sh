#!/usr/bin/env bash
# t_llama_tp2d.sh — --arch llama with 2D (SUMMA) tensor parallelism (--tp 4 --tp-mode 2d, a 2x2
# grid) under mpirun equals the single process on the same data (losses within 1e-5 per step,
# exported weights and validation losses within 1e-5, the first step's --dump-grads within
# 1e-5), with weight decay, clipping and grad-accum 2 throughout, over a vocabulary of 301 (one
# padding row in the 2d embedding blocks): kv heads split over the grid (H4 kv2, untied
# lm_head), kv-heads = heads with a tied lm_head and --norm-eps 1e-6 (the split RMSNorm's eps);
# dp 2 x 2d (8 ranks) with ZeRO 1 and --recompute, with ZeRO 3, and 2d x cp 2 (RoPE at the
# chunks' global positions); 2d --offload; dp 2 x 2d --co2 equals dp 2 --co2. Checkpoints: a
# 2d one resumes in 2d bit for bit and on one process within 1e-5. Negative control: another
# --seed fails the comparison. The summary's communication line is checked against its own
# table. Refusals: a grid whose q does not divide --kv-heads or
# --ffn-dim, naming the flag.
# asan: skip
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
$PY -c "import numpy" 2>/dev/null || missing_dep "python3-numpy for $PY" # compare-st
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/v.bin" 300 30000 4
REF="$PY $(dirname "$0")/torch_ref.py"
base="--arch llama --layers 2 --heads 4 --dim 64 --ffn-dim 96 --vocab 301 --block-size 64
      --seed 3 --progress off --data $d/v.bin --batch 2 --seq 32 --grad-accum 2 --lr 1e-3
      --warmup 2 --weight-decay 0.1 --grad-clip 0.5 --steps 6"
t2="--tp 4 --tp-mode 2d"

# run NAME NP ARGS...: one run writing $d/NAME.jsonl and $d/NAME.safetensors
run() {
    local n=$1 np=$2
    shift 2
    local launch=""
    [ "$np" = 1 ] || launch="$MPI -np $np"
    $launch $LOOM train $base "$@" --metrics "$d/$n.jsonl" --export "$d/$n.safetensors" \
        2> "$d/$n.err" || { cat "$d/$n.err"; return 1; }
}
# check NAME KV TIE NP ARGS...: the parallel run against the single process of the same shape
check() {
    local n=$1 kv=$2 tie=$3 np=$4
    shift 4
    local M="--kv-heads $kv --tie-embeddings $tie"
    [ "$tie" = on ] && M="$M --norm-eps 1e-6" # the tied shape also moves the RMSNorm's eps
    [ -f "$d/one-$kv-$tie.jsonl" ] || run "one-$kv-$tie" 1 $M
    run "$n" "$np" $M "$@"
    same --tol 1e-5 "$n (kv-heads $kv, tie $tie): $*" "$d/$n.jsonl" "$d/one-$kv-$tie.jsonl" \
        "$d/$n.safetensors" "$d/one-$kv-$tie.safetensors"
}
val="--val-data $d/v.bin --val-every 3 --val-windows 2"
check 2d 2 off 4 $t2 $val
run one-val 1 --kv-heads 2 $val
$PY - "$d/2d.jsonl" "$d/one-val.jsonl" <<'PY' # validation losses at steps 3 and 6
import json, sys
a, b = ([(r["step"], r["val_loss"]) for r in map(json.loads, open(p)) if "val_loss" in r]
        for p in sys.argv[1:])
assert len(a) == 2 and [s for s, _ in a] == [s for s, _ in b], (a, b)
worst = max(abs(x - y) for (_, x), (_, y) in zip(a, b))
assert worst <= 1e-5, (a, b)
print(f"validation losses {a}: max difference {worst:.2g}, tolerance 1e-5")
PY
# the summary: what the layers received per micro-batch equals the SUMMA table it prints for
# LLaMA's products and RMSNorms (with --recompute: the forward's broadcasts and partials again)
table() { tp2d_table "$1"; } # tests/lib.sh
table "$d/2d.err"
# the first step's gradients, gathered whole
$LOOM train $base --kv-heads 2 --steps 1 --dump-grads "$d/g1.st" > /dev/null 2>&1
$MPI -np 4 $LOOM train $base --kv-heads 2 $t2 --steps 1 --dump-grads "$d/g4.st" > /dev/null 2>&1
$REF compare-st "$d/g4.st" "$d/g1.st" --tol 1e-5
check tied 4 on 4 $t2
check dz1 2 off 8 $t2 --dp 2 --zero 1 --recompute --grad-accum 1
table "$d/dz1.err"
check dz3 2 off 8 $t2 --dp 2 --zero 3 --grad-accum 1
check cp 2 off 8 $t2 --cp 2
mkdir -p "$d/off"
check off 2 off 4 $t2 --offload disk --offload-dir "$d/off" --fast-mem "$(fastmem 256)"
# CO2 over 2d workers equals CO2 over whole-model workers (its rule is not the single process's)
run co2-dp 2 --kv-heads 2 --dp 2 --co2 --tau 2 --grad-accum 1
run co2-2d 8 --kv-heads 2 --dp 2 $t2 --co2 --tau 2 --grad-accum 1
same --tol 1e-5 "dp 2 x 2d --co2 against dp 2 --co2" "$d/co2-2d.jsonl" "$d/co2-dp.jsonl" \
    "$d/co2-2d.safetensors" "$d/co2-dp.safetensors"

# checkpoints in the whole-model layout: 2d -> 2d bit for bit, 2d -> 1 process within 1e-5
S="--kv-heads 2 --tie-embeddings off --save-every 3 --keep 0"
$MPI -np 4 $LOOM train $base $S $t2 --save "$d/c4" --metrics "$d/c4.jsonl"
tail -n 3 "$d/c4.jsonl" > "$d/tail4.jsonl"
$MPI -np 4 $LOOM train $base $S $t2 --resume "$d/c4/step_00000003" --metrics "$d/c4to4.jsonl"
same "2d checkpoint -> 2d (bit for bit)" "$d/c4to4.jsonl" "$d/tail4.jsonl"
tail -n 3 "$d/one-2-off.jsonl" > "$d/tail1.jsonl"
$LOOM train $base $S --resume "$d/c4/step_00000003" --metrics "$d/c4to1.jsonl"
same --tol 1e-5 "2d checkpoint -> 1 process" "$d/c4to1.jsonl" "$d/tail1.jsonl"

# negative control: another seed must not pass the same comparison
$MPI -np 4 $LOOM train $base --kv-heads 2 $t2 --seed 4 --metrics "$d/neg.jsonl"
if same --tol 1e-5 "negative control" "$d/neg.jsonl" "$d/one-2-off.jsonl" > /dev/null; then
    echo "FAILED: the comparison passed with another seed"; exit 1
fi
echo "negative control: another --seed fails the comparison"

expect_fail "q = 2 must divide --kv-heads 1" $MPI -np 4 $LOOM train $base $t2 --kv-heads 1
expect_fail "q = 2 must divide --ffn-dim 95" $MPI -np 4 $LOOM train $base $t2 --ffn-dim 95
