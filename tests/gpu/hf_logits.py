#!/usr/bin/env python3
"""hf_logits.py — the independent check of loom's exported safetensors: load them into Hugging
Face transformers' GPT2LMHeadModel (PyTorch, CPU, fp32) and compare its logits for the given
tokens with loom's (raw float32 (T,V) from `loom sample --dump-logits`).

  hf_logits.py WEIGHTS.safetensors 1,2,3 LOOM_LOGITS.f32 --layers L --heads H --dim C
               --vocab V --block-size T [--tol 1e-4]

Passes when max |hf − loom| <= tol · max |hf| and every weight the model has was in the file
(only the causal-mask buffers may be missing)."""
import argparse, sys

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("weights"); p.add_argument("tokens"); p.add_argument("logits")
    for k in ("layers", "heads", "dim", "vocab", "block_size"):
        p.add_argument("--" + k.replace("_", "-"), type=int, required=True)
    p.add_argument("--tol", type=float, default=1e-4)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    cfg = GPT2Config(n_layer=a.layers, n_head=a.heads, n_embd=a.dim, vocab_size=a.vocab,
                     n_positions=a.block_size, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     layer_norm_epsilon=1e-5, activation_function="gelu_new")
    model = GPT2LMHeadModel(cfg).eval()
    sd = {k[len("transformer."):] if k.startswith("transformer.") else k: v
          for k, v in load_file(a.weights).items()}
    missing, unexpected = model.transformer.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith(("attn.bias", "attn.masked_bias"))]
    if missing or unexpected:
        print("weights do not match GPT2LMHeadModel: missing", missing, "unexpected", unexpected)
        return 1
    model.tie_weights()
    toks = torch.tensor([[int(t) for t in a.tokens.split(",")]])
    with torch.no_grad():
        hf = model(toks).logits[0].double().numpy()
    loom = np.fromfile(a.logits, dtype=np.float32).astype(np.float64)
    if loom.size != hf.size:
        print(f"loom wrote {loom.size} logits, transformers gives {hf.shape}")
        return 1
    loom = loom.reshape(hf.shape)
    d, scale = float(np.max(np.abs(hf - loom))), float(np.max(np.abs(hf)))
    print(f"transformers {__import__('transformers').__version__} vs loom: max |Δlogit| {d:.3g}, "
          f"max |logit| {scale:.3g}, relative {d / scale:.3g} (bound {a.tol})")
    return 0 if np.isfinite(loom).all() and d <= a.tol * scale else 1


if __name__ == "__main__":
    sys.exit(main())
