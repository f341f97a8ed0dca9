#!/usr/bin/env bash
# long: started first (tests/run.sh)
# t_offload_tp2d.sh — block swapping (--offload disk) of a 2D (SUMMA) tensor-parallel part: each
# rank of the q x q grid swaps its own part's layers (parameters, gradients) and every block's
# moments through its own tier, the blocks communicating along the grid's rows and columns inside
# as in memory. Against the in-memory run of the same layout, bit for bit (losses, gradient
# norms, validation losses, exported weights, checkpoint files): --tp 4 --tp-mode 2d (clipping
# on and off, --recompute), dp 2 and dp 3 x that (8 and 12 ranks), all with gradient
# accumulation K = 3, weight decay and clipping active (the norms are above --grad-clip). Over 3 replicas the sum's
# bits depend on the order each element's terms are added in: with the MPI library's
# all-reduce forced to a ring (whose order depends on the element's offset in the message), dp 3
# swapped still equals dp 3 in memory (both sum each block in a call of its own), and the negative
# control: the ring's in-memory run differs from the default's (the comparison sees the order).
# Checkpoints: an offloaded 2D run's mid-run checkpoint resumes with and without --offload (and
# an in-memory one with it) onto the uninterrupted run's bytes.
# The budget binds: a part whose training state (54 MiB per rank) and start-up staging take the
# in-memory rank above --fast-mem 48M trains within it on every rank (peak RSS printed per rank;
# the fill of the tier, a checkpoint save every step and the --export included: both assembled
# from the ranks' tiers through the budget), the same bits as in memory (losses, exported
# weights, checkpoint shards; the negative control: the in-memory rank peaks above 48 MiB), and
# its step-1 checkpoint resumes within the budget onto the unstopped run's bytes; a budget below
# what the swapped part needs is an error naming the numbers. ZeRO 1-3 and --co2 with a swapped 2D part are refused, naming both flags.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 60000 3
mkdir "$d/off"
g="--tp 4 --tp-mode 2d"
base="--data $d/train.bin --layers 4 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2
      --seq 16 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5 --threads 1"
