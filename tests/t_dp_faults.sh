#!/usr/bin/env bash
# serial: hangs and stops detected by --comm-timeout
# t_dp_faults.sh — a dead or stuck rank ends the job with a clear error and a non-zero exit
# within a bounded time (never a hang), and --resume from the last checkpoint loses no
# committed step:
#   * rank 1 is killed with SIGKILL at step 5 of 8 (checkpoints every 2 steps): mpirun exits
#     non-zero; `latest` names a complete checkpoint; resuming from it finishes the run with the
#     same losses as an uninterrupted run (bit-identical);
#   * rank 1 stops responding at step 3: rank 0's watchdog (--comm-timeout 3) names the
#     operation, communicator and step it waits on, and aborts the job;
#   * rank 1 enters a world barrier at step 3 while rank 0 all-reduces (mismatched
#     collectives: both alive, both progress threads running, nothing moves): the watchdog
#     ends the job;
#   * rank 1 is stopped with SIGSTOP at step 3 (every thread stops): the same, within the
#     timeout plus a margin, naming rank 1;
#   * a slow link that keeps moving (LOOM_COMM_DELAY 6 s per all-reduce, spread over its
#     pieces of LOOM_COMM_CHUNK floats) with --comm-timeout 3: the run completes — the
#     watchdog counts from the operation's last progress, not from its start;
#   * rank 0 takes 6 s longer to commit a checkpoint (LOOM_SAVE_DELAY) with --comm-timeout 3:
#     the waiting rank hears its heartbeats and the run completes with the checkpoint.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 60000 3
flags="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2
       --seq 16 --steps 8 --lr 3e-3 --progress off --dp 2 --zero 1 --comm-timeout 3"
$MPI -np 2 $LOOM train $flags --metrics "$d/full.jsonl"

start=$(date +%s)
set +e
LOOM_FAULT_KILL=1:5 timeout 60 $MPI -np 2 -x LOOM_FAULT_KILL $LOOM train $flags --save "$d/ck" --save-every 2 > "$d/kill.log" 2>&1
rc=$?
set -e
took=$(( $(date +%s) - start ))
tail -5 "$d/kill.log"
echo "killed run: exit $rc after ${took}s"
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "expected a non-zero exit without timeout"; exit 1; }
[ "$took" -lt 30 ] || { echo "took too long to notice the dead rank"; exit 1; }
test "$(cat "$d/ck/latest")" = step_00000004
$MPI -np 2 $LOOM train $flags --resume "$d/ck" --metrics "$d/resumed.jsonl"
tail -n 4 "$d/full.jsonl" | grep -o '"loss":[^,]*' > "$d/a"
grep -o '"loss":[^,]*' "$d/resumed.jsonl" > "$d/b"
diff "$d/a" "$d/b"
echo "resume after the crash: steps 5-8 identical to the uninterrupted run"

start=$(date +%s)
set +e
LOOM_FAULT_HANG=1:3 timeout 60 $MPI -np 2 -x LOOM_FAULT_HANG $LOOM train $flags > "$d/hang.log" 2>&1
rc=$?
set -e
took=$(( $(date +%s) - start ))
grep -v "^loom: model" "$d/hang.log" | head -5
echo "stuck peer: exit $rc after ${took}s"
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { echo "expected the watchdog to abort the job"; exit 1; }
grep -q "watchdog: waited .* for allreduce on the dp communicator .* at step 3" "$d/hang.log"

# watchdog_case NAME ENV [PATTERN]: a run that must end through the watchdog at step 3 within
# 40 s (timeout 3 s + a generous margin for a loaded machine), exit 1..125; its message must
# match PATTERN (default: names the dp all-reduce, rank 1 and step 3).
watchdog_case() {
    local name=$1 rc took start
    local pat=${3:-"watchdog: waited .* for .* on the dp communicator (no progress for .*waiting on world ranks 1) at step 3 (training step)"}
    start=$(date +%s)
    set +e
    env "$2" timeout 90 $MPI -np 2 -x "${2%%=*}" $LOOM train $flags > "$d/$name.log" 2>&1
    rc=$?
    set -e
    took=$(( $(date +%s) - start ))
    grep -v "^loom: model" "$d/$name.log" | head -3
    echo "$name: exit $rc after ${took}s"
    [ "$rc" -ge 1 ] && [ "$rc" -le 125 ] && [ "$rc" -ne 124 ] || { echo "$name: expected exit 1..125"; exit 1; }
    [ "$took" -lt 40 ] || { echo "$name: took too long"; exit 1; }
    grep -q "$pat" "$d/$name.log" || { echo "$name: no watchdog message matching '$pat'"; exit 1; }
}
watchdog_case stopped LOOM_FAULT_STOP=1:3
watchdog_case mismatch LOOM_FAULT_MISMATCH=1:3 \
    "watchdog: waited .* for \(allreduce on the dp\|barrier on the world\) communicator .* at step 3"

# A slow link that progresses: each all-reduce takes 6 s (twice the timeout) in ~15 pieces.
slow="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2
      --seq 16 --steps 2 --lr 3e-3 --progress off --dp 2 --zero 0 --bucket-mb 400 --comm-timeout 3"
LOOM_COMM_DELAY=6 LOOM_COMM_CHUNK=2048 timeout 120 $MPI -np 2 -x LOOM_COMM_DELAY -x LOOM_COMM_CHUNK \
    $LOOM train $slow > "$d/slow.log" 2>&1 || { tail -5 "$d/slow.log"; echo "slow link: the watchdog killed a progressing all-reduce"; exit 1; }
echo "slow but progressing link: completed"

# Rank 0 commits a checkpoint for 6 s while rank 1 waits for it.
LOOM_SAVE_DELAY=6 timeout 120 $MPI -np 2 -x LOOM_SAVE_DELAY $LOOM train ${slow/--steps 2/--steps 2 --save $d/ck2 --save-every 1} \
    > "$d/save.log" 2>&1 || { tail -5 "$d/save.log"; echo "slow checkpoint: the watchdog killed a waiting rank"; exit 1; }
test "$(cat "$d/ck2/latest")" = step_00000002
echo "slow checkpoint commit: completed"
