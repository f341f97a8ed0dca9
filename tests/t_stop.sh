#!/usr/bin/env bash
# serial: signals and --stop-grace periods
# t_stop.sh — a stop signal (SIGTERM, SIGINT, SIGUSR1) saves the run (docs/USAGE.md "Stopping a run"):
#   1. one process: a real SIGTERM from outside stops it at a step boundary with exit 8, a
#      checkpoint of that step and a message; resuming continues bit-identically (losses and
#      exported weights equal to a run that was never stopped); SIGINT and SIGUSR1 do the same;
#      without --save it exits 8 saying nothing is kept;
#   2. a second signal during the stop's save, or a grace period that runs out, exits 9 at once
#      and `latest` still names the last complete checkpoint (the message says so); so does a
#      stop whose save fails;
#   3. MPI: a signal that reaches ONE rank of a CO2 job whose round end does not fit the grace
#      period stops every rank at the same step mid-round (unsharded, sharded, offload; and
#      over tp+sp / cp workers, the signal on one rank of one worker), and each resumes
#      bit-identically (the other layouts, and CO2 at a round end: tests/t_stop_mpi.sh);
#   4. scripts/loom-mpirun turns a SIGTERM into a SIGUSR1 for the job (which mpirun forwards
#      without killing) and raises odls_base_sigkill_timeout to --stop-grace + 5;
#   5. loom peer: stops at the next round end (leaving the swarm, which goes on) or, when the
#      round's rest does not fit the grace period, at once with the state of the round's start;
#      either checkpoint resumes.
# Negative control: the comparison of the resumed run is run against a run with other data and
# must fail.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; rm -rf "$d"; }
trap cleanup EXIT
. "$(dirname "$0")/stop_lib.sh"
stop_setup

echo "== 1. one process"
flags="--data $d/train.bin $base --steps 12"
$LOOM train $flags --metrics "$d/full.jsonl" --export "$d/full.st" 2>/dev/null
# a real signal from outside, at whatever step the run has reached
long="--data $d/train.bin $base --steps 1000000 --lr-schedule constant --warmup 0"
$LOOM train $long --save "$d/real" --metrics "$d/real.jsonl" > "$d/real.log" 2>&1 &
pid=$!
pids+=($pid)
for _ in $(seq 600); do [ "$(cat "$d/real.jsonl" 2>/dev/null | wc -l)" -ge 5 ] && break; sleep 0.1; done
kill -TERM $pid
rc=0; wait $pid || rc=$?
[ "$rc" = 8 ] || { echo "SIGTERM: exit $rc, want 8"; cat "$d/real.log"; exit 1; }
last=$(tail -1 "$d/real.jsonl" | grep -o '"step":[0-9]*' | cut -d: -f2)
test "$(cat "$d/real/latest")" = "$(printf 'step_%08d' "$last")"
grep -q "SIGTERM: stopped after step $last of 1000000; saving" "$d/real.log"
grep -q "saved step $last to $d/real in" "$d/real.log"
echo "SIGTERM from outside at step $last: exit 8, latest $(cat "$d/real/latest")"
# the stopped run resumes bit-identically (the hook stops it at the same step every time)
for sig in TERM INT USR1; do
    rm -rf "$d/ck" "$d/a.jsonl" "$d/b.jsonl"
    rc=0; LOOM_FAULT_SIGNAL=0:5:$sig $LOOM train $flags --save "$d/ck" --metrics "$d/a.jsonl" \
        > "$d/a.log" 2>&1 || rc=$?
    [ "$rc" = 8 ] || { echo "SIG$sig: exit $rc"; cat "$d/a.log"; exit 1; }
    test "$(cat "$d/ck/latest")" = step_00000005
    $LOOM train $flags --resume "$d/ck" --metrics "$d/b.jsonl" --export "$d/b.st" 2>/dev/null
    resumed "SIG$sig" "$d/a.jsonl" "$d/b.jsonl" "$d/full.jsonl" "$d/b.st" "$d/full.st"
    echo "SIG$sig at step 5: exit 8, step_00000005, resumed bit-identically"
done
# negative control: the comparison notices a resume onto other data
$LOOM train ${flags/train.bin/other.bin} --resume "$d/ck" --metrics "$d/neg.jsonl" \
    --export "$d/neg.st" 2>/dev/null
if resumed neg "$d/a.jsonl" "$d/neg.jsonl" "$d/full.jsonl" "$d/neg.st" "$d/full.st" > /dev/null; then
    echo "a resume on other data passed the comparison: it cannot fail"; exit 1
fi
rc=0; LOOM_FAULT_SIGNAL=0:3 $LOOM train $flags > "$d/nosave.log" 2>&1 || rc=$?
[ "$rc" = 8 ] && grep -q "no --save, so nothing is kept" "$d/nosave.log"
echo "no --save: exit 8, says nothing is kept"

