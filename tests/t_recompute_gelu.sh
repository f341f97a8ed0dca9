#!/usr/bin/env bash
# t_recompute_gelu.sh — --recompute-gelu (GPT-2's GELU output recomputed in the backward, not
# kept per layer) leaves training exactly as it was: the same losses per step under dp 2
# ZeRO-2, cp 2, CO2 and --offload disk as the same layout without it (t_tp.sh covers one
# process, tp 2 --sp and pp 2; test_gradcheck the gradients and the workspace size). LLaMA and
# --tp-mode 2d, whose blocks keep their MLP outputs their own way, refuse it by name.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/d.bin" 300 60000 3
f="--data $d/d.bin --vocab 300 --block-size 64 --seq 32 --layers 2 --heads 4 --dim 32 --batch 2
   --steps 4 --lr 3e-3 --warmup 1 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 3"
run() { # NAME RANKS ARGS...: the layout without and with --recompute-gelu, losses identical
    local name=$1 np=$2; shift 2
    for rg in "" --recompute-gelu; do
        if [ "$np" = 1 ]; then
            $LOOM train $f "$@" $rg --metrics "$d/$name$rg.jsonl" >/dev/null
        else
            $MPI -np "$np" $LOOM train $f "$@" $rg --metrics "$d/$name$rg.jsonl" >/dev/null
        fi
    done
    same --tol 0 "$name --recompute-gelu" "$d/$name--recompute-gelu.jsonl" "$d/$name.jsonl"
}
run dp2z2 2 --dp 2 --zero 2
run cp2 2 --cp 2
run co2 2 --dp 2 --co2 --tau 2
mkdir -p "$d/o" "$d/o--recompute-gelu"
for rg in "" --recompute-gelu; do
    $LOOM train $f $rg --offload disk --offload-dir "$d/o$rg" --fast-mem "$(fastmem 48)" \
        --metrics "$d/off$rg.jsonl" >/dev/null 2>&1
done
same --tol 0 "--offload disk --recompute-gelu" "$d/off--recompute-gelu.jsonl" "$d/off.jsonl"
expect_fail "--recompute-gelu: GPT-2 blocks" $LOOM train $f --arch llama --recompute-gelu
expect_fail "--tp-mode 2d keeps its MLP outputs" \
    $MPI -np 4 $LOOM train $f --tp 4 --tp-mode 2d --recompute-gelu
