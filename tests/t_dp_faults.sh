#!/usr/bin/env bash
# t_dp_faults.sh — a dead or stuck rank ends the job with a clear error and a non-zero exit
# within a bounded time (never a hang), and --resume from the last checkpoint loses no
# committed step:
#   * rank 1 is killed with SIGKILL at step 5 of 8 (checkpoints every 2 steps): mpirun exits
#     non-zero; `latest` names a complete checkpoint; resuming from it finishes the run with the
#     same losses as an uninterrupted run (bit-identical);
#   * rank 1 stops responding at step 3: rank 0's watchdog (--comm-timeout 3) names the
#     operation, communicator and step it waits on, and aborts the job.
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
