#!/usr/bin/env bash
# serial: a lock holder killed after a short sleep
# t_ckpt_lock.sh — one run per checkpoint directory (ck/.lock, flock):
#   * while a run holds --save ck (held at the start of its step-4 save by LOOM_SAVE_GATE, so it
#     is surely alive), a second `loom train --save ck` is refused at start-up with exit 2 and a
#     message naming the directory and the holder's pid and host, having written nothing (not
#     even its metrics file); `loom export ck` and `loom sample --ckpt ck` still read it; the
#     first run finishes normally, pruning (--keep 1) around the lock file;
#   * a run SIGKILLed while it holds the lock does not block: --resume ck --save ck continues;
#   * under MPI: a dp 2 run holding the lock refuses a single-process run, and a dp 2 run is
#     refused by a single-process holder, every rank exiting with 2 (no hang).
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d)
bg=
cleanup() {
    if [ -n "$bg" ]; then kill "$bg" 2>/dev/null || true; fi
    rm -rf "$d"
}
trap cleanup EXIT
mkshard "$d/train.bin" 64 20000 1
flags="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 4
       --seq 16 --steps 8 --lr 3e-3 --seed 13 --progress off --save-every 4"
host=$(hostname)

# held STEP: waits until the gated run in the background ($bg) is at the start of its step-STEP
# save; fails if it exits first.
held() {
    for _ in $(seq 3000); do
        [ -f "$d/gate" ] && [ "$(cat "$d/gate")" = "$1" ] && return 0
        kill -0 "$bg" 2>/dev/null || break
        sleep 0.02
    done
    echo "FAILED: the first run never reached its step-$1 save"
    exit 1
}
release() { rm -f "$d/gate"; }

# refused PID CMD...: CMD (saving to $d/ck) exits 2 naming the directory, PID (if given) and
# this host, and writes nothing.
refused() {
    local pid=$1
    shift
    "$@" --metrics "$d/second.jsonl" 2>"$d/second.err" && rc=0 || rc=$?
    cat "$d/second.err"
    [ "$rc" = 2 ] || { echo "FAILED: the second run exited $rc, not 2"; exit 1; }
    grep -q "$d/ck is in use by another run (pid $pid.* host $host, lock $d/ck/.lock)" \
        "$d/second.err" || { echo "FAILED: the message"; exit 1; }
    test ! -e "$d/second.jsonl"
}

echo "== a second run on a held directory is refused"
LOOM_SAVE_GATE=$d/gate $LOOM train $flags --save "$d/ck" --keep 1 --metrics "$d/first.jsonl" \
    --export "$d/first.st" 2>"$d/first.err" &
bg=$!
held 4
refused $bg $LOOM train $flags --seed 14 --save "$d/ck"
release
held 8 # step 4 is saved: the readers do not trip over the lock
$LOOM export "$d/ck" -o "$d/at4.st"
$LOOM sample --ckpt "$d/ck" --prompt-tokens 1,2,3 --dump-logits "$d/logits" --threads 1
test -s "$d/logits"
refused $bg $LOOM train $flags --resume "$d/ck" --save "$d/ck"
release
wait $bg || { cat "$d/first.err"; echo "FAILED: the first run"; exit 1; }
bg=
test "$(cat "$d/ck/latest")" = step_00000008
test "$(ls "$d/ck")" = "$(printf 'latest\nstep_00000008')" # pruned to 1 around the lock file
grep -q "pid .* host $host" "$d/ck/.lock"
$LOOM export "$d/ck" -o "$d/at8.st"
cmp "$d/first.st" "$d/at8.st"
echo "the holder finished; its checkpoints are complete"

echo "== a SIGKILLed holder does not block: --resume ck --save ck"
LOOM_SAVE_GATE=$d/gate $LOOM train $flags --save "$d/k" 2>/dev/null &
bg=$!
held 4
release
held 8
kill -9 $bg
wait $bg || true
bg=
grep -q "pid .* host $host" "$d/k/.lock" # a lock file left by a dead process
$LOOM train $flags --steps 12 --resume "$d/k" --save "$d/k" 2>"$d/k.err" ||
    { cat "$d/k.err"; echo "FAILED: the resumed run"; exit 1; }
test "$(cat "$d/k/latest")" = step_00000012
echo "resumed after SIGKILL: latest $(cat "$d/k/latest")"

command -v mpirun >/dev/null || { echo "SKIP (MPI part): mpirun not installed"; exit 0; }
need_mpi
echo "== MPI: a dp 2 run holds the lock"
rm -rf "$d/ck"
LOOM_SAVE_GATE=$d/gate $MPI -np 2 -x LOOM_SAVE_GATE $LOOM train $flags --dp 2 --zero 1 \
    --save "$d/ck" 2>"$d/first.err" &
bg=$!
held 4
refused "" $LOOM train $flags --save "$d/ck"
release
held 8
release
wait $bg || { cat "$d/first.err"; echo "FAILED: the dp 2 run"; exit 1; }
bg=
echo "== MPI: a dp 2 run on a held directory: every rank exits 2"
LOOM_SAVE_GATE=$d/gate $LOOM train $flags --save "$d/ck" 2>/dev/null &
bg=$!
held 4
refused $bg timeout 120 $MPI -np 2 $LOOM train $flags --dp 2 --save "$d/ck"
# each rank's own status (a wrapper records it and exits 0, so mpirun ends no rank early)
timeout 120 $MPI -np 2 bash -c '"$0" "$@" 2>/dev/null; echo $? >>"'"$d/codes"'"' \
    $LOOM train $flags --dp 2 --save "$d/ck"
test "$(sort "$d/codes" | tr '\n' ' ')" = "2 2 " || { echo "FAILED: rank exits $(cat "$d/codes")"; exit 1; }
echo "every rank exited 2"
release
held 8
release
wait $bg
bg=
echo "one run per checkpoint directory"
