#!/usr/bin/env python3
"""torch_fsdp_offload.py — the PyTorch peer of bench/gpu/bench_offload.sh: a GPT (torch_gpt2.py's
model, any L/H/C) trained on one GPU with FSDP and CPU offload (parameters, gradients and the
AdamW step on the host: the ZeRO-Offload class of systems), each transformer block its own FSDP
unit, bf16 autocast with fp32 master weights, the GPU memory capped at --budget-gib
(torch.cuda.set_per_process_memory_fraction) so a smaller card is emulated on a larger one.

  torch_fsdp_offload.py --layers 32 --heads 32 --dim 2560 --batch 8 --grad-accum 8 --seq 1024 \
      --steps 3 --warmup 1 --budget-gib 24

Prints one JSON line: median step seconds (wall clock, the GPU synchronized), tokens/s, peak GPU
memory (PyTorch's allocator: max allocated and reserved)."""
import argparse, json, os, statistics, sys, time

import torch
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt2 import GPT, Block  # noqa: E402  (the same model as the other PyTorch rows)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--dim", type=int, default=2560)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--grad-accum", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--budget-gib", type=float, default=24)
    a = p.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    dist.init_process_group("nccl", rank=0, world_size=1)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    total = torch.cuda.get_device_properties(dev).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, a.budget_gib * 2**30 / total), dev)
    torch.manual_seed(0)
    model = GPT(a.layers, a.heads, a.dim, a.vocab, a.seq)  # built on the host
    model = FSDP(model, auto_wrap_policy=ModuleWrapPolicy({Block}),
                 cpu_offload=CPUOffload(offload_params=True), device_id=dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    x = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    y = torch.randint(0, a.vocab, (a.batch, a.seq), device=dev)
    times = []
    for s in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for k in range(a.grad_accum):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x, y) / a.grad_accum
            loss.backward()
        model.clip_grad_norm_(1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    sec = statistics.median(times)
    tokens = a.batch * a.grad_accum * a.seq
    print(json.dumps({"engine": "pytorch-fsdp-cpu-offload", "torch": torch.__version__,
                      "layers": a.layers, "dim": a.dim, "batch": a.batch,
                      "grad_accum": a.grad_accum, "seq": a.seq, "step_s": round(sec, 3),
                      "tok_s": round(tokens / sec), "loss": round(loss.item() * a.grad_accum, 4),
                      "budget_gib": a.budget_gib,
                      "peak_alloc_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
                      "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2)}),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