echo "== 2. a second signal, and the grace period"
# the stop's save is slowed (LOOM_SAVE_DELAY) so that a second signal lands inside it
rm -rf "$d/ck2"
LOOM_SAVE_DELAY=30@7 LOOM_FAULT_SIGNAL=0:7 $LOOM train $flags --save "$d/ck2" --save-every 2 \
    --stop-grace 0 > "$d/two.log" 2>&1 &
pid=$!
pids+=($pid)
for _ in $(seq 1200); do grep -q "stopped after step 7" "$d/two.log" && break; sleep 0.1; done
grep -q "stopped after step 7" "$d/two.log" || { echo "never reached the stop"; cat "$d/two.log"; exit 1; }
kill -INT $pid
rc=0; wait $pid || rc=$?
[ "$rc" = 9 ] || { echo "second signal: exit $rc, want 9"; cat "$d/two.log"; exit 1; }
grep -q "SIGINT again: exiting now without finishing the checkpoint; $d/ck2/latest names step 6" "$d/two.log" || { cat "$d/two.log"; exit 1; }
test "$(cat "$d/ck2/latest")" = step_00000006
$LOOM export "$d/ck2" -o "$d/ck2.st" 2>/dev/null
echo "second signal during the save: exit 9, latest still step_00000006 and loads"
rm -rf "$d/ck3"
rc=0; LOOM_SAVE_DELAY=30@7 LOOM_FAULT_SIGNAL=0:7 $LOOM train $flags --save "$d/ck3" --save-every 4 \
    --stop-grace 2 > "$d/grace.log" 2>&1 || rc=$?
[ "$rc" = 9 ] || { echo "grace: exit $rc, want 9"; cat "$d/grace.log"; exit 1; }
grep -q "the stop grace period ran out: exiting now without finishing the checkpoint; $d/ck3/latest names step 4" "$d/grace.log"
test "$(cat "$d/ck3/latest")" = step_00000004
echo "grace period ran out during the save: exit 9, latest still step_00000004"
rm -rf "$d/ck4"
rc=0; LOOM_FAULT_SAVE=step:7 LOOM_FAULT_SIGNAL=0:7 $LOOM train $flags --save "$d/ck4" --save-every 4 \
    > "$d/fail.log" 2>&1 || rc=$?
[ "$rc" = 9 ] || { echo "failed stop save: exit $rc, want 9"; cat "$d/fail.log"; exit 1; }
grep -q "stopping (the stop's save failed); the last complete checkpoint in $d/ck4 is kept" "$d/fail.log"
test "$(cat "$d/ck4/latest")" = step_00000004 && [ ! -e "$d/ck4/step_00000007.partial" ]
echo "the stop's save failed: exit 9, latest still step_00000004, no partial directory"

echo "== 3. MPI: a signal on one rank stops every rank at the same step"
echo "== 3. MPI: a signal on one rank stops every rank at the same step, mid-round"
# and CO2 at a round end that fits the grace period: tests/t_stop_mpi.sh, which need not run
# alone)
# a CO2 round end that does not fit (~995 steps away, grace 0.4 s: the round end is taken when
# it fits in half the grace, and a step of this model takes 0.5 ms on an AVX-512 EPYC, so 2 s of
# grace would fit it there): every worker stops at the furthest step any had reached and saves
# mid-round (its own weights too); unsharded, sharded, --offload; and over tensor- and
# context-parallel workers, the signal on one rank of one worker
mkdir -p "$d/scratch"
mpi co2-mid 2 1:5 1005 mid:1000 --dp 2 --co2 --tau 1000 --stop-grace 0.4
mpi co2-mid-sharded 2 0:5 1005 mid:1000 --dp 2 --co2 --tau 1000 --stop-grace 0.4 --zero 1
mpi co2-mid-offload 2 1:5 1005 mid:1000 --dp 2 --co2 --tau 1000 --stop-grace 0.4 --offload disk \
    --offload-dir "$d/scratch" --fast-mem "$(fastmem 64)"
mpi co2-tp-mid 4 3:5 1005 mid:1000 --dp 2 --tp 2 --sp --co2 --tau 1000 --stop-grace 0.4
mpi co2-cp-mid 4 2:5 1005 mid:1000 --dp 2 --cp 2 --co2 --tau 1000 --stop-grace 0.4

