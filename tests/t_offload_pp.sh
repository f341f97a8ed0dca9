#!/usr/bin/env bash
# long: started first (tests/run.sh)
# t_offload_pp.sh — block swapping (--offload disk) of pipeline stages: each stage swaps its own
# blocks through its own tier under its own --fast-mem, the micro-batches' activations in
# memory. Against the in-memory pipeline of the same layout, bit for bit (losses, gradient
# norms, validation losses, exported weights): --pp 2 under 1f1b and gpipe, dp 2 x pp 2,
# --recompute, --pp 4 (inner stages), all with K = 3 micro-batches and clipping active (the
# norms are above --grad-clip), and with clipping off. dp 3 x pp 2 under 1f1b and gpipe with
# the MPI library's all-reduce forced to a ring (over 3 replicas the sum's bits depend on the
# order each element's terms are added in; a ring's order is set by the element's offset in the
# message): swapped equals in memory (both all-reduce each block's gradient in a message of its
# own); negative control: the ring's in-memory run differs from the default order's.
# These small runs hold at most 2 block slots per stage (--pp 4: 1; LOOM_PIPE_SWAP_SLOTS): every block's
# parameters and gradient go through the tier within each micro-batch; where K micro-batches
# leave a block between its forward and backward, its gradient is written and read back.
# Checkpoints: an offloaded mid-run checkpoint resumes with and without --offload (and an
# in-memory one with it) onto the uninterrupted run's bytes.
# The budget binds: a stage whose training state (109 MiB: parameters, gradients, two moments)
# exceeds --fast-mem 96M trains within it on both ranks (peak RSS printed per rank; checkpoint
# saves, read from the tier piece by piece, and the --export, sent stage by stage to the first
# rank's scratch file, included), the same bits as in memory, where a rank
# peaks above the budget (the negative control); its step-1 checkpoint resumes within the same
# budget onto the uninterrupted run's step 2.
# Refused, naming why: ZeRO 1-3, a stage with --tp. (2bw: t_offload_2bw.sh.)
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 60000 3
mkdir "$d/off"
base="--data $d/train.bin --layers 4 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2
      --seq 16 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5 --threads 1"
flags="$base --val-data $d/train.bin --val-every 2 --val-windows 3 --steps 4 --grad-accum 3"
export LOOM_PIPE_SWAP_SLOTS=2
OFF="--offload disk --offload-dir $d/off --fast-mem $(fastmem 64)"
mrun() { # NAME NP FLAGS...
    local name=$1 np=$2; shift 2
    $MPI -np "$np" $LOOM train "$@" --metrics "$d/$name.jsonl" --export "$d/$name.st" \
        2>"$d/$name.err" || { cat "$d/$name.err"; exit 1; }
}
clean() { [ -z "$(ls -A "$d/off")" ] || { echo "$1: scratch files left in --offload-dir"; exit 1; }; }
for lay in "2:--pp 2 --schedule 1f1b" "2:--pp 2 --schedule gpipe" \
    "2:--pp 2 --schedule 1f1b --grad-clip 0" "2:--pp 2 --schedule 1f1b --recompute" \
    "4:--pp 2 --dp 2 --schedule 1f1b" "4:--pp 2 --dp 2 --schedule gpipe" \
    "4:--pp 4 --schedule 1f1b --grad-accum 4"; do
    np=${lay%%:*} l=${lay#*:}
    slots=2; case "$l" in *"--pp 4"*) slots=1 ;; esac # --pp 4: 1 or 2 blocks per stage
    export LOOM_PIPE_SWAP_SLOTS=$slots
    mrun mem "$np" $flags $l
    mrun off "$np" $flags $l $OFF
    grep -q "each stage's blocks swapped through its own disk tier" "$d/off.err" ||
        { echo "$l: the run does not say it swaps"; exit 1; }
    grep -q "stage 0: $slots of [2-9] blocks in slots" "$d/off.err" ||
        { grep "pipeline stage" "$d/off.err"; echo "$l: stage 0 is not short of slots"; exit 1; }
    same "$l, swapped vs in memory" "$d/mem.jsonl" "$d/off.jsonl" "$d/mem.st" "$d/off.st" || exit 1
    clean "$l"
    [ "$l" != "--pp 2 --schedule 1f1b" ] || python3 - "$d/mem.jsonl" <<'PY' || exit 1
import json, sys
n = [json.loads(l)["grad_norm"] for l in open(sys.argv[1]) if '"grad_norm"' in l]
if not n or min(n) <= 0.5: sys.exit(f"clipping inactive: norms {n}")
PY
done

# dp 3, each element's dp terms added in an order set by its offset in the message (Open MPI's
# non-blocking all-reduce forced to a ring): swapped equals in memory; the in-memory run differs
# from the default order's, so the comparison is not blind to the order
export LOOM_PIPE_SWAP_SLOTS=2
ring() { OMPI_MCA_coll_libnbc_iallreduce_algorithm=1 mrun "$@"; }
for s in gpipe 1f1b; do
    ring mem 6 $flags --pp 2 --dp 3 --schedule $s
    ring off 6 $flags --pp 2 --dp 3 --schedule $s $OFF
    same "dp 3 $s summed by a ring, swapped vs in memory" "$d/mem.jsonl" "$d/off.jsonl" \
        "$d/mem.st" "$d/off.st" || exit 1
    clean "ring $s"
done
mrun dflt 6 $flags --pp 2 --dp 3 --schedule 1f1b
if same "ring vs default" "$d/mem.jsonl" "$d/dflt.jsonl" "$d/mem.st" "$d/dflt.st" >/dev/null; then
    echo "negative control: dp 3 summed by a ring trained the default order's bits"; exit 1
