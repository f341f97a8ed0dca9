#!/usr/bin/env bash
# t_cuda_offload_host.sh — --offload host on the GPU (tests/t_offload_host.sh proves the same
# on the emu device in `make test`): the state in page-locked host memory, the units computing
# in GPU memory, moved on the CUDA backend's copy stream (src/backend/cuda/cuda_copy.c).
#   1. fp32, one process, at a --fast-mem that holds under a quarter of the state: the same
#      losses and byte-identical export as the in-memory GPU run (planned units; and explicit
#      ones with prefetch 2 and --recompute), clipping on and off; loom's own device high-water
#      mark within --fast-mem;
#      bf16 products likewise (the bound not checked: the bf16 weight copies are outside it);
#      --offload disk on the GPU (a disk under it) likewise, and device <- host <- disk
#      (--offload host --offload-dir --host-mem: 64 MiB of the state in host memory, the rest on
#      disk);
#   2. dp 2 with ZeRO-1 (two ranks sharing the GPU, comm's host stages) against --offload disk
#      on the CPU within 1e-4, where mpirun exists.
# Exit 77 (skip) without a usable GPU.
set -eu
. "$(dirname "$0")/../lib.sh"
LOOM=${LOOM:-build-cuda/loom}
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/d.bin" 512 200000 2
# 12.8M parameters: 195 MiB of state; 48 MiB of --fast-mem is under a quarter of it
shape="--layers 16 --heads 4 --dim 256 --vocab 512 --block-size 32 --seed 5 --data $d/d.bin
       --progress off --batch 2 --seq 32 --steps 4 --grad-accum 2 --lr 1e-3 --weight-decay 0.1"
g="--device cuda:fp32"
need_gpu $shape $g
HOST="--offload host --fast-mem 48M"
run() { # NAME ARGS...
    local name=$1; shift
    $LOOM train $shape "$@" --metrics "$d/$name.jsonl" --export "$d/$name.st" 2>"$d/$name.err" ||
        { cat "$d/$name.err"; exit 1; }
}
echo "== 1. against the in-memory GPU run"
for clip in 1.0 0; do
    run mem $g --grad-clip $clip
    run host $g --grad-clip $clip $HOST
    grep 'offload' "$d/host.err" | sed 's/^/    /'
    same "fp32, --grad-clip $clip, planned units" "$d/mem.jsonl" "$d/host.jsonl" "$d/mem.st" \
        "$d/host.st"
    line=$(grep 'offload: rank 0: peak device memory' "$d/host.err")
    awk -v l="$line" 'BEGIN { split(l, a, "memory "); split(a[2], b, " MiB of --fast-mem ");
        split(b[2], c, " MiB"); exit !(b[1] + 0 <= c[1] + 0) }' ||
        { echo "device peak above --fast-mem: $line"; exit 1; }
    echo "$line"
done
run memr $g --grad-clip 1.0 --recompute
run hostr $g --grad-clip 1.0 --recompute $HOST --offload-units '[[0,3],[4,9],[10,17]]' \
    --offload-prefetch 2
same "fp32 --recompute, units [[0,3],[4,9],[10,17]] prefetch 2" "$d/memr.jsonl" \
    "$d/hostr.jsonl" "$d/memr.st" "$d/hostr.st"

# bf16 products: the cached bf16 copy of a slot's weight is made again after each copy into a
# slot (the copy stream bumps the cache's generation), so the bits are the in-memory run's too;
# the cache itself is device memory outside the plan (not bounded here)
run memb --device cuda:bf16 --grad-clip 1.0
run hostb --device cuda:bf16 --grad-clip 1.0 $HOST
same "bf16, planned units" "$d/memb.jsonl" "$d/hostb.jsonl" "$d/memb.st" "$d/hostb.st"

# a disk under the GPU (device <- page-locked bounce <- disk): the same bits
mkdir -p "$d/off"
run memd $g --grad-clip 1.0
run diskd $g --grad-clip 1.0 --offload disk --offload-dir "$d/off" --fast-mem 48M
same "fp32 --offload disk on the GPU" "$d/memd.jsonl" "$d/diskd.jsonl" "$d/memd.st" "$d/diskd.st"
run splitd $g --grad-clip 1.0 --offload host --offload-dir "$d/off" --host-mem 80M --fast-mem 48M
grep -q 'rank 0: 64.0 MiB of the state in page-locked host memory' "$d/splitd.err" ||
    { echo "--host-mem 80M: not split as expected"; cat "$d/splitd.err"; exit 1; }
same "fp32 --host-mem above a disk on the GPU" "$d/memd.jsonl" "$d/splitd.jsonl" "$d/memd.st" \
    "$d/splitd.st"

echo "== 2. two ranks sharing the GPU"
if command -v mpirun >/dev/null; then
    need_mpi
    U='--offload-units [[0,3],[4,9],[10,17]] --offload-prefetch 2'
    $MPI -np 2 $LOOM train $shape --grad-clip 1.0 --dp 2 --zero 1 $g $HOST $U \
        --metrics "$d/dg.jsonl" --export "$d/dg.st"
    $MPI -np 2 $LOOM train $shape --grad-clip 1.0 --dp 2 --zero 1 --device cpu --offload disk \
        --offload-dir "$d/off" --fast-mem 1G $U --metrics "$d/dc.jsonl" --export "$d/dc.st"
    same --tol 1e-4 "dp 2 zero 1 --offload host on the GPU vs --offload disk on the CPU" \
        "$d/dg.jsonl" "$d/dc.jsonl" "$d/dg.st" "$d/dc.st"
else
    echo "no mpirun on this machine: part 2 not run"
fi
echo "all ok"
