#!/usr/bin/python3
"""torch_llama.py - a PyTorch (Debian python3-torch, CPU, fp32) LLaMA reference for loom's tests.

Written for loom from the published LLaMA definitions: pre-norm layers with RMSNorm
(x * rsqrt(mean(x^2) + eps) * w), rotary position embeddings on q and k (Hugging Face's
rotate-half convention by default: element i < hs/2 pairs with i + hs/2, angle
pos * theta^(-2i/hs); --rope interleaved rotates pairs (2i, 2i+1) instead, the original
Meta convention, used as a negative control: it must NOT match loom), grouped-query causal
attention (each kv head repeated for H/KV query heads, head h uses kv head h // (H/KV)),
no biases, an MLP down(silu(gate(x)) * up(x)), a final RMSNorm and an LM head that is
lm_head.weight, or the token embedding when the file has no lm_head (tied).

Reads loom's exported weights (safetensors, Hugging Face Llama names: model.embed_tokens.weight,
model.layers.N.{input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
mlp.{gate,up,down}_proj}.weight, model.norm.weight, lm_head.weight) and llm.c token shards, in
loom's data order (tests/torch_gpt.py micro_batch, windows); the AdamW set-up (decay on tensors
with >= 2 dims), schedule and clipping are torch_gpt.py's.

Commands
  grads  --init W|DIR --data D --heads H --kv-heads KV --batch B --seq T --grad-accum K --out G
         the first step's mean-loss gradient (same names), prints {"loss": ...}
  train, co2  torch_gpt.py's commands (same flags: AdamW, --mode 2bw, CO2's outer rule) on
         this model; add --heads H --kv-heads KV
  logits --init W --heads H --kv-heads KV --tokens 1,2,3 --out L.f32   logits (T,V), float32
  compare-losses A.jsonl B.jsonl --tol X    max relative |a-b|/|b| per step; exit 1 above tol
Common: --rope half|interleaved, --rope-theta (10000), --norm-eps (1e-5), --rope-scaling
none|llama3 with --rope-factor, --rope-low-freq-factor, --rope-high-freq-factor,
--rope-original-max-pos (Llama 3.1's frequency scaling, scaled_inv_freq below). --init DIR reads a
Hugging Face Llama directory (tests/hf_dir.py; F32/BF16/F16, sharded or not): its config.json
sets --heads, --kv-heads, --norm-eps, --rope-theta and the rope_scaling (rope_type "llama3").
"""
import os
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import argparse, json, math, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_gpt as tg


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin, mode):
    """x (B, heads, T, hs); cos, sin (T, hs/2)"""
    if mode == "half":
        h = x.shape[-1] // 2
        x1, x2 = x[..., :h], x[..., h:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # interleaved pairs (2i, 2i+1)
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)


def scaled_inv_freq(inv, a):
    """Llama 3.1's RoPE frequency scaling, as Meta published it with the model: with the
    original context n, a frequency whose wavelength 2*pi/f exceeds n / low_freq_factor is
    divided by the factor; one whose wavelength is below n / high_freq_factor is kept; between
    them f is interpolated, (1 - s) * f / factor + s * f with s = (n / wavelength - low) / (high - low)."""
    if a.rope_scaling != "llama3":
        return inv
    n, lo, hi, k = a.rope_original_max_pos, a.rope_low_freq_factor, a.rope_high_freq_factor, a.rope_factor
    out = []
    for f in inv.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < n / hi:
            out.append(f)
        elif wavelen > n / lo:
            out.append(f / k)
        else:
            s = (n / wavelen - lo) / (hi - lo)
            out.append((1 - s) * f / k + s * f)
    return torch.tensor(out, dtype=torch.float32)


