#!/usr/bin/env bash
# t_cuda_nccl.sh — the collectives on device buffers through NCCL (--device-comm nccl,
# src/backend/cuda/cuda_nccl.c) where there are GPUs enough:
#   1. one GPU: two ranks sharing it are refused under --device-comm nccl, naming the ranks,
#      and keep host stages under auto (the lead rank says so);
#   2. two GPUs or more: dp 2 with ZeRO 0-3, tp 2 with sp, and CO2 over dp 2 with NCCL equal the
#      same runs through host stages (losses within 1e-5 per step, exported weights within 1e-5:
#      NCCL sums in another order than MPI), and the lead rank names NCCL.
# Exit 77 (skip) without a usable GPU, without mpirun, or when NCCL does not load (LOOM_NCCL).
set -eu
. "$(dirname "$0")/../lib.sh"
LOOM=${LOOM:-build-cuda/loom}
command -v mpirun >/dev/null || { echo "no mpirun on this machine"; exit 77; }
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/d.bin" 300 30000 2
shape="--layers 4 --heads 4 --dim 64 --vocab 300 --block-size 64 --seed 5 --data $d/d.bin
       --progress off --batch 2 --seq 32 --steps 6 --lr 1e-3 --weight-decay 0.1 --grad-clip 1.0"
g="--device cuda:fp32"
need_gpu $shape $g
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -ge 1 ] || gpus=1
if ! out=$($LOOM train $shape --steps 0 $g --device-comm nccl 2>&1); then
    grep -q "NCCL:" <<<"$out" && { echo "$out"; exit 77; } # NCCL does not load here
    echo "$out"; exit 1
fi
X=""
for v in LOOM_NCCL LD_LIBRARY_PATH; do [ -n "${!v:-}" ] && X="$X -x $v"; done
if [ "$gpus" -lt 2 ]; then
    echo "== 1. two ranks sharing the one GPU"
    expect_fail "share one device" $MPI -np 2 $X $LOOM train $shape $g --dp 2 --device-comm nccl
    $MPI -np 2 $X $LOOM train $shape $g --dp 2 --steps 1 2>"$d/auto.err" >/dev/null ||
        { cat "$d/auto.err"; exit 1; }
    grep -q "collectives on device buffers: host stages" "$d/auto.err" ||
        { echo "auto did not keep host stages"; cat "$d/auto.err"; exit 1; }
    echo "auto with two ranks on one GPU: host stages"
    echo "one GPU: part 2 (NCCL between two GPUs) not run"
    exit 0
fi
echo "== 2. NCCL against host stages on $gpus GPUs"
both() { # NAME ARGS...
    local name=$1
    shift
    $MPI -np 2 $X $LOOM train $shape $g "$@" --device-comm host --metrics "$d/h.jsonl" \
        --export "$d/h.st" 2>/dev/null
    $MPI -np 2 $X $LOOM train $shape $g "$@" --device-comm nccl --metrics "$d/n.jsonl" \
        --export "$d/n.st" 2>"$d/n.err" || { cat "$d/n.err"; exit 1; }
    grep -q "collectives on device buffers: NCCL" "$d/n.err" ||
        { echo "$name: NCCL not named"; cat "$d/n.err"; exit 1; }
    same --tol 1e-5 "$name: NCCL vs host stages" "$d/n.jsonl" "$d/h.jsonl" "$d/n.st" "$d/h.st"
}
for z in 0 1 2 3; do both "dp 2 zero $z" --dp 2 --zero $z; done
both "tp 2 sp" --tp 2 --sp --grad-accum 2
both "co2 dp 2" --dp 2 --co2 --tau 2 --grad-clip 0
echo "all ok"
