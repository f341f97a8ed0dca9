#!/usr/bin/env bash
# long: started first (tests/run.sh)
# t_peer_offload_same.sh — loom peer --offload disk (a peer whose model — parameters, gradients,
# AdamW moments — is swapped through the slow tier) and --offload-dir alone equal the swarm in
# memory, real processes on 127.0.0.1 (no peer dies here, and --peer-timeout is 10 s, so a busy
# machine changes nothing: not serial; kills and re-syncs: t_peer_offload.sh):
#   1. a swarm of 2 and of 3 offloaded peers started together (weight decay, clipping,
#      --grad-accum 2) equals the same swarm in memory bit for bit: every peer's losses, local
#      losses, gradient norms per step identical and its exported anchor byte-identical; and it
#      equals `mpirun -np N loom train --dp N --co2 --offload` (losses and final anchor within
#      1e-5, as t_peer.sh compares a swarm with --co2: the sums run in another order); with
#      clipping off (the update fused into the backward) likewise. A mixed swarm (one peer
#      offloaded, one in memory) is the same swarm too. Negative control: the comparisons tell
#      2 peers from 3;
#   4. checkpoints: an offloaded peer's round-end checkpoint resumes as a plain peer and a plain
#      peer's checkpoint resumes with --offload, onto the uninterrupted run's anchor byte for
#      byte;
#   5. the outer state and the swarm's arrays (the Δs, averages, snapshots) live in files under
#      --offload-dir: swarms of 3 peers with a 3.2M-parameter model (all-to-all + int8, sharded +
#      topk; each bit-identical to the swarm in memory) and a join from two offloaded donors
#      keep every peer's whole-process peak RSS within --fast-mem 112M, where those arrays in
#      host memory (LOOM_PEER_NO_SPILL, the negative control) overrun it;
#   6. --offload-dir without --offload: the model in memory, the outer state and the swarm's
#      arrays in files: the sharded topk swarm of section 5 bit-identical to it in memory, each
#      peer's peak RSS at least 4 P floats below the in-memory peer's; no files left; --fast-mem
#      without --offload is refused, and so is `loom train --offload-dir` without it.
# The tier's scratch files are gone after every run.
# asan: skip
set -eu
PT=10
. "$(dirname "$0")/peer_offload_lib.sh"

echo "== 1. offloaded swarms equal in-memory ones bit for bit, and mpirun --co2 --offload"
for n in 2 3; do
    steps=11
    $MPI -np $n $LOOM train --data "$d/d.bin" --dp $n --co2 $model $opt $outer --steps $steps \
        $OFF --metrics "$d/mpi$n.jsonl" --export "$d/mpi$n.st" --progress off 2>"$d/mpi.err" ||
        { cat "$d/mpi.err"; exit 1; }
    swarm "m$n-" $n --steps $steps
    swarm "o$n-" $n --steps $steps $OFF
    clean "$n offloaded peers"
    grep -q '"io_ms"' "$d/o$n-0.jsonl" || { echo "no io_ms in an offloaded peer's records"; exit 1; }
    for i in $(seq 0 $((n - 1))); do
        same_peer "$n peers, peer $i offloaded vs in memory" "m$n-$i" "o$n-$i"
        cmp "$d/o$n-0.st" "$d/o$n-$i.st" || { echo "peer $i's anchor differs from peer 0's"; exit 1; }
    done
    echo "$n offloaded peers = $n in memory: identical records ($(grep -c '"loss"' "$d/o$n-0.jsonl") steps per peer) and anchors"
    echo "$n offloaded peers vs mpirun --co2 --offload: $($REF compare-losses "$d/o$n-0.jsonl" "$d/mpi$n.jsonl" --tol 1e-5 | tail -1)"
    $REF compare-st "$d/o$n-0.st" "$d/mpi$n.st" --tol 1e-5
