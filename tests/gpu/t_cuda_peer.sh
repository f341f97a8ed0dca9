#!/usr/bin/env bash
# t_cuda_peer.sh — two `loom peer --device cuda:fp32` processes sharing the one GPU (the model on
# the GPU, each peer's outer state and the swarm's arrays in host memory; tests/t_peer_emu.sh
# proves the host side on the emu device in `make test`):
#   1. against two CPU peers: every step's loss within 1e-4, the exported anchors within 1e-4;
#   1b. two GPU peers whose models swap from host memory (--offload host) equal the in-memory
#      GPU peers bit for bit (ATOM's whole system on a GPU);
#   2. where mpirun is installed, against `mpirun -np 2 loom train --dp 2 --co2` on the GPU:
#      losses and final anchor within 1e-5 (as tests/t_peer.sh compares a swarm with --co2).
# Exit 77 (skip) without a usable GPU.
set -eu
. "$(dirname "$0")/../lib.sh"
LOOM=${LOOM:-build-cuda/loom}
REF="$PY $(dirname "$0")/../torch_ref.py"
d=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$d"; }
trap cleanup EXIT
mkshard "$d/d.bin" 300 30000 2
model="--layers 3 --heads 4 --dim 64 --vocab 300 --block-size 64 --batch 2 --seq 32 --seed 5"
opt="--lr 1e-3 --weight-decay 0.1 --grad-clip 1.0 --lr-schedule constant --progress off"
outer="--tau 3 --outer-lr 0.9 --outer-momentum 0.6 --gap-mode constant --steps 12"
need_gpu --data "$d/d.bin" $model --device cuda:fp32
$LOOM keygen -o "$d/secret" 2>/dev/null
swarm() { # DEVICE [NAME EXTRA...]: two peers started together; $d/NAME-{0,1}.{jsonl,st}
    local dev=$1 name=${2:-$1} boot= i started=()
    shift; [ $# -gt 0 ] && shift
    for i in 0 1; do
        $LOOM peer --data "$d/d.bin" $model $opt $outer --min-peers 2 --peer-timeout 20 "$@" \
            --device "$dev" --peer-id "p$i" --listen 127.0.0.1:0 ${boot:+--bootstrap $boot} \
            --secret "$d/secret" --metrics "$d/$name-$i.jsonl" --export "$d/$name-$i.st" \
            > "$d/$name-$i.log" 2>&1 &
        pids+=($!) started+=($!)
        [ $i = 1 ] || boot=$(peer_addr "$d" "$name-0")
    done
    local dev=$name
    for i in 0 1; do wait "${started[$i]}" || { tail -n 5 "$d/$dev-$i.log"; exit 1; }; done
    cmp "$d/$dev-0.st" "$d/$dev-1.st" || { echo "$dev: the peers' anchors differ"; exit 1; }
}
echo "== 1. two GPU peers vs two CPU peers"
swarm cpu
swarm cuda:fp32
same --tol 1e-4 "2 peers on the GPU vs on the CPU" "$d/cuda:fp32-0.jsonl" "$d/cpu-0.jsonl" \
    "$d/cuda:fp32-0.st" "$d/cpu-0.st"
echo "== 1b. each GPU peer's model swapped from host memory (--offload host): the same bits"
swarm cuda:fp32 host --offload host --fast-mem 64M
same "2 peers on the GPU, --offload host vs in memory" "$d/host-0.jsonl" "$d/cuda:fp32-0.jsonl" \
    "$d/host-0.st" "$d/cuda:fp32-0.st"
echo "== 2. vs mpirun --co2 on the GPU"
if ! command -v mpirun >/dev/null; then echo "skipped: no mpirun on this machine"; exit 0; fi
need_mpi
$MPI -np 2 $LOOM train --data "$d/d.bin" $model $opt $outer --dp 2 --co2 --device cuda:fp32 \
    --metrics "$d/mpi.jsonl" --export "$d/mpi.st"
$REF compare-losses "$d/cuda:fp32-0.jsonl" "$d/mpi.jsonl" --tol 1e-5
$REF compare-st "$d/cuda:fp32-0.st" "$d/mpi.st" --tol 1e-5
