#!/usr/bin/env bash
# serial: peers killed, dropped after --peer-timeout
# t_peer.sh — loom peer (ATOM's peers over ZeroMQ + CURVE), real processes on 127.0.0.1:
#   1. a fixed swarm of 2 and 3 peers started together equals `mpirun -np N loom train --dp N
#      --co2` with the same flags: losses per step and the final anchor within 1e-5, and the
#      peers' exported anchors are identical to each other (byte for byte);
#   2. kill -9 of one of 3 peers mid-run: the other two finish with identical anchors;
#   3. a peer started late joins (downloads the swarm's state) and ends with the same anchor;
#      a killed peer restarted with the same id rejoins;
#   4. a peer with another secret cannot join (clear error, bounded time) and the swarm's
#      trajectory is the same as without it; a peer with a different --tau (--dim, --shuffle,
#      tokenizer) is refused with a message naming it; flags that mean nothing for a peer are
#      clear errors;
#   5. checkpoints: a swarm stopped at a round end and restarted from its peers' checkpoints
#      (the first without --bootstrap: it restarts the swarm) ends bit-identical to a run that
#      never stopped;
#   6. a peer whose anchor diverges (LOOM_FAULT_DIVERGE) notices it at the next commit and
#      re-syncs: every peer ends with the same anchor; when the diverged one is the coordinator,
#      the majority of the round's anchor hashes outvotes it and only it re-syncs (negative
#      control: the build before the majority rule fails here, "v0 did not re-sync").
# asan: skip
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
need_torch
REF="$PY $(dirname "$0")/torch_ref.py"
d=${PEER_TEST_DIR:-$(mktemp -d)}
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; [ -n "${PEER_TEST_DIR:-}" ] || rm -rf "$d"; }
trap cleanup EXIT
mkshard "$d/d.bin" 64 60000 3
$LOOM keygen -o "$d/secret" 2>/dev/null
$LOOM keygen -o "$d/other" 2>/dev/null
model="--layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2 --seq 16"
opt="--lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --lr-schedule constant"
outer="--tau 3 --outer-lr 0.9 --outer-momentum 0.6 --gap-mode constant --gap-penalty 1.7 --outer-clip 0.004"
export OMP_NUM_THREADS=1
# peer ID [BOOT] [extra flags...]: starts a peer in the background (pid in $!), listening on a
# port the system picks; BOOT: the address of a peer to join (see addr).
peer() {
    local id=$1 boot=$2; shift 2
    rm -f "$d/$id.log"
    $LOOM peer --data "$d/d.bin" $model $opt --peer-id "$id" --listen 127.0.0.1:0 \
        ${boot:+--bootstrap $boot} --secret "$d/secret" --progress off \
        --peer-timeout 2 "$@" > "$d/$id.log" 2>&1 &
    pids+=($!)
}
addr() { peer_addr "$d" "$1"; } # the address peer ID listens at (tests/lib.sh)
waitall() { local rc=0; for p in "$@"; do wait "$p" || rc=$?; done; return $rc; }

echo "== 1. a fixed swarm equals mpirun --co2"
for n in 2 3; do
    steps=11
    $MPI -np $n $LOOM train --data "$d/d.bin" --dp $n --co2 $model $opt $outer --steps $steps \
        --metrics "$d/mpi$n.jsonl" --export "$d/mpi$n.st" --progress off 2>/dev/null
    started=() boot=
    for i in $(seq 0 $((n - 1))); do
        peer "p$i" "$boot" $outer --steps $steps \
            --min-peers $n --metrics "$d/p$n-$i.jsonl" --export "$d/p$n-$i.st"
        started+=($!)
        if [ $i = 0 ]; then boot=$(addr p0); fi
    done
    waitall "${started[@]}" || { for f in "$d"/p*.log; do echo "== $f"; tail -n 5 "$f"; done; exit 1; }
    for i in $(seq 0 $((n - 1))); do
        cmp "$d/p$n-0.st" "$d/p$n-$i.st" || { echo "peer $i's anchor differs from peer 0's"; exit 1; }
    done
    echo "$n peers vs mpirun: $($REF compare-losses "$d/p$n-0.jsonl" "$d/mpi$n.jsonl" --tol 1e-5 | tail -1)"
    $REF compare-st "$d/p$n-0.st" "$d/mpi$n.st" --tol 1e-5
done
# negative control: the comparison notices a different run (2 peers against 3 MPI ranks)
if same --tol 1e-5 "negative control" "$d/p2-0.jsonl" "$d/mpi3.jsonl" > /dev/null; then
    echo "2 peers matched 3 MPI ranks: the comparison cannot fail"; exit 1