done
# clipping off: each unit's AdamW runs right after its backward (the fused update)
swarm f 2 --steps 11 --grad-clip 0
swarm g 2 --steps 11 --grad-clip 0 $OFF
same_peer "2 peers, --grad-clip 0 (the update fused into the backward)" f0 g0
same_peer "2 peers, --grad-clip 0 (the update fused into the backward)" f1 g1
echo "2 offloaded peers with --grad-clip 0 (fused update) = 2 in memory"
F0="$OFF" swarm x 2 --steps 11 # one offloaded, one in memory
same_peer "a mixed swarm's offloaded peer" m2-0 x0
same_peer "a mixed swarm's in-memory peer" m2-1 x1
echo "a mixed swarm (x0 offloaded, x1 in memory) = the swarm in memory"
# negative control: the comparisons notice a different run (2 peers against 3)
if diff <(numbers "$d/o2-0.jsonl") <(numbers "$d/m3-0.jsonl") > /dev/null; then
    echo "2 offloaded peers matched 3 in memory: the comparison cannot fail"; exit 1
fi
if $REF compare-losses "$d/o2-0.jsonl" "$d/mpi3.jsonl" --tol 1e-5 > /dev/null 2>&1; then
    echo "2 offloaded peers matched 3 MPI ranks: the comparison cannot fail"; exit 1
fi
echo "negative control: 2 peers vs 3 differ in both comparisons: seen"


echo "== 4. checkpoints: offloaded -> plain, plain -> offloaded"
model="--layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2 --seq 16"
ck="--steps 12 --save-every 6 --keep 0"
F0="$OFF --save $d/co0" F1="$OFF --save $d/co1" swarm co 2 $ck
F0="--save $d/cm0" F1="--save $d/cm1" swarm cm 2 $ck
same_peer "an offloaded swarm saving checkpoints" cm0 co0
[ -f "$d/co0/step_00000006/peer_state.bin" ] ||
    { echo "no peer state in the offloaded step-6 checkpoint"; ls "$d/co0/step_00000006"; exit 1; }
F0="--resume $d/co0/step_00000006" F1="$OFF --resume $d/cm1/step_00000006" swarm r 2 --steps 12
cmp "$d/r0.st" "$d/co0.st" && cmp "$d/r1.st" "$d/co0.st" ||
    { echo "the resumed swarm ended elsewhere"; exit 1; }
clean "checkpoints"
echo "resumed at step 6: r0 in memory from an offloaded checkpoint, r1 offloaded from an in-memory one: the uninterrupted anchor"


echo "== 5. the outer state and the swarm's arrays live in files: each peer within --fast-mem"
# 3.2M parameters: P floats = 12.1 MiB. The anchor, outer momentum, Δ/average, error feedback,
# this peer's Δs of two rounds, the other participants' Δs, the 4 averages kept and a donor's
# snapshot would be 12-15 x 12.1 MiB in host memory; under --offload they are files under
# --offload-dir, walked a span at a time.
model="--layers 4 --heads 4 --dim 256 --vocab 64 --block-size 32 --batch 2 --seq 16 --peak-gflops 1"
budget=112
B="--offload disk --offload-dir $d/off --fast-mem ${budget}M --tau 2 --lr 1e-3"
cat > "$d/rss.py" <<'PY'
import resource, subprocess, sys
rc = subprocess.call(sys.argv[1:])
print(f"peer maxrss {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.1f} MiB",
      file=sys.stderr)
