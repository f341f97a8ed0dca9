#!/usr/bin/env bash
# t_offload_2bw.sh — swapped pipeline stages (--offload disk) under --schedule 2bw: each stage's
# tier holds both weight versions and the gradients of two batches; a block's slot reads the
# version its micro-batch runs on, and the delayed update writes the new version over the old.
# Against the in-memory 2bw pipeline of the same layout, bit for bit (losses, gradient norms,
# validation losses, exported weights), with weight decay, clipping active and K = 3
# micro-batches: --pp 2, dp 2 x pp 2, dp 3 x pp 2, --pp 2 --recompute, --pp 4 (inner stages,
# K = 4). Over 3 replicas the sum's bits depend on the order each element's terms are added in:
# with the MPI library's all-reduce forced to a ring (whose order depends on the element's offset
# in the message), dp 3 swapped still equals dp 3 in memory (both send each block's gradient in
# messages of their own, in the same chunks: 1000-float ones and the default), and the negative control:
# the ring's in-memory run differs from the default order's (the comparison sees the order).
# Negative control: 1f1b trains other
# weights than 2bw (the comparison can fail). Checkpoints (both versions, from the tier) resume
# with and without --offload onto the uninterrupted run's bytes. The budget binds: a stage whose
# training state exceeds --fast-mem trains within it (peak RSS), where in memory it does not.
# Still refused: 2bw swapped with ZeRO 1-3.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 60000 3
mkdir "$d/off"
base="--data $d/train.bin --layers 4 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2
      --seq 16 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5 --threads 1"
flags="$base --val-data $d/train.bin --val-every 2 --val-windows 3 --steps 5 --grad-accum 3"
export LOOM_PIPE_SWAP_SLOTS=2 # every block's parameters and gradient go through the tier
OFF="--offload disk --offload-dir $d/off --fast-mem $(fastmem 64)"
mrun() { # NAME NP FLAGS...
    local name=$1 np=$2; shift 2
    $MPI -np "$np" $LOOM train "$@" --metrics "$d/$name.jsonl" --export "$d/$name.st" \
        2>"$d/$name.err" || { cat "$d/$name.err"; exit 1; }
}
clean() { [ -z "$(ls -A "$d/off")" ] || { echo "$1: scratch files left in --offload-dir"; exit 1; }; }
for lay in "2:--pp 2" "4:--pp 2 --dp 2" "6:--pp 2 --dp 3" "2:--pp 2 --recompute" "4:--pp 4 --grad-accum 4"; do
    np=${lay%%:*} l="${lay#*:} --schedule 2bw"
    slots=2; case "$l" in *"--pp 4"*) slots=1 ;; esac # --pp 4: 1 or 2 blocks per stage
    export LOOM_PIPE_SWAP_SLOTS=$slots
    mrun mem "$np" $flags $l
    mrun off "$np" $flags $l $OFF
    grep -q "stage 0: $slots of [2-9] blocks in slots" "$d/off.err" ||
        { grep "pipeline stage" "$d/off.err"; echo "$l: stage 0 is not short of slots"; exit 1; }
    same "$l, swapped vs in memory" "$d/mem.jsonl" "$d/off.jsonl" "$d/mem.st" "$d/off.st" || exit 1
    clean "$l"
    case "$l" in *"--dp 3"*) cp "$d/mem.jsonl" "$d/dflt.jsonl" && cp "$d/mem.st" "$d/dflt.st" ;; esac
done
# dp 3 with each element's dp terms added in an order set by its offset in the message (Open
# MPI's non-blocking all-reduce forced to a ring): swapped equals in memory, with the default
# chunks and with 1000-float ones (LOOM_PIPE_CHUNK: pieces inside a block, ragged at its end);
# the in-memory run differs from the default order's, so the comparison is not blind to the order
export LOOM_PIPE_SWAP_SLOTS=2
ring() { OMPI_MCA_coll_libnbc_iallreduce_algorithm=1 mrun "$@"; }
for chunk in 1000 ""; do # (the last: the default chunks)
    LOOM_PIPE_CHUNK=$chunk ring mem 6 $flags --pp 2 --dp 3 --schedule 2bw
    LOOM_PIPE_CHUNK=$chunk ring off 6 $flags --pp 2 --dp 3 --schedule 2bw $OFF
    same "dp 3 summed by a ring${chunk:+ in chunks of $chunk}, swapped vs in memory" \
        "$d/mem.jsonl" "$d/off.jsonl" "$d/mem.st" "$d/off.st" || exit 1
    clean "ring $chunk"
