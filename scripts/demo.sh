#!/usr/bin/env bash
# demo.sh — `make demo`: install what is missing (as root), build, prepare the bundled corpus
# (Debian's `fortunes` package, byte-level tokens), train a small GPT for about two minutes on
# two cores with the live progress line, plot the loss and print a generated sample.
# --shuffle on makes every row of a micro-batch an independent sequence: against consecutive
# rows, half the training-loss noise and 5% lower validation loss in this recipe (BENCHMARKS.md,
# "Data order").
set -eu
cd "$(dirname "$0")/.."
bash scripts/deps.sh demo
make -j2 loom
export OMP_WAIT_POLICY=PASSIVE
corpus=/usr/share/games/fortunes
files=$(find "$corpus" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
out=data/fortunes
if [ ! -f "$out/meta.json" ]; then
    ./loom prepare --tokenizer byte --out "$out" --val-fraction 0.05 $files
fi
run=runs/demo
rm -rf "$run"; mkdir -p "$run"
./loom train \
    --data "$out/train_*.bin" --val-data "$out/val_*.bin" \
    --layers 4 --heads 4 --dim 128 --vocab 256 --block-size 128 \
    --batch 16 --seq 128 --steps ${DEMO_STEPS:-700} \
    --lr 2e-3 --warmup 20 --lr-schedule cosine --min-lr 2e-4 --weight-decay 0.1 --grad-clip 1.0 \
    --val-every 100 --metrics "$run/metrics.jsonl" --save "$run/ckpt" --shuffle on
./loom plot "$run/metrics.jsonl" -o "$run/loss.svg" --title "loom demo: 4-layer GPT on fortunes"
echo
echo "loss curve: $run/loss.svg   checkpoint: $run/ckpt"
echo "---- sample (loom sample --ckpt $run/ckpt --prompt 'The ') ----"
./loom sample --ckpt "$run/ckpt" --prompt "The " --tokens 400 --temperature 0.8 --top-k 40
