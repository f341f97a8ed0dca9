#!/usr/bin/env bash
# t_peer_emu.sh — loom peer on a device (--device emu: the CPU's kernels on addresses the host
# cannot read, src/backend/emu.c): the model lives on the device and the peer's outer state and
# the swarm's arrays in host memory, so each round end downloads x and uploads the new anchor.
# A swarm of 2 emu peers equals the same swarm of 2 cpu peers bit for bit (every peer's
# metrics records and exported anchor), with weight decay, clipping, the adaptive gap penalty
# and int8-compressed Δs (error feedback), and the sharded exchange with top-k; and 2 emu peers
# whose models swap from host memory (--offload host, --recompute) equal 2 in-memory cpu peers.
# So do 2 emu peers swapped through a disk under the device (--offload disk, the outer state and
# the arrays in files), and through host memory above it (--offload host --offload-dir
# --host-mem). --offload-dir alone on the device is refused, naming why (the outer
# state in files needs the model in host memory or swapped).
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$d"; }
trap cleanup EXIT
mkshard "$d/d.bin" 64 60000 3
$LOOM keygen -o "$d/secret" 2>/dev/null
model="--layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2 --seq 16"
opt="--lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --lr-schedule constant --progress off"
outer="--tau 3 --outer-lr 0.9 --outer-momentum 0.6 --steps 9 --min-peers 2 --peer-timeout 10"
export OMP_NUM_THREADS=1
swarm() { # DEVICE EXTRA...: two peers started together; $d/DEVICE-{0,1}.{jsonl,st}
    local dev=$1 boot= i started=()
    shift
    for i in 0 1; do
        rm -f "$d/$dev-$i.log"
        $LOOM peer --data "$d/d.bin" $model $opt $outer "$@" --device "$dev" --peer-id "p$i" \
            --listen 127.0.0.1:0 ${boot:+--bootstrap $boot} --secret "$d/secret" \
            --metrics "$d/$dev-$i.jsonl" --export "$d/$dev-$i.st" > "$d/$dev-$i.log" 2>&1 &
        pids+=($!) started+=($!)
        [ $i = 1 ] || boot=$(peer_addr "$d" "$dev-0")
    done
    for i in 0 1; do
        wait "${started[$i]}" || { tail -n 5 "$d/$dev-$i.log"; exit 1; }
    done
}
for extra in "" "--gap-mode adaptive --outer-compress int8" \
    "--peer-exchange sharded --outer-compress topk"; do
    swarm cpu $extra
    swarm emu $extra
    for i in 0 1; do
        same "peer $i on emu vs cpu${extra:+ ($extra)}" "$d/emu-$i.jsonl" "$d/cpu-$i.jsonl" \
            "$d/emu-$i.st" "$d/cpu-$i.st"
    done
done
# ATOM's system on the device: each peer's model swapped from host memory (--offload host, its
# outer state and the swarm's arrays in host memory) equals the in-memory cpu swarm
swarm cpu --recompute
swarm emu --recompute --offload host --fast-mem 64M
for i in 0 1; do
    grep -q "offload host: the model is swapped from host memory" "$d/emu-$i.log" ||
        { echo "peer $i: not swapped"; cat "$d/emu-$i.log"; exit 1; }
    same "peer $i on emu --offload host vs cpu in memory" "$d/emu-$i.jsonl" "$d/cpu-$i.jsonl" \
        "$d/emu-$i.st" "$d/cpu-$i.st"
done
expect_fail "needs the model in host memory" $LOOM peer --data "$d/d.bin" $model $opt $outer \
    --device emu --peer-id q --listen 127.0.0.1:0 --secret "$d/secret" --offload-dir "$d/o"
# swapped through a disk under the device, the outer state and the arrays in files there too
swarm emu --recompute --offload disk --offload-dir "$d/o" --fast-mem 64M
for i in 0 1; do
    same "peer $i on emu --offload disk vs cpu in memory" "$d/emu-$i.jsonl" "$d/cpu-$i.jsonl" \
        "$d/emu-$i.st" "$d/cpu-$i.st"
done
# host memory above that disk (--host-mem: here all of the small model's state fits in it),
# the outer state and the arrays in files
swarm emu --recompute --offload host --offload-dir "$d/o" --host-mem 20M --fast-mem 64M
for i in 0 1; do
    grep -q "all of it in page-locked host memory" "$d/emu-$i.log" ||
        { echo "peer $i: not in host memory"; cat "$d/emu-$i.log"; exit 1; }
    same "peer $i on emu --offload host --host-mem vs cpu in memory" "$d/emu-$i.jsonl" \
        "$d/cpu-$i.jsonl" "$d/emu-$i.st" "$d/cpu-$i.st"
done
