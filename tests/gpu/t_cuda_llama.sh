#!/usr/bin/env bash
# t_cuda_llama.sh — `loom train --arch llama` on the GPU through the CLI (the CUDA build's
# $LOOM; DEV=cpu runs the same script on the CPU backend, to check the script itself):
#   1. a 10-step AdamW trajectory (grouped-query attention, untied head, weight decay,
#      clipping, accumulation 2) on $DEV equals the CPU's: losses within 2e-4 per step, the
#      exported Hugging Face directories' tensors within 1e-4;
#   2. `loom sample --dump-logits` on $DEV from that directory equals tests/torch_llama.py's
#      logits on it (the reference written for this project) within 1e-4 of the largest;
#   3. with transformers importable: LlamaForCausalLM.from_pretrained on the directory gives
#      the same logits (skipped, saying so, without it);
#   4. grouped-query attention on the flash kernels (the default: bf16, head size 64, T 128, kv
#      heads expanded in scratch) against the GQA kernels (LOOM_CUDA_FLASH_GQA=0) in bf16: 10
#      steps, losses within 1e-2 of each other (skipped for DEV=cpu).
# Exit 77 (skip) when this loom has no usable GPU.
set -eu
. "$(dirname "$0")/../lib.sh"
LOOM=${LOOM:-build-cuda/loom}
DEV=${DEV:-cuda:fp32}
REF="$PY $(dirname "$0")/../torch_ref.py"
LREF="$PY $(dirname "$0")/../torch_llama.py"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/d.bin" 256 30000 2
shape="--arch llama --layers 2 --heads 4 --kv-heads 2 --dim 64 --vocab 256 --block-size 64
       --seed 5 --data $d/d.bin --progress off"
need_gpu $shape --batch 2 --seq 8 --device "$DEV"

echo "== 1. 10-step trajectory, $DEV vs cpu"
traj="--batch 4 --seq 32 --steps 10 --grad-accum 2 --lr 1e-3 --weight-decay 0.1 --grad-clip 1.0"
for dev in cpu "$DEV"; do
    tag=${dev//:/_}
    $LOOM train $shape $traj --device "$dev" --metrics "$d/t_$tag.jsonl" --export "$d/hf_$tag"
done
tag=${DEV//:/_}
$REF compare-losses "$d/t_$tag.jsonl" "$d/t_cpu.jsonl" --tol 2e-4
$REF compare-st "$d/hf_$tag/model.safetensors" "$d/hf_cpu/model.safetensors" --tol 1e-4

echo "== 2. sampling logits on $DEV vs the reference"
toks=1,2,3,250,7,9,42,100
$LOOM sample --ckpt "$d/hf_$tag" --prompt-tokens "$toks" --device "$DEV" --dump-logits "$d/got.f32"
$LREF logits --init "$d/hf_$tag" --tokens "$toks" --out "$d/ref.f32"
$PY - "$d/got.f32" "$d/ref.f32" <<'PY'
import sys, numpy as np
got, ref = (np.fromfile(p, dtype=np.float32) for p in sys.argv[1:])
err = float(np.abs(got - ref).max() / np.abs(ref).max())
print(f"loom sample logits vs reference: max relative {err:.2g} (bound 1e-4)")
sys.exit(0 if got.shape == ref.shape and err <= 1e-4 else 1)
PY

echo "== 3. transformers LlamaForCausalLM on the exported directory"
if $PY -c "import transformers, torch" 2>/dev/null; then
    $PY - "$d/hf_$tag" "$toks" "$d/ref.f32" <<'PY'
import sys, numpy as np, torch, transformers
v = tuple(int(x) for x in transformers.__version__.split(".")[:2])
kw = {"dtype" if v >= (4, 56) else "torch_dtype": torch.float32} # renamed in 4.56
m = transformers.LlamaForCausalLM.from_pretrained(sys.argv[1], **kw).eval()
toks = [int(t) for t in sys.argv[2].split(",")]
got = m(torch.tensor([toks])).logits[0].detach().numpy()
ref = np.fromfile(sys.argv[3], dtype=np.float32).reshape(got.shape)
err = float(np.abs(got - ref).max() / np.abs(ref).max())
print(f"transformers {transformers.__version__} vs the reference: max relative {err:.2g} (bound 1e-5)")
sys.exit(0 if err <= 1e-5 else 1)
PY
else
    echo "transformers/torch not importable by $PY: part 3 not run"
fi

echo "== 4. grouped-query attention on the flash kernels (bf16)"
case $DEV in
cuda*)
    fl="--arch llama --layers 2 --heads 4 --kv-heads 2 --dim 256 --vocab 256 --block-size 128
        --seed 5 --data $d/d.bin --progress off --batch 4 --seq 128 --steps 10 --lr 1e-3"
    LOOM_CUDA_FLASH_GQA=0 $LOOM train $fl --device cuda:bf16 --metrics "$d/g_plain.jsonl"
    $LOOM train $fl --device cuda:bf16 --metrics "$d/g_flash.jsonl"
    $PY - "$d/g_plain.jsonl" "$d/g_flash.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(p) if '"loss"' in l] for p in sys.argv[1:])
err = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"GQA on the flash kernels vs the GQA kernels (bf16): max relative loss difference "
      f"{err:.2g} over {len(a)} steps (bound 1e-2)")
sys.exit(0 if len(a) == len(b) == 10 and err <= 1e-2 else 1)
PY
    ;;
*) echo "DEV=$DEV: part 4 is for the GPU" ;;
esac
