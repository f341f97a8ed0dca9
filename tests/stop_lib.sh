# stop_lib.sh — what tests/t_stop.sh and tests/t_stop_mpi.sh share (sourced after lib.sh, with
# $d a scratch directory): the data and the model they train (stop_setup), and the comparison of
# a stopped and resumed run with the uninterrupted one (resumed, and mpi for a job under mpirun).

# stop_setup: $d/train.bin, $d/other.bin (other data, for the negative control) and $base
stop_setup() {
    mkshard "$d/train.bin" 64 40000 1
    mkshard "$d/other.bin" 64 40000 2
    base="--layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 4 --seq 16 --grad-accum 2
          --lr 3e-3 --warmup 2 --lr-schedule cosine --min-lr 1e-4 --shuffle on --seed 11
          --progress off"
    export OMP_NUM_THREADS=1
}

# resumed NAME A.jsonl B.jsonl FULL.jsonl B.st FULL.st: the stopped run's (A) and the resumed
# run's (B) metrics together are the uninterrupted run's, step for step, and the final weights
# are the same bytes (same, tests/lib.sh).
resumed() {
    cat "$2" "$3" > "$d/$1.ab.jsonl"
    same "$1: stopped + resumed" "$d/$1.ab.jsonl" "$4" "$5" "$6"
}

# mpi NAME NP SIGNAL STEPS WANT FLAGS...: an uninterrupted run, a run stopped by
# LOOM_FAULT_SIGNAL=SIGNAL (RANK:STEP), which must save step WANT (or, for CO2, whose workers
# drift apart within a round, "round:TAU": a round end, "mid:TAU": not one), and its resume;
# compared.
mpi() {
    local name=$1 np=$2 sig=$3 steps=$4 want=$5; shift 5
    local f="--data $d/train.bin $base --steps $steps"
    $MPI -np "$np" $LOOM train $f "$@" --metrics "$d/$name.full.jsonl" --export "$d/$name.full.st" \
        > "$d/$name.full.log" 2>&1 || { echo "$name: uninterrupted run failed"; tail "$d/$name.full.log"; return 1; }
    local rc=0
    LOOM_FAULT_SIGNAL=$sig $MPI -np "$np" -x LOOM_FAULT_SIGNAL $LOOM train $f "$@" --save "$d/$name.ck" \
        --metrics "$d/$name.a.jsonl" > "$d/$name.a.log" 2>&1 || rc=$?
    [ "$rc" = 8 ] || { echo "$name: stopped run exit $rc, want 8"; tail -20 "$d/$name.a.log"; return 1; }
    local at
    at=$(sed 's/^step_0*//' "$d/$name.ck/latest")
    case $want in
    round:*) [ $((at % ${want#round:})) = 0 ] && [ "$at" -lt "$steps" ] ;; # a round end
    mid:*) [ $((at % ${want#mid:})) != 0 ] ;;                                # mid-round
    *) [ "$at" = "$want" ] ;;
    esac || { echo "$name: saved step $at, want $want"; return 1; }
    want=$at
    $MPI -np "$np" $LOOM train $f "$@" --resume "$d/$name.ck" --metrics "$d/$name.b.jsonl" \
        --export "$d/$name.b.st" > "$d/$name.b.log" 2>&1 || { echo "$name: resume failed"; tail "$d/$name.b.log"; return 1; }
    resumed "$name" "$d/$name.a.jsonl" "$d/$name.b.jsonl" "$d/$name.full.jsonl" \
        "$d/$name.b.st" "$d/$name.full.st"
    echo "$name: signal $sig -> every rank stopped after step $want, resumed bit-identically"
}
