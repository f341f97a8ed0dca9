#!/usr/bin/env bash
# t_peer.sh — loom peer (ATOM's peers over ZeroMQ + CURVE), real processes on 127.0.0.1:
#   1. a fixed swarm of 2 and 3 peers started together equals `mpirun -np N loom train --dp N
#      --co2` with the same flags: losses per step and the final anchor within 1e-5, and the
#      peers' exported anchors are identical to each other (byte for byte);
#   2. kill -9 of one of 3 peers mid-run: the other two finish with identical anchors;
#   3. a peer started late joins (downloads the swarm's state) and ends with the same anchor;
#      a killed peer restarted with the same id rejoins;
#   4. a peer with another secret cannot join (clear error, bounded time) and the swarm's
#      trajectory is the same as without it; a peer with a different --tau is refused with a
#      message naming --tau; flags that mean nothing for a peer are clear errors.
# asan: skip
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
need_torch
REF="$PY $(dirname "$0")/torch_ref.py"
d=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$d"; }
trap cleanup EXIT
mkshard "$d/d.bin" 64 60000 3
$LOOM keygen -o "$d/secret" 2>/dev/null
$LOOM keygen -o "$d/other" 2>/dev/null
port=$((20000 + RANDOM % 20000))
model="--layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2 --seq 16"
opt="--lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --lr-schedule constant"
outer="--tau 3 --outer-lr 0.9 --outer-momentum 0.6 --gap-mode constant --gap-penalty 1.7 --outer-clip 0.004"
export OMP_NUM_THREADS=1
# peer ID PORT [BOOT] [extra flags...]: starts a peer in the background (pid in $!).
peer() {
    local id=$1 p=$2 boot=$3; shift 3
    $LOOM peer --data "$d/d.bin" $model $opt --peer-id "$id" --listen "127.0.0.1:$p" \
        ${boot:+--bootstrap 127.0.0.1:$boot} --secret "$d/secret" --progress off \
        --peer-timeout 2 "$@" > "$d/$id.log" 2>&1 &
    pids+=($!)
}
waitall() { local rc=0; for p in "$@"; do wait "$p" || rc=$?; done; return $rc; }

echo "== 1. a fixed swarm equals mpirun --co2"
for n in 2 3; do
    steps=11
    $MPI -np $n $LOOM train --data "$d/d.bin" --dp $n --co2 $model $opt $outer --steps $steps \
        --metrics "$d/mpi$n.jsonl" --export "$d/mpi$n.st" --progress off 2>/dev/null
    started=()
    for i in $(seq 0 $((n - 1))); do
        peer "p$i" $((port + i)) "$([ $i -gt 0 ] && echo $port || true)" $outer --steps $steps \
            --min-peers $n --metrics "$d/p$n-$i.jsonl" --export "$d/p$n-$i.st"
        started+=($!)
    done
    waitall "${started[@]}" || { tail -5 "$d"/p*.log; exit 1; }
    for i in $(seq 0 $((n - 1))); do
        cmp "$d/p$n-0.st" "$d/p$n-$i.st" || { echo "peer $i's anchor differs from peer 0's"; exit 1; }
    done
    echo "$n peers vs mpirun: $($REF compare-losses "$d/p$n-0.jsonl" "$d/mpi$n.jsonl" --tol 1e-5 | tail -1)"
    $REF compare-st "$d/p$n-0.st" "$d/mpi$n.st" --tol 1e-5
    port=$((port + 10))
done