class Layer(nn.Module):
    def __init__(self, C, H, KV, Fh, eps):
        super().__init__()
        self.H, self.KV, self.hs = H, KV, C // H
        self.input_layernorm = RMSNorm(C, eps)
        self.q_proj = nn.Linear(C, H * self.hs, bias=False)
        self.k_proj = nn.Linear(C, KV * self.hs, bias=False)
        self.v_proj = nn.Linear(C, KV * self.hs, bias=False)
        self.o_proj = nn.Linear(H * self.hs, C, bias=False)
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.gate_proj = nn.Linear(C, Fh, bias=False)
        self.up_proj = nn.Linear(C, Fh, bias=False)
        self.down_proj = nn.Linear(Fh, C, bias=False)

    def forward(self, x, cos, sin, mode):
        B, T, C = x.shape
        H, KV, hs = self.H, self.KV, self.hs
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, H, hs).transpose(1, 2)
        k = self.k_proj(h).view(B, T, KV, hs).transpose(1, 2)
        v = self.v_proj(h).view(B, T, KV, hs).transpose(1, 2)
        q, k = rope(q, cos, sin, mode), rope(k, cos, sin, mode)
        k = k.repeat_interleave(H // KV, dim=1)  # head h uses kv head h // (H/KV)
        v = v.repeat_interleave(H // KV, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, H * hs)
        x = x + self.o_proj(y)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, st, a):
        super().__init__()
        V, C = st["model.embed_tokens.weight"].shape
        L = 1 + max(int(k.split(".")[2]) for k in st if k.startswith("model.layers."))
        Fh = st["model.layers.0.mlp.gate_proj.weight"].shape[0]
        self.V, self.hs, self.theta, self.mode = V, C // a.heads, a.rope_theta, a.rope
        self.a = a
        self.tied = "lm_head.weight" not in st
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList([Layer(C, a.heads, a.kv_heads, Fh, a.norm_eps) for _ in range(L)])
        self.norm = RMSNorm(C, a.norm_eps)
        self.lm_head = None if self.tied else nn.Linear(C, V, bias=False)
        with torch.no_grad():
            for name, p in self.named():
                p.copy_(st[name])

    def named(self):
        yield "model.embed_tokens.weight", self.embed_tokens.weight
        for i, b in enumerate(self.layers):
            p = f"model.layers.{i}."
            yield p + "input_layernorm.weight", b.input_layernorm.weight
            for n in ("q", "k", "v", "o"):
                yield p + f"self_attn.{n}_proj.weight", getattr(b, f"{n}_proj").weight
            yield p + "post_attention_layernorm.weight", b.post_attention_layernorm.weight
            for n in ("gate", "up", "down"):
                yield p + f"mlp.{n}_proj.weight", getattr(b, f"{n}_proj").weight
        yield "model.norm.weight", self.norm.weight
        if not self.tied:
            yield "lm_head.weight", self.lm_head.weight

    def hf_items(self):
        """torch_gpt.py's (name, tensor, transposed) triples: nothing is stored transposed"""
        return ((n, p, False) for n, p in self.named())

    def forward(self, idx, targets=None):
        B, T = idx.shape
        inv = 1.0 / (self.theta ** (torch.arange(0, self.hs, 2, dtype=torch.int64).float() / self.hs))
        inv = scaled_inv_freq(inv, self.a)
        ang = torch.outer(torch.arange(T).float(), inv)  # (T, hs/2)
        cos, sin = ang.cos(), ang.sin()
        x = self.embed_tokens(idx)
        for b in self.layers:
            x = b(x, cos, sin, self.mode)
        w = self.embed_tokens.weight if self.tied else self.lm_head.weight
        logits = F.linear(self.norm(x), w)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, self.V), targets.reshape(-1))


