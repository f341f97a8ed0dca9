#!/usr/bin/env bash
# serial: kills a save in flight after a short sleep
# t_ckpt_kill.sh — a rank SIGKILLed WHILE it writes its checkpoint shard (paused by
# LOOM_FAULT_SAVE_PAUSE after the first array is on disk, then killed by this script) leaves
# the previous checkpoint as `latest`, and resuming from it continues bit-identically: the same
# exported weights and per-step losses as an uninterrupted run. The resumed run's own save
# clears the dead save's partial directory. One process, then (with MPI) rank 1 of a
# --dp 2 --zero 1 run, whose shard is its own.
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 20000 1
flags="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 4
       --seq 16 --grad-accum 2 --steps 8 --lr 3e-3 --warmup 2 --lr-schedule cosine --min-lr 1e-4
       --shuffle on --seed 13 --progress off --save-every 4"

# kill_during_save NAME RANK LAUNCH...: run LAUNCH with --save $d/NAME paused in RANK's step-8
# shard write, SIGKILL that rank, check what is left on disk.
kill_during_save() {
    local name=$1 rank=$2; shift 2
    local ck=$d/$name err=$d/$name.err pid=
    LOOM_FAULT_SAVE_PAUSE=$rank:8 "$@" --save "$ck" --metrics "$d/$name.1.jsonl" 2>"$err" &
    local bg=$!
    for _ in $(seq 600); do
        pid=$(sed -n 's/.*LOOM_FAULT_SAVE_PAUSE at step 8: paused in the shard write, pid \([0-9]*\).*/\1/p' "$err")
        [ -n "$pid" ] && break
        sleep 0.2
    done
    [ -n "$pid" ] || { cat "$err"; echo "FAILED: rank $rank never paused"; kill -9 $bg; exit 1; }
    # a partial shard file is on disk: the first of its arrays, not the whole
    local tmp
    tmp=$(ls "$ck"/step_00000008.partial/shard_0000"$rank".bin.tmp.*)
    echo "paused: $(stat -c %s "$tmp") bytes of $(basename "$tmp") written; kill -9 $pid"
    kill -9 "$pid"
    wait $bg && { echo "FAILED: the run survived"; exit 1; } || true
    test "$(cat "$ck/latest")" = step_00000004
    test ! -e "$ck/step_00000008"
}

# resumed NAME REF LAUNCH...: resume LAUNCH from $d/NAME; weights and losses must equal REF's.
resumed() {
    local name=$1 ref=$2; shift 2
    "$@" --resume "$d/$name" --save "$d/$name" --metrics "$d/$name.2.jsonl" \
        --export "$d/$name.safetensors" 2>/dev/null
    cmp "$d/$ref.safetensors" "$d/$name.safetensors"
    tail -n 4 "$d/$ref.jsonl" | grep -o '"loss":[^,]*' > "$d/la"
    grep -o '"loss":[^,]*' "$d/$name.2.jsonl" > "$d/lb"
    diff "$d/la" "$d/lb"
    test "$(cat "$d/$name/latest")" = step_00000008
    test ! -e "$d/$name/step_00000008.partial"
}

$LOOM train $flags --save "$d/ref" --metrics "$d/ref.jsonl" --export "$d/ref.safetensors" 2>/dev/null
kill_during_save ck 0 $LOOM train $flags
resumed ck ref $LOOM train $flags
echo "one process killed mid-shard-write: latest step_00000004 resumes bit-identically"

command -v mpirun >/dev/null || { echo "SKIP (MPI part): mpirun not installed"; exit 0; }
need_mpi
mflags="$flags --dp 2 --zero 1"
$MPI -np 2 $LOOM train $mflags --save "$d/mref" --metrics "$d/mref.jsonl" \
    --export "$d/mref.safetensors" 2>/dev/null
kill_during_save mck 1 $MPI -np 2 $LOOM train $mflags
resumed mck mref $MPI -np 2 $LOOM train $mflags
echo "rank 1 of 2 killed mid-shard-write: latest step_00000004 resumes bit-identically"
