#!/usr/bin/env bash
# t_cuda_staged.sh — two MPI ranks sharing the one GPU (--device cuda:fp32), their buffers
# crossing MPI through comm's host stages (src/parallel/comm_stage.c; tests/t_device_staged.sh
# proves the same layouts on the emu device in `make test`):
#   1. dp 2 with ZeRO 0-3, pp 2 (1f1b) and tp 2 with sp equal one GPU rank with the same global batch
#      (losses within 1e-5 per step, exported weights within 1e-5);
#   2. pp 2 with 2bw and CO2 over dp 2 equal the same layout on the CPU backend (losses and
#      weights within 1e-4: other kernels, and rules that are not the single process's).
# Exit 77 (skip) without a usable GPU or without mpirun on this machine.
set -eu
. "$(dirname "$0")/../lib.sh"
LOOM=${LOOM:-build-cuda/loom}
command -v mpirun >/dev/null || { echo "no mpirun on this machine"; exit 77; }
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/d.bin" 300 30000 2
shape="--layers 4 --heads 4 --dim 64 --vocab 300 --block-size 64 --seed 5 --data $d/d.bin
       --progress off --batch 2 --seq 32 --steps 6 --lr 1e-3 --weight-decay 0.1 --grad-clip 1.0"
need_gpu $shape --device cuda:fp32
g="--device cuda:fp32"

echo "== 1. against one GPU rank"
$LOOM train $shape $g --grad-accum 2 --metrics "$d/one.jsonl" --export "$d/one.st"
for z in 0 1 2 3; do
    $MPI -np 2 $LOOM train $shape $g --dp 2 --zero $z --metrics "$d/dp$z.jsonl" --export "$d/dp$z.st"
    same --tol 1e-5 "dp 2 zero $z (2 ranks, one GPU) vs 1 rank" "$d/dp$z.jsonl" "$d/one.jsonl" \
        "$d/dp$z.st" "$d/one.st"
done
$MPI -np 2 $LOOM train $shape $g --grad-accum 2 --pp 2 --schedule 1f1b --metrics "$d/pp.jsonl" \
    --export "$d/pp.st"
same --tol 1e-5 "pp 2 1f1b vs 1 rank" "$d/pp.jsonl" "$d/one.jsonl" "$d/pp.st" "$d/one.st"
$MPI -np 2 $LOOM train $shape $g --grad-accum 2 --tp 2 --sp --metrics "$d/tp.jsonl" \
    --export "$d/tp.st"
same --tol 1e-5 "tp 2 sp vs 1 rank" "$d/tp.jsonl" "$d/one.jsonl" "$d/tp.st" "$d/one.st"

echo "== 2. against the same layout on the CPU"
cmp_cpu() { # NAME ARGS...
    local name=$1; shift
    for dev in cpu cuda:fp32; do
        $MPI -np 2 $LOOM train $shape --device $dev "$@" --metrics "$d/$dev.jsonl" \
            --export "$d/$dev.st"
    done
    same --tol 1e-4 "$name on the GPU vs the CPU" "$d/cuda:fp32.jsonl" "$d/cpu.jsonl" \
        "$d/cuda:fp32.st" "$d/cpu.st"
}
cmp_cpu "pp 2 2bw" --grad-accum 2 --pp 2 --schedule 2bw
cmp_cpu "co2 dp 2" --dp 2 --co2 --tau 2
