#!/usr/bin/env bash
# t_llama_tp.sh — --arch llama with Megatron 1D tensor parallelism (--tp) under mpirun equals
# the single process on the same data (losses within 1e-5 relative per step, exported weights
# within 1e-5): kv-heads = heads (H4 kv4, tp 2), kv heads split (H4 kv2, tp 2), kv heads shared
# by several ranks (H4 kv1 tp 2; H4 kv2 tp 4), untied and tied lm_head, a vocabulary of 300
# (padded, cut across ranks), grad-accum 2, weight decay and clipping; dp 2 x tp 2 (ZeRO 1);
# --recompute; --sp; tp 2 x pp 2 (tied); tp 2 x dp 2 --co2 equals dp 2 --co2. A tp 2
# checkpoint resumed on one process (and a 1-process one on tp 2) continues as the uninterrupted single process, and `loom export` of it equals the run's export.
# Refusals: a --tp that cuts no whole kv heads or SwiGLU columns (2D --tp: t_llama_tp2d.sh).
# (Losses are compared as
# the metrics print them, 6 decimals.)
# asan: skip
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
$PY -c "import numpy" 2>/dev/null || missing_dep "python3-numpy for $PY" # compare-st
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/v.bin" 300 30000 4
base="--arch llama --layers 2 --heads 4 --dim 64 --ffn-dim 96 --vocab 300 --block-size 64
      --seed 3 --progress off --data $d/v.bin --batch 2 --seq 32 --grad-accum 2 --lr 1e-3
      --warmup 2 --weight-decay 0.1 --grad-clip 0.5 --steps 6"

# run NAME NP ARGS...: one run writing $d/NAME.jsonl and $d/NAME.safetensors
run() {
    local n=$1 np=$2
    shift 2
    if [ "$np" = 1 ]; then
        $LOOM train $base "$@" --metrics "$d/$n.jsonl" --export "$d/$n.safetensors"
    else
        $MPI -np "$np" $LOOM train $base "$@" --metrics "$d/$n.jsonl" --export "$d/$n.safetensors"
    fi
}
# check NAME KV TIE NP ARGS...: the parallel run against the single process of the same shape
check() {
    local n=$1 kv=$2 tie=$3 np=$4
    shift 4
    local M="--kv-heads $kv --tie-embeddings $tie"
    [ -f "$d/one-$kv-$tie.jsonl" ] || run "one-$kv-$tie" 1 $M
    run "$n" "$np" $M "$@"
    same --tol 1e-5 "$n (kv-heads $kv, tie $tie): $*" "$d/$n.jsonl" "$d/one-$kv-$tie.jsonl" \
        "$d/$n.safetensors" "$d/one-$kv-$tie.safetensors"
}
check mha 4 off 2 --tp 2
check split 2 off 2 --tp 2
check shared 1 off 2 --tp 2
check tied 1 on 2 --tp 2
check split-tied 2 on 2 --tp 2
check shared4 2 off 4 --tp 4
check dt 2 off 4 --tp 2 --dp 2 --zero 1 --grad-accum 1
check rc 1 off 2 --tp 2 --recompute
check pp-tied 1 on 4 --tp 2 --pp 2
# CO2 over tp 2 workers equals CO2 over whole-model workers (its rule is not the single process's)
run co2-dp 2 --kv-heads 1 --dp 2 --co2 --grad-accum 1
run co2-tp 4 --kv-heads 1 --dp 2 --tp 2 --co2 --grad-accum 1
same --tol 1e-5 "tp 2 x dp 2 --co2 against dp 2 --co2" "$d/co2-tp.jsonl" "$d/co2-dp.jsonl" \
    "$d/co2-tp.safetensors" "$d/co2-dp.safetensors"
check sp 1 off 2 --tp 2 --sp
check sp-split 2 on 2 --tp 2 --sp
check sp4 2 off 4 --tp 4 --sp --recompute

# checkpoints in the whole-model layout, against the uninterrupted single process's last 3 steps
S="--kv-heads 1 --tie-embeddings off --save-every 3 --keep 0"
$MPI -np 2 $LOOM train $base $S --tp 2 --save "$d/c2" --metrics "$d/c2.jsonl"
$LOOM train $base $S --save "$d/c1" --metrics "$d/c1.jsonl"
tail -n 3 "$d/one-1-off.jsonl" > "$d/tail.jsonl"
$LOOM train $base $S --resume "$d/c2/step_00000003" --metrics "$d/c2to1.jsonl"
same --tol 1e-5 "tp 2 checkpoint -> 1 process" "$d/c2to1.jsonl" "$d/tail.jsonl"
$MPI -np 2 $LOOM train $base $S --tp 2 --resume "$d/c1/step_00000003" --metrics "$d/c1to2.jsonl"
same --tol 1e-5 "1-process checkpoint -> tp 2" "$d/c1to2.jsonl" "$d/tail.jsonl"
$LOOM export "$d/c2" -o "$d/c2.safetensors"
$PY "$(dirname "$0")/torch_ref.py" compare-st "$d/c2.safetensors" "$d/one-1-off.safetensors" --tol 1e-5

expect_fail "tp must divide the kv heads (each rank holds KV/tp) or be a multiple of them" \
    $MPI -np 2 $LOOM train $base --heads 6 --kv-heads 3 --dim 96 --tp 2
expect_fail "--arch llama --tp 4 must divide --ffn-dim 90" \
    $MPI -np 4 $LOOM train $base --ffn-dim 90 --tp 4