done
if same "ring vs default" "$d/mem.jsonl" "$d/dflt.jsonl" "$d/mem.st" "$d/dflt.st" >/dev/null; then
    echo "negative control: dp 3 summed by a ring trained the default order's bits"; exit 1
fi
echo "negative control: dp 3 summed by a ring differs from the default order"
mrun mem 2 $flags --pp 2 --schedule 2bw
python3 - "$d/mem.jsonl" <<'PY' || exit 1
import json, sys
n = [json.loads(l)["grad_norm"] for l in open(sys.argv[1]) if '"grad_norm"' in l]
if not n or min(n) <= 0.5: sys.exit(f"clipping inactive: norms {n}")
PY
# negative control: the same swapped run under 1f1b (no delayed update) differs from 2bw's
export LOOM_PIPE_SWAP_SLOTS=2
mrun ctl 2 $flags --pp 2 --schedule 1f1b $OFF
if same "1f1b vs 2bw" "$d/ctl.jsonl" "$d/mem.jsonl" "$d/ctl.st" "$d/mem.st" >/dev/null; then
    echo "negative control: 1f1b trained what 2bw trained"; exit 1
fi
echo "negative control: 1f1b differs from 2bw"

# checkpoints: a save at step 2 of 4 (both weight versions read from the tier) resumed
export LOOM_PIPE_SWAP_SLOTS=1
lin="$base --lr-schedule constant --grad-accum 2 --pp 2 --schedule 2bw --steps 4"
offload_resume "pp 2 2bw" "$lin"

# the budget binds: per stage 27 MiB of parameters, 164 MiB of 2bw training state (two
# versions, two gradients, two moments), --fast-mem 96M
big="--data $d/train.bin --layers 8 --heads 4 --dim 384 --vocab 64 --block-size 32 --batch 2
     --seq 16 --grad-accum 2 --grad-clip 0.5 --progress off --seed 5 --threads 1 --steps 3
     --pp 2 --schedule 2bw"
peaks() { grep -o 'stage [0-9]*: .* peak RSS [0-9.]* MiB' "$1" | awk '{print $(NF-1)}'; }
if [ -z "${LOOM_ASAN:-}" ]; then
    unset LOOM_PIPE_SWAP_SLOTS # the budget alone decides
    $MPI -np 2 $LOOM train $big --metrics "$d/bm.jsonl" 2>"$d/bm.err" || { cat "$d/bm.err"; exit 1; }
    $MPI -np 2 $LOOM train $big --offload disk --offload-dir "$d/off" --fast-mem 96M \
        --metrics "$d/bo.jsonl" 2>"$d/bo.err" || { cat "$d/bo.err"; exit 1; }
    same "pp 2 2bw in --fast-mem 96M" "$d/bm.jsonl" "$d/bo.jsonl" || exit 1
    p=$(peaks "$d/bo.err")
    [ "$(echo "$p" | wc -l)" = 2 ] || { echo "expected two ranks' peaks, got: $p"; exit 1; }
    for x in $p; do
        awk -v x="$x" 'BEGIN { exit !(x <= 96) }' || { echo "a stage peaked at $x MiB > 96"; exit 1; }
    done
    mp=$(grep -o 'peak RSS [0-9.]* MiB' "$d/bm.err" | awk '{print $3}')
    awk -v x="$mp" 'BEGIN { exit !(x > 96) }' ||
        { echo "negative control: in memory stage 0 peaked at only $mp MiB"; exit 1; }
    grep "pipeline stage" "$d/bo.err"
    echo "budget binds: swapped 2bw stages peaked at $(echo $p) MiB of 96, in memory at $mp MiB"
    clean "bound"
fi

# still refused: ZeRO 1-3 over a swapped stage's replicas
export LOOM_PIPE_SWAP_SLOTS=2
for z in 1 2 3; do
    if $MPI -np 4 $LOOM train $flags --pp 2 --dp 2 --schedule 2bw --zero $z $OFF 2>"$d/r.err"; then
        echo "--zero $z ran"; exit 1
    fi
    grep -q -- "--offload with --zero $z" "$d/r.err" || { cat "$d/r.err"; exit 1; }
done
echo "2bw swapped with ZeRO 1-3: refused"
