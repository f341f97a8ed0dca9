#!/usr/bin/env bash
# serial: peers killed, dropped after --peer-timeout
# t_llama_peer.sh — loom peer with --arch llama (kv-heads 1 of 2 heads, untied), real processes
# on 127.0.0.1 (the harness of t_peer.sh):
#   1. a fixed swarm of 2 peers equals `mpirun -np 2 loom train --dp 2 --co2` with the same
#      flags (losses per step and the final anchor within 1e-5), and the PyTorch reference's
#      CO2 rule on the LLaMA model (tests/torch_llama.py co2, from the same initial weights:
#      losses within 1e-5, weights within 1e-4 as in t_llama.sh); the peers' exported anchors
#      are identical byte for byte;
#   2. the run description carries the family: a peer with another --kv-heads, another
#      --rope-scaling, or a GPT-2 peer, is refused by the LLaMA swarm with a message naming the
#      flag.
# Negative control: the comparison fails against the reference with another outer momentum.
# asan: skip
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
need_torch
REF="$PY $(dirname "$0")/torch_llama.py"
CMP="$PY $(dirname "$0")/torch_ref.py"
d=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$d"; }
trap cleanup EXIT
mkshard "$d/d.bin" 64 60000 3
$LOOM keygen -o "$d/secret" 2>/dev/null
model="--arch llama --kv-heads 1 --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32
       --batch 2 --seq 16 --seed 3"
opt="--lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --lr-schedule constant"
rule="--tau 3 --outer-lr 0.9 --outer-momentum 0.6 --gap-penalty 1.7 --outer-clip 0.004"
outer="$rule --gap-mode constant"
steps=11
export OMP_NUM_THREADS=1
# peer ID [BOOT] [extra flags...]: a peer in the background (pid in $!) on a port the system
# picks; BOOT: the address of a peer to join.
peer() {
    local id=$1 boot=$2; shift 2
    rm -f "$d/$id.log"
    $LOOM peer --data "$d/d.bin" --peer-id "$id" --listen 127.0.0.1:0 \
        ${boot:+--bootstrap $boot} --secret "$d/secret" --progress off --peer-timeout 2 "$@" \
        > "$d/$id.log" 2>&1 &
    pids+=($!)
}
addr() { peer_addr "$d" "$1"; } # the address peer ID listens at (tests/lib.sh)
waitall() { local rc=0; for p in "$@"; do wait "$p" || rc=$?; done; return $rc; }

echo "== 1. two LLaMA peers: mpirun --co2 and the reference's CO2 rule"
$LOOM train --data "$d/d.bin" $model --steps 0 --export "$d/w0.safetensors" --progress off \
    2> /dev/null
$MPI -np 2 $LOOM train --data "$d/d.bin" --dp 2 --co2 $model $opt $outer --steps $steps \
    --metrics "$d/mpi.jsonl" --export "$d/mpi.safetensors" --progress off 2> /dev/null
peer p0 "" $model $opt $outer --steps $steps --min-peers 2 --metrics "$d/p0.jsonl" \
    --export "$d/p0.safetensors"
a=$!
boot=$(addr p0)
peer p1 "$boot" $model $opt $outer --steps $steps --min-peers 2 --metrics "$d/p1.jsonl" \
    --export "$d/p1.safetensors"
b=$!
waitall $a $b || { for f in "$d"/p*.log; do echo "== $f"; tail -n 5 "$f"; done; exit 1; }
cmp "$d/p0.safetensors" "$d/p1.safetensors" || { echo "the peers' anchors differ"; exit 1; }
echo "the peers' anchors: identical bytes"
same --tol 1e-5 "2 llama peers vs mpirun --co2" "$d/p0.jsonl" "$d/mpi.jsonl" \
    "$d/p0.safetensors" "$d/mpi.safetensors"
$REF co2 --init "$d/w0.safetensors" --heads 2 --kv-heads 1 --data "$d/d.bin" --workers 2 \
    --batch 2 --seq 16 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 $rule --steps $steps \
    --metrics "$d/ref.jsonl" --export "$d/ref.safetensors" > /dev/null
same --tol 1e-5 --wtol 1e-4 "2 llama peers vs the reference's CO2 rule" "$d/p0.jsonl" \
    "$d/ref.jsonl" "$d/p0.safetensors" "$d/ref.safetensors"
$REF co2 --init "$d/w0.safetensors" --heads 2 --kv-heads 1 --data "$d/d.bin" --workers 2 \
    --batch 2 --seq 16 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 \
    ${rule/--outer-momentum 0.6/--outer-momentum 0.5} --steps $steps \
    --metrics "$d/bad.jsonl" --export "$d/bad.safetensors" > /dev/null
if same --tol 1e-5 --wtol 1e-4 "negative control" "$d/p0.jsonl" "$d/bad.jsonl" \
    "$d/p0.safetensors" "$d/bad.safetensors" > /dev/null; then
    echo "negative control: the reference with another outer momentum matched"; exit 1
fi
echo "negative control: the reference with outer momentum 0.5 differs"

echo "== 2. the family is part of the run description"
peer v0 "" $model $opt $outer --steps $steps --min-peers 2
v0=$!
boot=$(addr v0)
join() { # PATTERN FLAGS...: a joiner with FLAGS is refused naming PATTERN
    local pat=$1; shift
    expect_fail "$pat" $LOOM peer --data "$d/d.bin" "$@" $opt $outer --steps $steps \
        --peer-id "j$RANDOM" --listen 127.0.0.1:0 --bootstrap "$boot" --secret "$d/secret" \
        --peer-timeout 2 --progress off
}
join "--kv-heads differs" ${model/--kv-heads 1/--kv-heads 2}
join "--rope-scaling differs" $model --rope-scaling llama3 --rope-original-max-pos 64
join "--arch differs" ${model/--arch llama --kv-heads 1/}
kill -9 $v0 2> /dev/null || true
wait $v0 2> /dev/null || true
echo "t_llama_peer: ok"
