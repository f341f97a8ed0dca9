#!/usr/bin/python3
"""bench/torch_llama_bench.py — the PyTorch side of bench/bench_llama.sh: the project's LLaMA
reference model (tests/torch_llama.py: RMSNorm, rotate-half RoPE, GQA, SwiGLU, untied head)
trained with torch.optim.AdamW on random tokens, fp32 (or --autocast bf16 on a CPU that has it),
timed per step; prints one line "RESULT {json}" with the median step time after 2 warm-up steps,
tokens/s and the peak RSS, as tests/torch_gpt.py bench does for GPT-2.

  torch_llama_bench.py --layers L --heads H --kv-heads KV --dim C --ffn-dim F --vocab V
                       --seq T --batch B --steps S --threads N [--autocast bf16] [--tie-embeddings]
"""
import os
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import argparse, json, resource, statistics, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import torch
import torch_gpt as tg
import torch_llama as tl


def random_state(L, C, H, KV, Fh, V, seed):
    """the reference's tensor names, N(0, 0.02) weights and unit norms (the values do not matter
    for speed; the shapes do)"""
    g = torch.Generator().manual_seed(seed)
    hs = C // H

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.02
    st = {"model.embed_tokens.weight": w(V, C), "model.norm.weight": torch.ones(C), "lm_head.weight": w(V, C)}
    for i in range(L):
        p = f"model.layers.{i}."
        st[p + "input_layernorm.weight"] = torch.ones(C)
        st[p + "post_attention_layernorm.weight"] = torch.ones(C)
        st[p + "self_attn.q_proj.weight"] = w(H * hs, C)
        st[p + "self_attn.k_proj.weight"] = w(KV * hs, C)
        st[p + "self_attn.v_proj.weight"] = w(KV * hs, C)
        st[p + "self_attn.o_proj.weight"] = w(C, H * hs)
        st[p + "mlp.gate_proj.weight"] = w(Fh, C)
        st[p + "mlp.up_proj.weight"] = w(Fh, C)
        st[p + "mlp.down_proj.weight"] = w(C, Fh)
    return st


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in (("layers", 2), ("heads", 4), ("kv-heads", 0), ("dim", 64), ("ffn-dim", 192),
                          ("vocab", 256), ("seq", 64), ("batch", 2), ("steps", 6), ("threads", 2), ("seed", 1)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--autocast", choices=["none", "bf16"], default="none")
    p.add_argument("--tie-embeddings", action="store_true", help="the head is the token embedding")
    a = p.parse_args()
    tg.set_threads(a.threads)
    kv = a.kv_heads or a.heads
    opts = argparse.Namespace(heads=a.heads, kv_heads=kv, rope_theta=10000.0, rope="half", norm_eps=1e-5,
                              rope_scaling="none")
    st = random_state(a.layers, a.dim, a.heads, kv, a.ffn_dim, a.vocab, a.seed)
    if a.tie_embeddings:
        del st["lm_head.weight"]
    m = tl.Llama(st, opts)
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4)
    g = torch.Generator().manual_seed(a.seed + 1)
    times = []
    for _ in range(a.steps):
        tok = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16"):
            _, loss = m(tok[:, :-1], tok[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss.item()
        times.append(time.perf_counter() - t0)
    med = statistics.median(times[2:] if len(times) > 3 else times)
    res = {"params": sum(x.numel() for x in m.parameters()), "median_ms": round(med * 1000, 2),
           "tokens_per_s": round(a.batch * a.seq / med, 1), "threads": torch.get_num_threads(),
           "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    print("RESULT " + json.dumps(res))


if __name__ == "__main__":
    main()