flags="$base --val-data $d/train.bin --val-every 2 --val-windows 3 --steps 4 --grad-accum 3"
OFF="--offload disk --offload-dir $d/off --fast-mem $(fastmem 64)"
mrun() { # NAME NP FLAGS...
    local name=$1 np=$2; shift 2
    rm -rf "$d/$name.ck"
    $MPI -np "$np" $LOOM train "$@" --metrics "$d/$name.jsonl" --export "$d/$name.st" \
        --save "$d/$name.ck" --save-every 2 2>"$d/$name.err" || { cat "$d/$name.err"; exit 1; }
}
same_shards() { # NAME DIR_A DIR_B: every step's checkpoint files byte for byte
    local f n=0
    for f in "$2"/step_*/*; do
        cmp -s "$f" "$3/${f#"$2"/}" || { echo "$1: ${f#"$2"/} differs"; exit 1; }
        n=$((n + 1))
    done
    [ "$n" -ge 4 ] || { echo "$1: only $n checkpoint files"; exit 1; }
    echo "$1: the swapped run's $n checkpoint files are the in-memory run's bytes"
}
clean() { [ -z "$(ls -A "$d/off")" ] || { echo "$1: scratch files left in --offload-dir"; exit 1; }; }
# (under the sanitizers without dp 3 and the ring below: 12 ranks run the code dp 2 runs)
lays=("4:$g" "4:$g --grad-clip 0" "4:$g --recompute" "8:$g --dp 2")
[ -n "${LOOM_ASAN:-}" ] || lays+=("12:$g --dp 3")
for lay in "${lays[@]}"; do
    np=${lay%%:*} l=${lay#*:}
    mrun mem "$np" $flags $l
    mrun off "$np" $flags $l $OFF
    grep -q "blocks swapped through its own disk tier" "$d/off.err" ||
        { echo "$l: the run does not say it swaps"; exit 1; }
    same "$l, swapped vs in memory" "$d/mem.jsonl" "$d/off.jsonl" "$d/mem.st" "$d/off.st" || exit 1
    same_shards "$l" "$d/mem.ck" "$d/off.ck"
    clean "$l"
done
# dp 3 with each element's dp terms added in an order set by its offset in the message (Open
# MPI's non-blocking all-reduce forced to a ring): swapped equals in memory; the in-memory run
# differs from the default order's (above), so the dp 3 comparison is not blind to the order
if [ -z "${LOOM_ASAN:-}" ]; then
    mv "$d/mem.jsonl" "$d/dflt.jsonl" && mv "$d/mem.st" "$d/dflt.st"
    ring() { OMPI_MCA_coll_libnbc_iallreduce_algorithm=1 mrun "$@"; }
    ring mem 12 $flags $g --dp 3
    ring off 12 $flags $g --dp 3 $OFF
    same "dp 3 summed by a ring, swapped vs in memory" "$d/mem.jsonl" "$d/off.jsonl" \
        "$d/mem.st" "$d/off.st" || exit 1
    clean "ring"
    if same "ring vs default" "$d/mem.jsonl" "$d/dflt.jsonl" "$d/mem.st" "$d/dflt.st" >/dev/null; then
        echo "negative control: dp 3 summed by a ring trained the default order's bits"; exit 1
    fi
    echo "negative control: dp 3 summed by a ring differs from the default order"
fi
python3 - "$d/mem.jsonl" <<'PY' || exit 1
import json, sys
n = [json.loads(l)["grad_norm"] for l in open(sys.argv[1]) if '"grad_norm"' in l]
if not n or min(n) <= 0.5: sys.exit(f"clipping inactive: norms {n}")
PY

# checkpoints: a save at step 2 of 4 (the step-4 one removed) resumed onto the full run's bytes
offload_resume "2d tp 4" "$base --lr-schedule constant --grad-accum 2 $g --steps 4" 4

# the budget binds: per rank 13.5 MiB of parameters, 54 MiB of training state, --fast-mem 48M;
# a save every step and the export (the whole model: 57 MiB of parameters, 171 MiB with the
# moments) assembled from the ranks' tiers within it, the in-memory run's bytes
big="--data $d/train.bin --layers 8 --heads 4 --dim 384 --vocab 64 --block-size 32 --batch 2
     --seq 16 --grad-accum 2 --grad-clip 0.5 --progress off --seed 5 --threads 1 --steps 2 $g"
BOFF="--offload disk --offload-dir $d/off --fast-mem 48M"
peaks() { grep -o 'peak RSS [0-9.]* MiB of --fast-mem' "$1" | awk '{print $3}'; }
within() { # NAME ERR: every one of the four ranks peaked within the 48 MiB
    local p x
    p=$(peaks "$2")
    [ "$(echo "$p" | wc -l)" = 4 ] || { echo "$1: expected four ranks' peaks, got: $p"; exit 1; }
    for x in $p; do
        awk -v x="$x" 'BEGIN { exit !(x <= 48) }' || { echo "$1: a rank peaked at $x MiB > 48"; exit 1; }
    done
    echo "$1: the ranks peaked at $(echo $p) MiB of 48"
}
if [ -z "${LOOM_ASAN:-}" ]; then
    $MPI -np 4 $LOOM train $big --metrics "$d/bm.jsonl" --save "$d/bmck" --save-every 1 \
        --export "$d/bm.st" 2>"$d/bm.err" || { cat "$d/bm.err"; exit 1; }
    $MPI -np 4 $LOOM train $big $BOFF --save "$d/bock" --save-every 1 --export "$d/bo.st" \
        --metrics "$d/bo.jsonl" 2>"$d/bo.err" || { cat "$d/bo.err"; exit 1; }
    same "2d tp 4, 54 MiB of state per rank in --fast-mem 48M" "$d/bm.jsonl" "$d/bo.jsonl" \
        "$d/bm.st" "$d/bo.st" || exit 1
    same_shards "2d tp 4 in --fast-mem 48M" "$d/bmck" "$d/bock"
    within "2d tp 4, a save every step and the export" "$d/bo.err"
    mp=$(grep -o 'peak RSS [0-9.]* MiB |' "$d/bm.err" | awk '{print $3}')
    awk -v x="$mp" 'BEGIN { exit !(x > 48) }' ||
        { echo "negative control: in memory the rank peaked at only $mp MiB"; exit 1; }
    echo "budget binds: in memory the rank peaked at $mp MiB"
    clean "bound"
    # resumed from the swapped run's step-1 checkpoint within the budget: the unstopped bytes
    rm -rf "$d/bock/step_00000002"; echo step_00000001 >"$d/bock/latest"
    $MPI -np 4 $LOOM train $big $BOFF --resume "$d/bock" --export "$d/br.st" \
        --metrics "$d/br.jsonl" 2>"$d/br.err" || { cat "$d/br.err"; exit 1; }
    same --part --steps 2-2 "2d tp 4, resumed from step 1 in --fast-mem 48M" "$d/br.jsonl" \
        "$d/bo.jsonl" "$d/br.st" "$d/bo.st" || exit 1
    within "2d tp 4, resumed" "$d/br.err"
    clean "resumed"
    expect_fail "is too small for this 2D tensor-parallel part swapped block by block" \
        $MPI -np 4 $LOOM train $big --offload disk --offload-dir "$d/off" --fast-mem 24M
    clean "too small"
fi

# refused: a swapped 2D part with ZeRO 1-3 and with CO2
for z in 1 2 3; do
    expect_fail "--offload with --zero $z: a 2D tensor-parallel part swaps its blocks with ZeRO 0" \
        $MPI -np 8 $LOOM train $flags $g --dp 2 --zero $z $OFF
done
expect_fail "--offload with --co2: CO2's workers over 2D grids" \
    $MPI -np 8 $LOOM train $flags $g --dp 2 --co2 $OFF
echo "ZeRO 1-3 and CO2 with a swapped 2D part: refused"
