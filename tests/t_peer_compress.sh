#!/usr/bin/env bash
# serial: peers killed, dropped after --peer-timeout
# t_peer_compress.sh — loom peer --outer-compress int8 (swarm/compress.h), real processes on
# 127.0.0.1, a model of ~420k floats (two Δ pieces, the last chunk partial):
#   1. 3 peers with int8: their exported anchors are identical (byte for byte) and the loss
#      falls; each sends under a third of the bytes of the same swarm with --outer-compress none
#      (negative control: its anchors differ from the int8 run's, so the compression is on);
#   2. a swarm of 2 stopped at a round end and restarted from its peers' checkpoints (with the
#      error feedback, peer_ef.bin) ends bit-identical to the run that never stopped; restarted
#      without peer_ef.bin it ends elsewhere (the feedback is really carried);
#   3. an unknown --outer-compress, and a peer joining an int8 swarm with none, are refused
#      naming the flag;
#   4. topk (--topk-frac 0.05): 3 peers end with identical anchors, the loss falls, a peer sends
#      under a fifth of none's bytes, and its anchors differ from none's and int8's; a
#      --topk-frac outside (0, 1] and a joiner with another --topk-frac are refused;
#   5. topk with --topk-values 2bit, all-to-all and sharded: 3 peers end with identical anchors
#      (not fp32 topk's), the loss falls, a peer sends under 1/2.5 of fp32 topk's bytes; 2bit
#      without topk, and a joiner with fp32 values, are refused.
# asan: skip
set -eu
. "$(dirname "$0")/lib.sh"
d=${PEER_TEST_DIR:-$(mktemp -d)}
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; [ -n "${PEER_TEST_DIR:-}" ] || rm -rf "$d"; }
trap cleanup EXIT
mkshard "$d/d.bin" 64 60000 3
$LOOM keygen -o "$d/secret" 2>/dev/null
model="--layers 2 --heads 2 --dim 128 --vocab 64 --block-size 32 --batch 2 --seq 16"
opt="--lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --lr-schedule constant"
outer="--tau 3 --outer-lr 0.9 --outer-momentum 0.6 --gap-mode constant --gap-penalty 1.7"
export OMP_NUM_THREADS=1
peer() { # ID BOOT [flags...]: a peer in the background (pid in $!)
    local id=$1 boot=$2; shift 2
    rm -f "$d/$id.log"
    $LOOM peer --data "$d/d.bin" $model $opt $outer --peer-id "$id" --listen 127.0.0.1:0 \
        ${boot:+--bootstrap $boot} --secret "$d/secret" --progress off \
        --peer-timeout 2 "$@" > "$d/$id.log" 2>&1 &
    pids+=($!)
}
addr() { peer_addr "$d" "$1"; } # the address peer ID listens at (tests/lib.sh)
waitall() { local rc=0; for p in "$@"; do wait "$p" || rc=$?; done; return $rc; }
logs() { for f in "$@"; do echo "== $f"; tail -n 5 "$f"; done; }
# swarm NAME N STEPS [flags...]: N peers NAME0.. started together, each exporting NAME$i.st
swarm() {
    local name=$1 n=$2 steps=$3; shift 3
    local started=() boot=
    for i in $(seq 0 $((n - 1))); do
        peer "$name$i" "$boot" --steps $steps --min-peers $n --metrics "$d/$name$i.jsonl" \
            --export "$d/$name$i.st" "$@"
        started+=($!)
        if [ $i = 0 ]; then boot=$(addr "${name}0"); fi
    done
    waitall "${started[@]}" || { logs "$d/$name"*.log; exit 1; }
}
sent_mib() { sed -n 's/.*| sent \([0-9.]*\) MiB.*/\1/p' "$d/$1.log"; }
# identical NAME N: peers NAME1.. exported NAME0's anchor, byte for byte
identical() {
    for i in $(seq 1 $(($2 - 1))); do
        cmp "$d/${1}0.st" "$d/$1$i.st" || { echo "$1: peer $i's anchor differs from peer 0's"; exit 1; }
    done
}
# loss_falls NAME...: the mean of the last 3 training losses of each NAME.jsonl is 0.1 below
# the first 3's
loss_falls() {
    $PY - "${@/#/$d/}" <<'PY'
import json, sys
for name in sys.argv[1:]:
    loss = [json.loads(l)["loss"] for l in open(name + ".jsonl") if '"loss"' in l and '"val' not in l]
    first, last = sum(loss[:3]) / 3, sum(loss[-3:]) / 3
    print(f"{name.split('/')[-1]}: loss {first:.4f} -> {last:.4f} over {len(loss)} steps")
    assert last < first - 0.1, "the loss did not fall"
PY
}
# fewer A B K WHAT: peer A sent under 1/K of what peer B sent
fewer() {
    local a b
    a=$(sent_mib "$1") b=$(sent_mib "$2")
    echo "peer 0 sent $a MiB with $4, $b MiB without"
    $PY -c "import sys; a, b = float('$a'), float('$b'); sys.exit(0 if 0 < a < b / $3 else 1)" ||
        { echo "$4 did not cut the bytes sent"; exit 1; }
}
# joiner_refused WHY "SWARM FLAGS" JOINER FLAGS...: a peer with SWARM FLAGS refuses a joiner
# with the JOINER FLAGS, naming WHY
joiner_refused() {
    local why=$1 flags=$2 v0 boot
    shift 2
    peer v0 "" --steps 30 --min-peers 2 $flags
    v0=$!
    boot=$(addr v0)
    expect_fail "$why" $LOOM peer --data "$d/d.bin" $model $opt $outer --steps 30 --peer-id y \
        --listen 127.0.0.1:0 --bootstrap $boot --secret "$d/secret" --peer-timeout 2 \
        --progress off "$@"
    kill -9 $v0 2>/dev/null || true; wait $v0 2>/dev/null || true
}

