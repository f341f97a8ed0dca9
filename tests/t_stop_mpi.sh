#!/usr/bin/env bash
# long: started first (tests/run.sh)
# t_stop_mpi.sh — under MPI, a stop signal that reaches ONE rank stops every rank at the same
# step, which is saved collectively and resumes bit-identically (losses and exported weights
# equal to the run that was never stopped): dp (ZeRO 1 and 3), pipeline 1f1b and 2bw, tp with
# sp, cp, 2D tp, pp x tp, --offload, and CO2 at the round end (step 8 of tau 4, which fits the
# default grace period) with the signal on one worker, on all, and over tp and pipeline workers.
# The cases whose grace period is short enough for a loaded machine to change them (a CO2 round
# end that does not fit) are in tests/t_stop.sh, which runs alone.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
. "$(dirname "$0")/stop_lib.sh"
stop_setup

mpi dp2-zero1 2 1:5 12 5 --dp 2 --zero 1
mpi dp2-zero3 2 0:5 12 5 --dp 2 --zero 3
mpi pp2-1f1b 2 1:5 12 5 --pp 2
mpi pp2-2bw 2 1:5 12 5 --pp 2 --schedule 2bw
mpi tp2 2 1:5 12 5 --tp 2 --sp
mpi cp2 2 1:5 12 5 --cp 2
mpi tp4-2d 4 3:5 12 5 --tp 4 --tp-mode 2d
mpi pp2-tp2 4 2:5 12 5 --pp 2 --tp 2
mkdir -p "$d/scratch"
mpi dp2-offload 2 1:5 12 5 --dp 2 --offload disk --offload-dir "$d/scratch" --fast-mem "$(fastmem 64)"
# CO2 (tau 4): a signal on one worker, or on all, at step 5: the workers agree and run on to
# the round end (step 8), which fits in the grace period
mpi co2-one 2 1:5 16 round:4 --dp 2 --co2 --tau 4
mpi co2-all 2 all:5 16 round:4 --dp 2 --co2 --tau 4 --zero 1
# CO2 over tensor-parallel workers and over pipeline workers (the last stage of one worker
# signalled): a round end (a mid-round save of pipeline workers is refused: tests/t_co2_pp.sh)
mpi co2-tp-one 4 1:5 16 round:4 --dp 2 --tp 2 --co2 --tau 4
mpi co2-pp-one 4 3:5 16 round:4 --dp 2 --pp 2 --co2 --tau 4
echo "every rank stopped at the same step and resumed bit-identically in every layout"