def load(a):
    if not os.path.isdir(a.init):
        return Llama(tg.load_safetensors(a.init), a)
    import hf_dir  # a Hugging Face directory: its config.json gives the shape
    cfg, st = hf_dir.read_dir(a.init)
    a.heads = cfg["num_attention_heads"]
    a.kv_heads = cfg.get("num_key_value_heads") or a.heads
    a.norm_eps, a.rope_theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    rs = cfg.get("rope_scaling") or {}
    a.rope_scaling = rs.get("rope_type", rs.get("type", "none"))
    if a.rope_scaling == "llama3":
        a.rope_factor, a.rope_low_freq_factor = rs["factor"], rs["low_freq_factor"]
        a.rope_high_freq_factor = rs["high_freq_factor"]
        a.rope_original_max_pos = rs["original_max_position_embeddings"]
    if cfg.get("tie_word_embeddings", False):
        st.pop("lm_head.weight", None)
    return Llama({k: torch.from_numpy(v.copy()) for k, v in st.items()}, a)


def cmd_grads(a):
    m, toks = load(a), tg.read_tokens(a.data)
    loss = tg.grads_at(m, toks, 0, a)
    tg.save_safetensors(a.out, [(n, p.grad) for n, p in m.named()])
    print(json.dumps({"loss": loss}))


@torch.no_grad()
def cmd_logits(a):
    logits, _ = load(a)(torch.tensor([[int(t) for t in a.tokens.split(",")]]))
    logits[0].numpy().astype("float32").tofile(a.out)


def with_llama(cmd):
    """torch_gpt.py's command, its model this LLaMA (training loop, AdamW, CO2 rule: theirs)"""
    def run(a):
        tg.model_from_safetensors = lambda path, heads: load(a)
        return cmd(a)
    return run


def cmd_compare_losses(a):
    def losses(p):
        return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
    x, y = losses(a.a), losses(a.b)
    if sorted(x) != sorted(y) or not x:
        print("steps differ:", sorted(x), sorted(y))
        return 1
    worst = max(abs(x[s] - y[s]) / abs(y[s]) for s in x)
    print(f"{len(x)} steps, max relative loss difference {worst:.3g} (tolerance {a.tol:g})")
    return 0 if worst <= a.tol else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd", choices=["grads", "train", "co2", "logits", "compare-losses"])
    p.add_argument("--tokens")
    p.add_argument("a", nargs="?"); p.add_argument("b", nargs="?")
    p.add_argument("--init"); p.add_argument("--data"); p.add_argument("--out")
    p.add_argument("--metrics"); p.add_argument("--export")
    p.add_argument("--heads", type=int, default=4); p.add_argument("--kv-heads", type=int, default=0)
    p.add_argument("--rope", choices=["half", "interleaved"], default="half")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--norm-eps", type=float, default=1e-5)
    p.add_argument("--rope-scaling", choices=["none", "llama3"], default="none")
    p.add_argument("--rope-factor", type=float, default=8.0)
    p.add_argument("--rope-low-freq-factor", type=float, default=1.0)
    p.add_argument("--rope-high-freq-factor", type=float, default=4.0)
    p.add_argument("--rope-original-max-pos", type=int, default=8192)
    p.add_argument("--batch", type=int, default=4); p.add_argument("--seq", type=int, default=32)
    p.add_argument("--grad-accum", type=int, default=1); p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-3); p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95); p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1); p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--mode", choices=["plain", "2bw"], default="plain")
    p.add_argument("--rows", default="windows"); p.add_argument("--data-seed", type=int, default=None)
    p.add_argument("--seed", type=int, default=0); p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr-schedule", default="constant"); p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--workers", type=int, default=2); p.add_argument("--tau", type=int, default=4)
    p.add_argument("--outer-lr", type=float, default=1.0); p.add_argument("--outer-momentum", type=float, default=0.5)
    p.add_argument("--gap-penalty", default="1.0"); p.add_argument("--outer-clip", type=float, default=0.0)
    a = p.parse_args()
    a.kv_heads = a.kv_heads or a.heads
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cmds = {"grads": cmd_grads, "train": with_llama(tg.cmd_train), "co2": with_llama(tg.cmd_co2),
            "logits": cmd_logits, "compare-losses": cmd_compare_losses}
    return cmds[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