echo "== 4. scripts/loom-mpirun"
mkdir -p "$d/fake"
printf '#!/bin/sh\necho "timeout=$OMPI_MCA_odls_base_sigkill_timeout"\n' > "$d/fake/mpirun"
chmod +x "$d/fake/mpirun"
lm=$(dirname "$0")/../scripts/loom-mpirun
t1=$(env -u OMPI_MCA_odls_base_sigkill_timeout PATH="$d/fake:$PATH" "$lm" -np 2 x train --steps 3)
t2=$(env -u OMPI_MCA_odls_base_sigkill_timeout PATH="$d/fake:$PATH" "$lm" -np 2 x train --stop-grace 7.5)
[ "$t1" = timeout=30 ] && [ "$t2" = timeout=13 ] || { echo "loom-mpirun: $t1 / $t2"; exit 1; }
echo "loom-mpirun: odls_base_sigkill_timeout 30 by default, 13 with --stop-grace 7.5"
# a SIGTERM to the script reaches the ranks as SIGUSR1 (the timeout is lowered here only so that
# mpirun, which waits it out twice after a rank exits non-zero, returns quickly)
OMPI_MCA_odls_base_sigkill_timeout=1 "$lm" --oversubscribe --mca btl self,vader,tcp -np 2 \
    $LOOM train $long --dp 2 --save "$d/lm" --metrics "$d/lm.jsonl" > "$d/lm.log" 2>&1 &
pid=$!
pids+=($pid)
for _ in $(seq 600); do [ "$(cat "$d/lm.jsonl" 2>/dev/null | wc -l)" -ge 5 ] && break; sleep 0.1; done
kill -TERM $pid
rc=0; wait $pid || rc=$?
[ "$rc" = 8 ] || { echo "loom-mpirun: exit $rc, want 8"; tail "$d/lm.log"; exit 1; }
grep -q "SIGUSR1: stopped after step" "$d/lm.log"
test -f "$d/lm/$(cat "$d/lm/latest")/checkpoint.json"
echo "loom-mpirun: SIGTERM -> the job stopped with exit 8 and $(cat "$d/lm/latest")"

echo "== 5. loom peer"
$LOOM keygen -o "$d/secret" 2>/dev/null
pm="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2
    --seq 16 --lr 3e-3 --tau 3 --steps 30 --progress off --peer-timeout 2 --secret $d/secret"
# every peer listens on a port the system picks; a prints its address, which b joins
$LOOM peer $pm --peer-id a --listen 127.0.0.1:0 --min-peers 2 --save "$d/pa" > "$d/pa.log" 2>&1 &
pa=$!
pids+=($pa)
boot=
for _ in $(seq 600); do
    boot=$(sed -n 's/^loom peer a: others reach it at //p' "$d/pa.log" 2>/dev/null || true)
    [ -n "$boot" ] && break
    sleep 0.1
done
[ -n "$boot" ] || { echo "peer a never said where it listens"; cat "$d/pa.log"; exit 1; }
LOOM_FAULT_SIGNAL=0:8 $LOOM peer $pm --peer-id b --listen 127.0.0.1:0 \
    --bootstrap "$boot" --min-peers 2 --save "$d/pb" > "$d/pb.log" 2>&1 &
pb=$!
pids+=($pb)
rc=0; wait $pb || rc=$?
[ "$rc" = 8 ] || { echo "peer b: exit $rc, want 8"; cat "$d/pb.log"; exit 1; }
rc=0; wait $pa || rc=$?
[ "$rc" = 0 ] || { echo "peer a: exit $rc after b left"; cat "$d/pa.log"; exit 1; }
test "$(cat "$d/pb/latest")" = step_00000009
grep -q "b left the swarm (said bye)" "$d/pa.log"
$LOOM peer $pm --peer-id b --listen 127.0.0.1:0 --resume "$d/pb" \
    --metrics "$d/pb2.jsonl" > "$d/pb2.log" 2>&1 || { echo "peer b: resume failed"; cat "$d/pb2.log"; exit 1; }
head -1 "$d/pb2.jsonl" | grep -q '"step":10,'
echo "peer b: signal at step 8 -> stopped at the round end (step 9), said bye; a finished; b resumed"
# a round whose rest does not fit the grace period (497 steps left: more than half of a 1.5 s
# grace unless a step takes under 1.5 ms, several times faster than this model's): stop at
# once, keep the round's start
mid="--data $d/train.bin --layers 2 --heads 4 --dim 128 --vocab 64 --block-size 64 --batch 4
     --seq 64 --lr 3e-3 --tau 500 --steps 520 --progress off --secret $d/secret"
rc=0; LOOM_FAULT_SIGNAL=0:503 $LOOM peer $mid --peer-id c --listen 127.0.0.1:0 \
    --save "$d/pc" --stop-grace 1.5 > "$d/pc.log" 2>&1 || rc=$?
[ "$rc" = 8 ] || { echo "peer c: exit $rc, want 8"; cat "$d/pc.log"; exit 1; }
test "$(cat "$d/pc/latest")" = step_00000500
grep -q "stopped 3 steps into round 2: saving the state of its start" "$d/pc.log"
$LOOM peer $mid --peer-id c --listen 127.0.0.1:0 --resume "$d/pc" --steps 502 \
    --metrics "$d/pc2.jsonl" > "$d/pc2.log" 2>&1 || { echo "peer c: resume failed"; cat "$d/pc2.log"; exit 1; }
head -1 "$d/pc2.jsonl" | grep -q '"step":501,'
echo "peer c: mid-round stop saved step 500 (the round's start), which resumes"
echo "all stop checks passed"