fi

long="--layers 2 --heads 2 --dim 64 --vocab 64 --block-size 32 --batch 4 --seq 32 --tau 4 --peak-gflops 1"
model=$long
echo "== 2. kill -9 of one of 3 peers mid-round"
started=() boot=
for i in 0 1 2; do
    fault=$([ $i = 2 ] && echo 0:50 || true)
    LOOM_FAULT_KILL=$fault peer "k$i" "$boot" --steps 120 --min-peers 3 --export "$d/k$i.st"
    started+=($!)
    if [ $i = 0 ]; then boot=$(addr k0); fi
done
rc2=0; wait "${started[2]}" || rc2=$?
[ "$rc2" = 137 ] || { echo "peer k2 should have been killed (exit $rc2)"; cat "$d/k2.log"; exit 1; }
waitall "${started[0]}" "${started[1]}" || { for f in "$d"/k*.log; do echo "== $f"; tail -n 5 "$f"; done; exit 1; }
cmp "$d/k0.st" "$d/k1.st" || { echo "the survivors' anchors differ"; exit 1; }
echo "k2 killed at step 50; k0 and k1 finished with identical anchors"

echo "== 3. a late joiner, and a killed peer restarted with the same id"
LOOM_FAULT_KILL= peer j0 "" --steps 800 --min-peers 2 --metrics "$d/j0.jsonl" --export "$d/j0.st"
j0=$!
boot=$(addr j0)
LOOM_FAULT_KILL=0:300 peer j1 $boot --steps 800 --min-peers 2 --export "$d/j1.st"
j1=$!
rc=0; wait $j1 || rc=$?
[ "$rc" = 137 ] || { echo "j1 should have been killed (exit $rc)"; cat "$d/j1.log"; exit 1; }
LOOM_FAULT_KILL= peer j1 $boot --steps 800 --export "$d/j1.st"
j1=$!
LOOM_FAULT_KILL= peer j2 $boot --steps 800 --export "$d/j2.st"
j2=$!
waitall $j0 $j1 $j2 || { for f in "$d"/j*.log; do echo "== $f"; tail -n 5 "$f"; done; exit 1; }
grep -h "joined the swarm" "$d/j1.log" "$d/j2.log"
cmp "$d/j0.st" "$d/j1.st" && cmp "$d/j0.st" "$d/j2.st" || { echo "anchors differ after joins"; exit 1; }
echo "restarted j1 and late j2 ended with j0's anchor"

echo "== 4. a wrong secret, a different tau, flags that mean nothing here"
model="--layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2 --seq 16"
peer w0 "" $outer --steps 11 --min-peers 2 --export "$d/w0.st"
w0=$!
boot=$(addr w0)
peer w1 $boot $outer --steps 11 --min-peers 2 --export "$d/w1.st"
w1=$!
start=$(date +%s)
expect_fail "secret" $LOOM peer --data "$d/d.bin" $model $opt $outer --steps 11 --peer-id x \
    --listen 127.0.0.1:0 --bootstrap $boot --secret "$d/other" \
    --peer-timeout 2 --progress off
echo "the intruder gave up after $(( $(date +%s) - start )) s"
waitall $w0 $w1 || { for f in "$d"/w*.log; do echo "== $f"; tail -n 5 "$f"; done; exit 1; }
cmp "$d/w0.st" "$d/p2-0.st" || { echo "the intruder changed the swarm's trajectory"; exit 1; }
peer v0 "" $outer --steps 11 --min-peers 2
v0=$!
boot=$(addr v0)
expect_fail "--tau differs" $LOOM peer --data "$d/d.bin" $model $opt ${outer/--tau 3/--tau 4} \
    --steps 11 --peer-id y --listen 127.0.0.1:0 --bootstrap $boot \
    --secret "$d/secret" --peer-timeout 2 --progress off
expect_fail "--dim differs" $LOOM peer --data "$d/d.bin" ${model/--dim 32/--dim 16} $opt $outer \
    --steps 11 --peer-id z --listen 127.0.0.1:0 --bootstrap $boot \
    --secret "$d/secret" --peer-timeout 2 --progress off
expect_fail "--shuffle differs" $LOOM peer --data "$d/d.bin" $model $opt $outer --shuffle on \
    --steps 11 --peer-id s --listen 127.0.0.1:0 --bootstrap $boot \
    --secret "$d/secret" --peer-timeout 2 --progress off