sys.exit(rc)
PY
peaks() { grep -ho 'peer maxrss [0-9.]*' "$@" | awk '{print $3}'; }
within() { # within WHAT LOG...: every peer's whole-process peak <= the budget
    local what=$1 x n=0; shift
    for x in $(peaks "$@"); do
        n=$((n + 1))
        awk -v x="$x" -v b=$budget 'BEGIN{exit !(x <= b)}' ||
            { echo "$what: a peer peaked at $x MiB > --fast-mem ${budget}M"; exit 1; }
    done
    [ "$n" = $# ] || { echo "$what: $n peaks for $# peers"; exit 1; }
    echo "$what: peak RSS $(peaks "$@" | tr '\n' ' ')MiB <= --fast-mem ${budget}M"
}
for mode in "all int8" "sharded topk"; do
    set -- $mode
    X="--steps 8 --peer-exchange $1 --outer-compress $2"
    WRAP="$PY $d/rss.py" swarm s 3 $X $B
    WRAP="$PY $d/rss.py" swarm t 3 $X --tau 2 --lr 1e-3 # (the same swarm in memory)
    for i in 0 1 2; do same_peer "3 peers, $1 exchange, $2, offloaded vs in memory" "t$i" "s$i"; done
    within "3 offloaded peers, $1 exchange, --outer-compress $2 (= the swarm in memory)" \
        "$d/s0.log" "$d/s1.log" "$d/s2.log"
    clean "a swarm of 3 at ${budget}M"
done
# a joiner downloads from two offloaded donors (their snapshots) into its own files
WRAP="$PY $d/rss.py" peer k0 "" --steps 40 --min-peers 2 --metrics "$d/k0.jsonl" $B
k0=$!
boot=$(addr k0)
WRAP="$PY $d/rss.py" peer k1 "$boot" --steps 40 $B
k1=$!
for _ in $(seq 100); do grep -q '"step":10,' "$d/k0.jsonl" 2>/dev/null && break; sleep 0.2; done
WRAP="$PY $d/rss.py" peer k2 "$boot" --steps 40 $B
k2=$!
waitall $k0 $k1 $k2 || { logs k; exit 1; }
grep -q "joined the swarm" "$d/k2.log" || { echo "k2 did not join"; cat "$d/k2.log"; exit 1; }
within "two offloaded donors and an offloaded joiner" "$d/k0.log" "$d/k1.log" "$d/k2.log"
clean "a join at ${budget}M"
# negative control: the same arrays in host memory (LOOM_PEER_NO_SPILL) overrun the budget
LOOM_PEER_NO_SPILL=1 WRAP="$PY $d/rss.py" swarm n 3 --steps 8 $B
if (within "x" "$d/n0.log" "$d/n1.log" "$d/n2.log") > /dev/null 2>&1; then
    echo "the peers' arrays in host memory stayed within the budget: the bound cannot fail"; exit 1
fi
echo "negative control: with the arrays in host memory a peer peaks at $(peaks "$d"/n?.log | sort -n | tail -1) MiB > ${budget}M"

echo "== 6. --offload-dir without --offload: the model in memory, the swarm's arrays in files"
# (after section 5's last mode: X is the sharded topk swarm, t0..t2 its in-memory run)
WRAP="$PY $d/rss.py" swarm u 3 $X --tau 2 --lr 1e-3 --offload-dir "$d/off"
for i in 0 1 2; do
    same_peer "3 peers, sharded topk, arrays in files vs in memory" "t$i" "u$i"
    grep -q "the model in memory; the outer state and the swarm's arrays" "$d/u$i.log" ||
        { echo "u$i did not say where its arrays live"; cat "$d/u$i.log"; exit 1; }
    a=$(peaks "$d/u$i.log") b=$(peaks "$d/t$i.log")
    # P = 3.2M floats = 12.1 MiB; in memory at least anchor, momentum, Δ/average, error
    # feedback and the Δs and averages kept
    awk -v a="$a" -v b="$b" 'BEGIN{exit !(a + 4 * 12.1 <= b)}' ||
        { echo "u$i: peak RSS $a MiB with its arrays in files, $b MiB in memory: not 4 P below"; exit 1; }
    echo "u$i: peak RSS $a MiB (arrays in files) against $b MiB (in memory)"
done
clean "a swarm with its arrays in files"
expect_fail "need --offload disk" $LOOM peer --data "$d/d.bin" $model --fast-mem 64M \
    --peer-id z --listen 127.0.0.1:0 --secret "$d/secret"
expect_fail "need --offload disk" $LOOM train --data "$d/d.bin" $model --steps 1 --offload-dir "$d/off"
echo "refused: --fast-mem on a peer without --offload, --offload-dir on loom train without it"
