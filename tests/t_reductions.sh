#!/usr/bin/env bash
# t_reductions.sh — the gradient norm does not depend on where blocks live: it is a sum of
# per-chunk partials in chunk order (src/model/layout.c), so layouts that hold the same gradient
# values report the same norm to the last bit (compared as %.17g strings):
#   * dp 2 under ZeRO 0, 1, 2 and 3 (each shard's owner computes its chunks);
#   * gpipe with 2, 3 and 4 stages (each stage computes its blocks' chunks).
#   * the single process and the pipeline (the tied embedding's gradient is E + H on both: the
#     embedding's part plus the head's, accumulated apart, see gpt.h head_dwte).
# Negative control: with the head's part accumulated straight into the embedding's
# (LOOM_TIED_INTERLEAVED, the order before) the comparison must see the difference.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 60000 3
flags="--data $d/train.bin --layers 4 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2
       --seq 16 --steps 3 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5"
norms() { grep -o '"grad_norm":[^,]*' "$1"; }
for z in 0 1 2 3; do
    $MPI -np 2 $LOOM train $flags --grad-accum 1 --dp 2 --zero $z --bucket-mb 0.02 \
        --metrics "$d/z$z.jsonl"
done
for z in 1 2 3; do
    diff <(norms "$d/z0.jsonl") <(norms "$d/z$z.jsonl") ||
        { echo "dp 2: ZeRO $z's gradient norm differs from ZeRO 0's"; exit 1; }
done
echo "dp 2, ZeRO 0-3: $(norms "$d/z0.jsonl" | head -1) on every layout, every step"
for D in 2 3 4; do
    $MPI -np $D $LOOM train $flags --grad-accum 4 --pp $D --schedule gpipe --metrics "$d/p$D.jsonl"
done
for D in 3 4; do
    diff <(norms "$d/p2.jsonl") <(norms "$d/p$D.jsonl") ||
        { echo "gpipe: $D stages' gradient norm differs from 2 stages'"; exit 1; }
done
echo "gpipe 2, 3, 4 stages: $(norms "$d/p2.jsonl" | head -1) on every layout, every step"
$LOOM train $flags --grad-accum 4 --metrics "$d/single.jsonl"
diff <(norms "$d/single.jsonl") <(norms "$d/p2.jsonl") ||
    { echo "the single process's gradient norm differs from the pipeline's"; exit 1; }
echo "single process: the same bits as the pipeline (tied embedding summed as E + H on both)"
LOOM_TIED_INTERLEAVED=1 $LOOM train $flags --grad-accum 4 --metrics "$d/inter.jsonl"
if diff -q <(norms "$d/inter.jsonl") <(norms "$d/p2.jsonl") > /dev/null; then
    echo "negative control: the head's part accumulated straight into the embedding's (another"
    echo "order) reports the same norm bits: the comparison cannot see last bits"
    exit 1
fi
echo "negative control: the tied embedding summed in another order reports $(norms "$d/inter.jsonl" | head -1): seen"