mkdir -p "$d/tok/tokenizer"; cp "$d/d.bin" "$d/tok/d.bin"; echo '{"kind": "other"}' > "$d/tok/tokenizer/meta.json"
expect_fail "the data's tokenizer" $LOOM peer --data "$d/tok/d.bin" $model $opt $outer \
    --steps 11 --peer-id t --listen 127.0.0.1:0 --bootstrap $boot \
    --secret "$d/secret" --peer-timeout 2 --progress off
expect_fail "--peer-id v0 is this peer's" $LOOM peer --data "$d/d.bin" $model $opt $outer \
    --steps 11 --peer-id v0 --listen 127.0.0.1:0 --bootstrap $boot \
    --secret "$d/secret" --peer-timeout 2 --progress off
kill -9 $v0 2>/dev/null || true
for f in "--dp 2" "--zero 3" "--co2" "--comm-timeout 5" "--pp 2"; do
    expect_fail "${f%% *} has no meaning" $LOOM peer --data "$d/d.bin" $f --peer-id q \
        --listen 127.0.0.1:1 --secret "$d/secret"
done
expect_fail "needs --secret" $LOOM peer --data "$d/d.bin" --peer-id q --listen 127.0.0.1:1
expect_fail "--secret" $LOOM peer --data "$d/d.bin" --peer-id q --listen 127.0.0.1:1 --secret "$d/none"
expect_fail "--peer-id" $LOOM peer --data "$d/d.bin" --peer-id "bad id" --listen 127.0.0.1:1 --secret "$d/secret"
expect_fail "exists" $LOOM keygen -o "$d/secret"

echo "== 5. resume a swarm from its peers' checkpoints"
peer c0 "" $outer --steps 12 --min-peers 2 --save "$d/c0" --save-every 6 --keep 0 --export "$d/c0.st"
c0=$!
boot=$(addr c0)
peer c1 $boot $outer --steps 12 --min-peers 2 --save "$d/c1" --save-every 6 --keep 0 --export "$d/c1.st"
c1=$!
waitall $c0 $c1 || { for f in "$d"/c*.log; do echo "== $f"; tail -n 5 "$f"; done; exit 1; }
cmp "$d/c0.st" "$d/c1.st"
[ -f "$d/c0/step_00000006/peer_state.bin" ] || { echo "no peer state in the step-6 checkpoint"; ls "$d/c0/step_00000006"; exit 1; }
peer c0 "" $outer --steps 12 --min-peers 2 --resume "$d/c0/step_00000006" --export "$d/r0.st"
c0=$!
boot=$(addr c0)
peer c1 $boot $outer --steps 12 --min-peers 2 --resume "$d/c1/step_00000006" --export "$d/r1.st"
c1=$!
waitall $c0 $c1 || { for f in "$d"/c*.log; do echo "== $f"; tail -n 5 "$f"; done; exit 1; }
cmp "$d/r0.st" "$d/c0.st" && cmp "$d/r1.st" "$d/c0.st" || { echo "the resumed swarm ended elsewhere"; exit 1; }
echo "resumed at step 6 from both peers' checkpoints: the same anchor as the uninterrupted run"

echo "== 6. a diverged anchor is noticed and re-synced; a diverged coordinator is outvoted"
model=$long
for bad in 1 0; do # v1; then v0, the coordinator (the lowest id): the majority's anchor wins
    started=() boot=
    for i in 0 1 2; do
        div=$([ $i = $bad ] && echo 5 || true)
        LOOM_FAULT_DIVERGE=$div peer v$i "$boot" --steps 80 --min-peers 3 --export "$d/v$i.st"
        started+=($!)
        if [ $i = 0 ]; then boot=$(addr v0); fi
    done
    waitall "${started[@]}" || { for f in "$d"/v*.log; do echo "== $f"; tail -n 5 "$f"; done; exit 1; }
    grep -h "re-sync" "$d/v$bad.log" || true
    grep -q "re-synced with the swarm" "$d/v$bad.log" ||
        { echo "v$bad did not re-sync"; cat "$d/v$bad.log"; exit 1; }
    for i in 0 1 2; do
        [ $i = $bad ] && continue
        if grep -q "re-synced with the swarm" "$d/v$i.log"; then
            echo "v$i re-synced (to the diverged v$bad's anchor)"; exit 1
        fi
    done
    cmp "$d/v0.st" "$d/v1.st" && cmp "$d/v0.st" "$d/v2.st" ||
        { echo "anchors differ after the re-sync"; exit 1; }
    echo "v$bad re-synced, the others did not; all three anchors identical"
done
