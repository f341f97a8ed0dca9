#!/usr/bin/env python3
"""torch_gpt2.py — the PyTorch peer for bench/gpu/bench_gpu.sh: GPT-2 (124M or 350M shapes)
trained on random tokens on one GPU the way a PyTorch user writes it: nn.Linear layers,
F.scaled_dot_product_attention(is_causal=True) (PyTorch picks its flash kernel), bf16 autocast
with fp32 master weights, fused AdamW; eager or torch.compile.

  torch_gpt2.py --model 124m --batch 16 --seq 1024 --steps 30 --warmup 10 --mode eager|compile

Prints one JSON line: median step ms over the timed steps (CUDA events), tokens/s, MFU against
--peak-tflops with loom's FLOP count (gpt_flops_per_step), peak GPU memory (max allocated and
max reserved by PyTorch's allocator)."""
import argparse, json, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {"124m": (12, 12, 768), "350m": (24, 16, 1024)}


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, H, C, V, T):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def loom_flops(L, C, V, B, T):  # the same count as loom's gpt_flops_per_step
    return 6.0 * (L * 12.0 * C * C + V * C) * B * T + 3.0 * (L * 4.0 * T * C) * B * T


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="124m", choices=SHAPES)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--mode", default="eager", choices=["eager", "compile"])
    p.add_argument("--peak-tflops", type=float, default=989.4)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True  # what autocast leaves in fp32 may use TF32
    torch.manual_seed(0)
    L, H, C = SHAPES[a.model]
    dev = torch.device("cuda")
    model = GPT(L, H, C, a.vocab, a.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    step_fn = model if a.mode == "eager" else torch.compile(model)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    times, t_compile = [], time.time()
    for s in range(a.warmup + a.steps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        e1.record()
        torch.cuda.synchronize()
        if s == 0:
            t_compile = time.time() - t_compile
        if s >= a.warmup:
            times.append(e0.elapsed_time(e1))
    ms = statistics.median(times)
    tok_s = a.batch * a.seq / (ms / 1e3)
    mfu = loom_flops(L, C, a.vocab, a.batch, a.seq) / (ms / 1e3) / (a.peak_tflops * 1e12)
    print(json.dumps({"engine": f"pytorch-{a.mode}", "torch": torch.__version__, "model": a.model,
                      "batch": a.batch, "seq": a.seq, "step_ms": round(ms, 2),
                      "tok_s": round(tok_s), "mfu": round(mfu, 4), "loss": round(loss.item(), 4),
                      "first_step_s": round(t_compile, 1),
                      "peak_alloc_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                      "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2)}),
          flush=True)


if __name__ == "__main__":
    main()
