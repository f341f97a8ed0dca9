#!/usr/bin/env bash
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

echo "== 1. 3 peers with int8: identical anchors, a falling loss, a quarter of the bytes"
swarm q 3 15 --outer-compress int8
swarm f 3 15 --outer-compress none
for i in 1 2; do
    cmp "$d/q0.st" "$d/q$i.st" || { echo "int8: peer $i's anchor differs from peer 0's"; exit 1; }
    cmp "$d/f0.st" "$d/f$i.st" || { echo "none: peer $i's anchor differs from peer 0's"; exit 1; }
done
if cmp -s "$d/q0.st" "$d/f0.st"; then echo "int8 ended where none did: no compression"; exit 1; fi
$PY - "$d/q0.jsonl" "$d/f0.jsonl" <<'PY'
import json, sys
for path in sys.argv[1:]:
    loss = [json.loads(l)["loss"] for l in open(path) if '"loss"' in l and '"val' not in l]
    first, last = sum(loss[:3]) / 3, sum(loss[-3:]) / 3
    print(f"{path.split('/')[-1]}: loss {first:.4f} -> {last:.4f} over {len(loss)} steps")
    assert last < first - 0.1, "the loss did not fall"
PY
q=$(sent_mib q0) f=$(sent_mib f0)
echo "peer 0 sent $q MiB with int8, $f MiB with none"
$PY -c "import sys; q, f = float('$q'), float('$f'); sys.exit(0 if 0 < q < f / 3 else 1)" ||
    { echo "int8 did not cut the bytes sent"; exit 1; }

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
peer v0 "" --steps 30 --min-peers 2 --outer-compress int8
v0=$!
boot=$(addr v0)
expect_fail "outer-compress differs" $LOOM peer --data "$d/d.bin" $model $opt $outer \
    --steps 30 --peer-id y --listen 127.0.0.1:0 --bootstrap $boot \
    --secret "$d/secret" --peer-timeout 2 --progress off
expect_fail "outer-compress differs" $LOOM peer --data "$d/d.bin" $model $opt $outer \
    --outer-compress none --steps 30 --peer-id y --listen 127.0.0.1:0 --bootstrap $boot \
    --secret "$d/secret" --peer-timeout 2 --progress off
kill -9 $v0 2>/dev/null || true; wait $v0 2>/dev/null || true

echo "== 4. topk"
swarm t 3 15 --outer-compress topk --topk-frac 0.05
for i in 1 2; do
    cmp "$d/t0.st" "$d/t$i.st" || { echo "topk: peer $i's anchor differs from peer 0's"; exit 1; }
done
if cmp -s "$d/t0.st" "$d/f0.st" || cmp -s "$d/t0.st" "$d/q0.st"; then
    echo "topk ended where none or int8 did"; exit 1
fi
$PY - "$d/t0.jsonl" <<'PY'
import json, sys
loss = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
first, last = sum(loss[:3]) / 3, sum(loss[-3:]) / 3
print(f"topk: loss {first:.4f} -> {last:.4f}")
assert last < first - 0.1, "the loss did not fall"
PY
t=$(sent_mib t0)
echo "peer 0 sent $t MiB with topk 0.05, $f MiB with none"
$PY -c "import sys; t, f = float('$t'), float('$f'); sys.exit(0 if 0 < t < f / 5 else 1)" ||
    { echo "topk did not cut the bytes sent"; exit 1; }
for bad in 0 1.5 -1; do
    expect_fail "--topk-frac" $LOOM peer --data "$d/d.bin" $model --outer-compress topk \
        --topk-frac $bad --peer-id q --listen 127.0.0.1:0 --secret "$d/secret" --steps 1
done
peer v0 "" --steps 30 --min-peers 2 --outer-compress topk --topk-frac 0.05
v0=$!
boot=$(addr v0)
expect_fail "topk-frac differs" $LOOM peer --data "$d/d.bin" $model $opt $outer \
    --outer-compress topk --topk-frac 0.1 --steps 30 --peer-id y --listen 127.0.0.1:0 \
    --bootstrap $boot --secret "$d/secret" --peer-timeout 2 --progress off
kill -9 $v0 2>/dev/null || true; wait $v0 2>/dev/null || true

echo "== 5. topk with 2-bit values"
for ex in all sharded; do
    swarm b$ex 3 15 --outer-compress topk --topk-frac 0.05 --topk-values 2bit --peer-exchange $ex
    for i in 1 2; do
        cmp "$d/b${ex}0.st" "$d/b$ex$i.st" || { echo "2bit $ex: peer $i's anchor differs"; exit 1; }
    done
done
if cmp -s "$d/ball0.st" "$d/t0.st"; then echo "2bit ended where fp32 topk did"; exit 1; fi
$PY - "$d/ball0.jsonl" <<'PY'
import json, sys
loss = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
first, last = sum(loss[:3]) / 3, sum(loss[-3:]) / 3
print(f"topk 2bit: loss {first:.4f} -> {last:.4f}")
assert last < first - 0.1, "the loss did not fall"
PY
b=$(sent_mib ball0)
echo "peer 0 sent $b MiB with topk 0.05 2bit values, $t MiB with fp32 values (all-to-all)"
$PY -c "import sys; b, t = float('$b'), float('$t'); sys.exit(0 if 0 < b < t / 2.5 else 1)" ||
    { echo "2-bit values did not cut the bytes sent"; exit 1; }
expect_fail "--topk-values 2bit needs --outer-compress topk" $LOOM peer --data "$d/d.bin" $model \
    --outer-compress int8 --topk-values 2bit --peer-id q --listen 127.0.0.1:0 \
    --secret "$d/secret" --steps 1
peer v0 "" --steps 30 --min-peers 2 --outer-compress topk --topk-frac 0.05 --topk-values 2bit
v0=$!
boot=$(addr v0)
expect_fail "topk-values differs" $LOOM peer --data "$d/d.bin" $model $opt $outer \
    --outer-compress topk --topk-frac 0.05 --steps 30 --peer-id y --listen 127.0.0.1:0 \
    --bootstrap $boot --secret "$d/secret" --peer-timeout 2 --progress off
kill -9 $v0 2>/dev/null || true; wait $v0 2>/dev/null || true
echo "all ok"