fi
echo "negative control: dp 3 1f1b summed by a ring differs from the default order"

# checkpoints: a save at step 2 of 4 (the step-4 one removed) resumed onto the full run's bytes
export LOOM_PIPE_SWAP_SLOTS=1
lin="$base --lr-schedule constant --grad-accum 2 --pp 2 --schedule 1f1b --steps 4"
offload_resume "pp 2" "$lin"

# the budget binds: per stage 27 MiB of parameters, 109 MiB of training state, --fast-mem 96M
big="--data $d/train.bin --layers 8 --heads 4 --dim 384 --vocab 64 --block-size 32 --batch 2
     --seq 16 --grad-accum 2 --grad-clip 0.5 --progress off --seed 5 --threads 1 --steps 2
     --pp 2 --schedule 1f1b"
peaks() { grep -o 'stage [0-9]*: .* peak RSS [0-9.]* MiB' "$1" | awk '{print $(NF-1)}'; }
if [ -z "${LOOM_ASAN:-}" ]; then
    unset LOOM_PIPE_SWAP_SLOTS # the budget alone decides
    $MPI -np 2 $LOOM train $big --metrics "$d/bm.jsonl" --export "$d/bm.st" 2>"$d/bm.err" ||
        { cat "$d/bm.err"; exit 1; }
    # each rank's whole-process peak (ru_maxrss of a parent of its own: the stage's line above
    # is printed before the export)
    rss="import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); print('rank maxrss',
resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 'MiB', file=sys.stderr); sys.exit(rc)"
    $MPI -np 2 $PY -c "$rss" $LOOM train $big --offload disk --offload-dir "$d/off" \
        --fast-mem 96M --save-every 1 --save "$d/bck" --export "$d/bo.st" \
        --metrics "$d/bo.jsonl" 2>"$d/bo.err" || { cat "$d/bo.err"; exit 1; }
    for x in $(grep -o 'rank maxrss [0-9.]*' "$d/bo.err" | awk '{print $3}'); do
        awk -v x="$x" 'BEGIN { exit !(x <= 96) }' ||
            { echo "a stage's process peaked at $x MiB > 96 (the export included)"; exit 1; }
    done
    [ "$(grep -c 'rank maxrss' "$d/bo.err")" = 2 ] || { echo "expected two ranks' maxrss"; exit 1; }
    echo "the whole processes (the export included) peaked at" \
        "$(grep -o 'rank maxrss [0-9.]*' "$d/bo.err" | awk '{printf "%.1f ", $3}')MiB of 96"
    same "pp 2, 109 MiB of state per stage in --fast-mem 96M" "$d/bm.jsonl" "$d/bo.jsonl" \
        "$d/bm.st" "$d/bo.st" || exit 1
    p=$(peaks "$d/bo.err")
    [ "$(echo "$p" | wc -l)" = 2 ] || { echo "expected two ranks' peaks, got: $p"; exit 1; }
    for x in $p; do
        awk -v x="$x" 'BEGIN { exit !(x <= 96) }' || { echo "a stage peaked at $x MiB > 96"; exit 1; }
    done
    mp=$(grep -o 'peak RSS [0-9.]* MiB' "$d/bm.err" | awk '{print $3}')
    awk -v x="$mp" 'BEGIN { exit !(x > 96) }' ||
        { echo "negative control: in memory stage 0 peaked at only $mp MiB"; exit 1; }
    grep "pipeline stage" "$d/bo.err"
    echo "budget binds: swapped stages peaked at $(echo $p) MiB of 96 (saves and the export included), in memory at $mp MiB"
    clean "bound"
    # the step-1 checkpoint resumed under the same budget: step 2 as uninterrupted, within it
    rm -rf "$d/bck/step_00000002"; echo step_00000001 >"$d/bck/latest"
    $MPI -np 2 $LOOM train $big --offload disk --offload-dir "$d/off" --fast-mem 96M \
        --resume "$d/bck" --metrics "$d/br.jsonl" 2>"$d/br.err" || { cat "$d/br.err"; exit 1; }
    same --part "pp 2, resumed within --fast-mem 96M" "$d/br.jsonl" "$d/bm.jsonl" || exit 1
    p=$(peaks "$d/br.err")
    for x in $p; do
        awk -v x="$x" 'BEGIN { exit !(x <= 96) }' || { echo "a resumed stage peaked at $x MiB > 96"; exit 1; }
    done
    echo "resume within the budget: stages peaked at $(echo $p) MiB of 96"
    clean "resumed bound"
    # too small a budget is refused before training, naming what it needs
    if $MPI -np 2 $LOOM train $big --offload disk --offload-dir "$d/off" --fast-mem 48M \
        2>"$d/small.err"; then echo "--fast-mem 48M ran"; exit 1; fi
    grep -q "too small for pipeline stage" "$d/small.err" || { cat "$d/small.err"; exit 1; }
    clean "refused budget"
fi

# refused: ZeRO 1-3 with dp replicas, tensor parallelism inside a swapped stage
want() { # NP WHAT FLAGS...
    local np=$1 what=$2; shift 2
    if $MPI -np "$np" $LOOM train $flags "$@" $OFF 2>"$d/r.err"; then echo "$* ran"; exit 1; fi
    grep -q "$what" "$d/r.err" || { echo "$*:"; cat "$d/r.err"; exit 1; }
}
for z in 1 2 3; do want 4 "(--zero 0)" --pp 2 --dp 2 --zero $z; done
want 4 "no tensor or context parallelism inside it" --pp 2 --tp 2
echo "ZeRO 1-3 and --tp with a swapped stage: refused"
