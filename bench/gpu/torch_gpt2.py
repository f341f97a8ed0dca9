#!/usr/bin/env python3
"""torch_gpt2.py — the PyTorch peer for bench/gpu/bench_gpu.sh: GPT-2 (124M or 350M shapes) or
a LLaMA-style model (smol135m: SmolLM-135M's shape, L30 C576 H9 kv-heads 3 ffn 1536 V49152;
llama1b: Llama-3.2-1B's, L16 C2048 H32 kv-heads 8 ffn 8192 V128256; both with tied embeddings,
RMSNorm eps 1e-5, RoPE θ 10000 rotate-half, SwiGLU, no biases, as loom's --arch llama) trained
on random tokens on one GPU the way a PyTorch user writes it: nn.Linear layers,
F.scaled_dot_product_attention(is_causal=True) (PyTorch picks its flash kernel; enable_gqa for
kv-heads < heads), bf16 autocast with fp32 master weights, fused AdamW; eager or torch.compile.

  torch_gpt2.py --model 124m --batch 16 --seq 1024 --steps 30 --warmup 10 --mode eager|compile

Prints one JSON line: median step ms over the timed steps (CUDA events), tokens/s, MFU against
--peak-tflops with loom's FLOP count (gpt_flops_per_step), peak GPU memory (max allocated and
max reserved by PyTorch's allocator)."""
import argparse, json, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {"124m": (12, 12, 768), "350m": (24, 16, 1024)}
LLAMA = {"smol135m": dict(L=30, H=9, KV=3, C=576, F=1536, V=49152),  # (L, H, KV, C, F, V)
         "llama1b": dict(L=16, H=32, KV=8, C=2048, F=8192, V=128256)}


class RMSNorm(nn.Module):  # nn.RMSNorm where this PyTorch has it (2.4 on)
    def __init__(self, C, eps):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps).to(x.dtype) * self.weight


def rms_norm(C):
    return nn.RMSNorm(C, eps=1e-5) if hasattr(nn, "RMSNorm") else RMSNorm(C, 1e-5)


def sdpa_gqa(q, k, v):  # enable_gqa from PyTorch 2.5 on; repeated K/V before
    if k.shape[1] == q.shape[1]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    try:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    except TypeError:
        r = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(r, dim=1), v.repeat_interleave(r, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def rope_tables(T, hs, dev, theta=10000.0):
    inv = 1.0 / theta ** (torch.arange(0, hs, 2, device=dev, dtype=torch.float32) / hs)
    ang = torch.outer(torch.arange(T, device=dev, dtype=torch.float32), inv)  # (T, hs/2)
    return torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()


def rope(x, cos, sin):  # rotate-half over the two halves of each head (Hugging Face's)
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], -1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, C, H, KV, F):
        super().__init__()
        self.H, self.KV, self.hs = H, KV, C // H
        self.norm1, self.norm2 = rms_norm(C), rms_norm(C)
        self.q = nn.Linear(C, C, bias=False)
        self.kv = nn.Linear(C, 2 * KV * self.hs, bias=False)
        self.o = nn.Linear(C, C, bias=False)
        self.gate_up = nn.Linear(C, 2 * F, bias=False)
        self.down = nn.Linear(F, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        h = self.norm1(x)
        q = self.q(h).view(B, T, self.H, self.hs).transpose(1, 2)
        k, v = self.kv(h).view(B, T, 2, self.KV, self.hs).permute(2, 0, 3, 1, 4)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = sdpa_gqa(q, k, v)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, C))
        g, u = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self, L, H, KV, C, F, V, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.h = nn.ModuleList(LlamaBlock(C, H, KV, F) for _ in range(L))
        self.norm = rms_norm(C)
        self.T, self.hs = T, C // H
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        cos, sin = rope_tables(idx.shape[1], self.hs, idx.device)
        x = self.wte(idx)
        for blk in self.h:
            x = blk(x, cos, sin)
        logits = F.linear(self.norm(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


def llama_flops(L, H, KV, C, F, V, B, T):  # loom's llama_flops_per_step
    hs = C / H
    mm = L * ((H + 2.0 * KV) * hs * C + C * C + 3.0 * F * C) + V * C
    return 6.0 * mm * B * T + 3.0 * (L * 4.0 * T * C) * B * T


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
    p.add_argument("--model", default="124m", choices=list(SHAPES) + list(LLAMA))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=0, help="0: the model's (GPT-2: 50257)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--mode", default="eager", choices=["eager", "compile"])
    p.add_argument("--peak-tflops", type=float, default=989.4)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True  # what autocast leaves in fp32 may use TF32
    torch.manual_seed(0)
    dev = torch.device("cuda")
    if a.model in LLAMA:
        s = LLAMA[a.model]
        a.vocab = a.vocab or s["V"]
        model = Llama(s["L"], s["H"], s["KV"], s["C"], s["F"], a.vocab, a.seq).to(dev)
        flops = llama_flops(s["L"], s["H"], s["KV"], s["C"], s["F"], a.vocab, a.batch, a.seq)
    else:
        L, H, C = SHAPES[a.model]
        a.vocab = a.vocab or 50257
        model = GPT(L, H, C, a.vocab, a.seq).to(dev)
        flops = loom_flops(L, C, a.vocab, a.batch, a.seq)
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
    mfu = flops / (ms / 1e3) / (a.peak_tflops * 1e12)
    print(json.dumps({"engine": f"pytorch-{a.mode}", "torch": torch.__version__, "model": a.model,
                      "batch": a.batch, "seq": a.seq, "step_ms": round(ms, 2),
                      "tok_s": round(tok_s), "mfu": round(mfu, 4), "loss": round(loss.item(), 4),
                      "first_step_s": round(t_compile, 1),
                      "peak_alloc_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                      "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2)}),
          flush=True)


if __name__ == "__main__":
    main()
