#!/usr/bin/env bash
# t_torch_match.sh — loom against PyTorch (Debian python3-torch, via tests/torch_gpt.py)
# on the same initial weights and data:
#   * first-step gradients: every tensor within 1e-4 relative (max |Δ| / max |g_torch|), and
#     the first-step loss within 1e-5;
#   * a 10-step AdamW trajectory with weight decay, clipping and grad accumulation: losses within
#     2e-4 per step; exported weights within 1e-4 (absolute);
#   * safetensors import (with "transformer." prefix, no n_head metadata → --heads) gives the same
#     logits as PyTorch within 1e-4.
# asan: skip
set -eu
. "$(dirname "$0")/lib.sh"
need_torch
PEER=$(dirname "$0")/torch_gpt.py
REF="$PY $(dirname "$0")/torch_ref.py"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
$PY "$PEER" gen --layers 3 --heads 4 --dim 64 --vocab 300 --block-size 64 --seed 5 --out "$d/w.safetensors"
$PY "$PEER" tokens --vocab 300 --n 30000 --seed 2 --out "$d/d.bin"

echo "== first-step gradients"
$REF grads --init "$d/w.safetensors" --heads 4 --data "$d/d.bin" --batch 4 --seq 48 --grad-accum 2 \
    --out "$d/g_ref.safetensors" > "$d/g_ref.json"
$LOOM train --init "$d/w.safetensors" --data "$d/d.bin" --batch 4 --seq 48 --grad-accum 2 --steps 1 \
    --dump-grads "$d/g_loom.safetensors" --metrics "$d/g_loom.jsonl" --progress off
$REF compare-st "$d/g_loom.safetensors" "$d/g_ref.safetensors" --rel --tol 1e-4
$PY - "$d/g_ref.json" "$d/g_loom.jsonl" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))["loss"]; got = json.loads(open(sys.argv[2]).readline())["loss"]
print(f"first-step loss: torch {ref:.7f} loom {got:.7f}")
sys.exit(0 if abs(ref - got) <= 1e-5 else 1)
PY

echo "== 10-step trajectory (AdamW, weight decay 0.1, clip 1.0, accumulation 3)"
common="--batch 4 --seq 32 --steps 10 --grad-accum 3 --lr 1e-3 --weight-decay 0.1 --grad-clip 1.0 --beta1 0.9 --beta2 0.95 --eps 1e-8"
$PY "$PEER" train --init "$d/w.safetensors" --heads 4 --data "$d/d.bin" $common \
    --metrics "$d/ref.jsonl" --export "$d/ref_out.safetensors" > /dev/null
$LOOM train --init "$d/w.safetensors" --data "$d/d.bin" $common --lr-schedule constant \
    --metrics "$d/loom.jsonl" --export "$d/loom_out.safetensors" --progress off
$REF compare-losses "$d/loom.jsonl" "$d/ref.jsonl" --tol 2e-4
$REF compare-st "$d/loom_out.safetensors" "$d/ref_out.safetensors" --tol 1e-4

echo "== safetensors import with prefix and --heads: logits"
$PY "$PEER" gen --layers 2 --heads 2 --dim 32 --vocab 100 --block-size 16 --seed 9 \
    --prefix transformer. --out "$d/p.safetensors"
$PY - "$d/p.safetensors" "$d/p_nometa.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); h.pop("__metadata__", None)
hb = json.dumps(h).encode(); hb += b" " * ((8 - len(hb) % 8) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + raw[8 + n:])
PY
toks=5,17,99,0,42,42,7,63,11
$REF logits --init "$d/p.safetensors" --heads 2 --tokens $toks --out "$d/l_ref.f32"
$LOOM sample --ckpt "$d/p_nometa.safetensors" --heads 2 --prompt-tokens $toks --dump-logits "$d/l_loom.f32"
$REF compare-f32 "$d/l_loom.f32" "$d/l_ref.f32" --tol 1e-4