echo "== 1. 3 peers with int8: identical anchors, a falling loss, a quarter of the bytes"
swarm q 3 15 --outer-compress int8
swarm f 3 15 --outer-compress none
identical q 3
identical f 3
if cmp -s "$d/q0.st" "$d/f0.st"; then echo "int8 ended where none did: no compression"; exit 1; fi
loss_falls q0 f0
fewer q0 f0 3 int8

echo "== 2. resume from checkpoints with the error feedback"
peer c0 "" --steps 12 --min-peers 2 --outer-compress int8 --save "$d/c0" --save-every 6 --keep 0 --export "$d/c0.st"
c0=$!
boot=$(addr c0)
peer c1 $boot --steps 12 --min-peers 2 --outer-compress int8 --save "$d/c1" --save-every 6 --keep 0 --export "$d/c1.st"
c1=$!
waitall $c0 $c1 || { logs "$d"/c*.log; exit 1; }
cmp "$d/c0.st" "$d/c1.st"
for i in 0 1; do
    [ -f "$d/c$i/step_00000006/peer_ef.bin" ] || { echo "no peer_ef.bin at step 6"; ls "$d/c$i/step_00000006"; exit 1; }
done
resume() { # TAG: restarts the swarm of 2 from the step-6 checkpoints, exports TAG0/1.st
    peer c0 "" --steps 12 --min-peers 2 --outer-compress int8 --resume "$d/c0/step_00000006" --export "$d/${1}0.st"
    c0=$!
    boot=$(addr c0)
    peer c1 $boot --steps 12 --min-peers 2 --outer-compress int8 --resume "$d/c1/step_00000006" --export "$d/${1}1.st"
    c1=$!
    waitall $c0 $c1 || { logs "$d"/c*.log; exit 1; }
}
resume r
cmp "$d/r0.st" "$d/c0.st" && cmp "$d/r1.st" "$d/c0.st" || { echo "the resumed swarm ended elsewhere"; exit 1; }
echo "resumed at step 6 with its error feedback: the same anchor as the uninterrupted run"
rm "$d"/c[01]/step_00000006/peer_ef.bin
resume z
grep -h "holds no error feedback" "$d/c0.log"
if cmp -s "$d/z0.st" "$d/c0.st"; then echo "resumed without the feedback, yet the same anchor"; exit 1; fi
echo "resumed without peer_ef.bin: another anchor (the feedback is carried)"

echo "== 3. bad input"
expect_fail "--outer-compress: 'zstd' is not one of none|int8" $LOOM peer --data "$d/d.bin" \
    --outer-compress zstd --peer-id q --listen 127.0.0.1:1 --secret "$d/secret"
joiner_refused "outer-compress differs" "--outer-compress int8"
joiner_refused "outer-compress differs" "--outer-compress int8" --outer-compress none

echo "== 4. topk"
swarm t 3 15 --outer-compress topk --topk-frac 0.05
identical t 3
if cmp -s "$d/t0.st" "$d/f0.st" || cmp -s "$d/t0.st" "$d/q0.st"; then
    echo "topk ended where none or int8 did"; exit 1
fi
loss_falls t0
fewer t0 f0 5 "topk 0.05"
for bad in 0 1.5 -1; do
    expect_fail "--topk-frac" $LOOM peer --data "$d/d.bin" $model --outer-compress topk \
        --topk-frac $bad --peer-id q --listen 127.0.0.1:0 --secret "$d/secret" --steps 1
done
joiner_refused "topk-frac differs" "--outer-compress topk --topk-frac 0.05" \
    --outer-compress topk --topk-frac 0.1

echo "== 5. topk with 2-bit values"
for ex in all sharded; do
    swarm b$ex 3 15 --outer-compress topk --topk-frac 0.05 --topk-values 2bit --peer-exchange $ex
    identical b$ex 3
done
if cmp -s "$d/ball0.st" "$d/t0.st"; then echo "2bit ended where fp32 topk did"; exit 1; fi
loss_falls ball0
fewer ball0 t0 2.5 "2-bit values (against fp32 topk values, all-to-all)"
expect_fail "--topk-values 2bit needs --outer-compress topk" $LOOM peer --data "$d/d.bin" $model \
    --outer-compress int8 --topk-values 2bit --peer-id q --listen 127.0.0.1:0 \
    --secret "$d/secret" --steps 1
joiner_refused "topk-values differs" "--outer-compress topk --topk-frac 0.05 --topk-values 2bit" \
    --outer-compress topk --topk-frac 0.05
echo "all ok"
