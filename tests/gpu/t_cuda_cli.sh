#!/usr/bin/env bash
# t_cuda_cli.sh — `loom train / sample / export` on the GPU through the CLI (the CUDA build's
# $LOOM), against the CPU backend and against Hugging Face transformers:
#   1. first-step gradients (--dump-grads) of --device cuda:fp32 vs cpu: every tensor within
#      1e-4 of its max (tests/torch_ref.py compare-st --rel), loss within 1e-5;
#   2. a 10-step trajectory (AdamW, weight decay, clipping, accumulation 3): losses within 2e-4
#      per step, exported weights within 1e-4;
#   2b. --recompute-gelu equals the plain run: fp32 exactly (losses and weights), bf16 within
#      1e-5 per step;
#   3. checkpoints saved on the GPU resume on the CPU, and the CPU's on the GPU (final weights
#      within 1e-4 of the uninterrupted run on the other device);
#   4. bf16 and fp32 on the bundled corpus (data/fortunes, FORTUNES overrides; skipped when
#      absent): 300 steps each (head size 64, so bf16 takes the flash attention), validation
#      losses within 1% of each other;
#   5. an exported checkpoint loads into transformers' GPT2LMHeadModel (PyTorch, CPU, fp32),
#      whose logits match `loom sample --dump-logits --device cuda:fp32` within 1e-4 of the
#      largest logit.
# Exit 77 (skip) when this loom has no usable GPU.
set -eu
. "$(dirname "$0")/../lib.sh"
LOOM=${LOOM:-build-cuda/loom}
REF="$PY $(dirname "$0")/../torch_ref.py"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/d.bin" 300 30000 2
shape="--layers 3 --heads 4 --dim 64 --vocab 300 --block-size 64 --seed 5 --data $d/d.bin --progress off"
need_gpu $shape --batch 2 --seq 8 --device cuda:fp32

echo "== 1. first-step gradients, cuda:fp32 vs cpu"
for dev in cpu cuda:fp32; do
    $LOOM train $shape --batch 4 --seq 48 --grad-accum 2 --steps 1 --device $dev \
        --dump-grads "$d/g_$dev.st" --metrics "$d/g_$dev.jsonl"
done
$REF compare-st "$d/g_cuda:fp32.st" "$d/g_cpu.st" --rel --tol 1e-4
$REF compare-losses "$d/g_cuda:fp32.jsonl" "$d/g_cpu.jsonl" --tol 1e-5

echo "== 2. 10-step trajectory"
traj="--batch 4 --seq 32 --steps 10 --grad-accum 3 --lr 1e-3 --weight-decay 0.1 --grad-clip 1.0"
for dev in cpu cuda:fp32; do
    $LOOM train $shape $traj --device $dev --metrics "$d/t_$dev.jsonl" --export "$d/t_$dev.st" \
        --save "$d/ck_$dev" --save-every 5 --keep 0
done
$REF compare-losses "$d/t_cuda:fp32.jsonl" "$d/t_cpu.jsonl" --tol 2e-4
$REF compare-st "$d/t_cuda:fp32.st" "$d/t_cpu.st" --tol 1e-4

echo "== 2b. --recompute-gelu on the GPU: the same trajectory, fp32 and bf16"
$LOOM train $shape $traj --device cuda:fp32 --recompute-gelu --metrics "$d/rg.jsonl" \
    --export "$d/rg.st"
$REF compare-losses "$d/rg.jsonl" "$d/t_cuda:fp32.jsonl" --tol 0
$REF compare-st "$d/rg.st" "$d/t_cuda:fp32.st" --tol 0
for rg in "" --recompute-gelu; do
    $LOOM train $shape $traj --device cuda:bf16 $rg --metrics "$d/b$rg.jsonl"
done
$REF compare-losses "$d/b--recompute-gelu.jsonl" "$d/b.jsonl" --tol 1e-5

echo "== 3. checkpoints across devices (resume at step 5)"
$LOOM train $shape $traj --device cpu --resume "$d/ck_cuda:fp32/step_00000005" --export "$d/r_cpu.st"
$REF compare-st "$d/r_cpu.st" "$d/t_cuda:fp32.st" --tol 1e-4
$LOOM train $shape $traj --device cuda:fp32 --resume "$d/ck_cpu/step_00000005" --export "$d/r_gpu.st"
$REF compare-st "$d/r_gpu.st" "$d/t_cpu.st" --tol 1e-4

echo "== 4. bf16 vs fp32 on the bundled corpus"
corpus_vs_fp32 bf16 "$d"

echo "== 5. transformers GPT2LMHeadModel on the exported checkpoint"
if $PY -c "import transformers, torch" 2>/dev/null; then
    toks=$(seq -s, 7 11 450 | awk -F, '{for(i=1;i<=NF;i++) printf "%s%d", (i>1?",":""), $i % 300}')
    $LOOM sample --ckpt "$d/ck_cuda:fp32" --prompt-tokens "$toks" --device cuda:fp32 \
        --dump-logits "$d/logits.f32"
    $PY "$(dirname "$0")/hf_logits.py" "$d/t_cuda:fp32.st" "$toks" "$d/logits.f32" \
        --layers 3 --heads 4 --dim 64 --vocab 300 --block-size 64
else
    echo "transformers/torch not importable by $PY: part 5 not run"
fi
