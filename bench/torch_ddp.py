#!/usr/bin/python3
"""torch_ddp.py - PyTorch DistributedDataParallel (gloo, CPU, fp32) training of the peer's GPT-2,
the reference loom's data parallelism is benchmarked against (bench/bench_dp.sh).

Launch with mpirun (only as a process launcher; the traffic goes over gloo's own TCP sockets):
    MASTER_ADDR=127.0.0.1 MASTER_PORT=29611 mpirun -np 2 -x MASTER_ADDR -x MASTER_PORT \
        /usr/bin/python3 bench/torch_ddp.py --threads 1 --data tokens.bin --steps 8
Rank and world size come from OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE (or RANK / WORLD_SIZE);
the rendezvous is tcp://MASTER_ADDR:MASTER_PORT (rank 0's address; 10.77.0.10 in the netlab
namespaces). Set GLOO_SOCKET_IFNAME (lo, ve0, tp0) where the hostname does not resolve.
Run without mpirun (world size 1) it trains the plain model, no DDP wrapper: the single-rank
baseline.

Same work per rank as `loom train --dp N`: micro-batch B x T per rank, grad-accum 1, rank r at
optimizer step s reads data window s*N + r (B*T+1 tokens from token window*B*T) of an llm.c
shard; AdamW (weight decay 0.1 on >= 2-dim tensors only, betas 0.9/0.95, eps 1e-8, lr 3e-4),
global-norm gradient clip 1.0 (loom's defaults). DDP defaults (25 MiB buckets).
Step time = rank 0's wall time of forward + backward (which includes DDP's all-reduce) + clip +
AdamW + loss.item(); the result is the median after --warmup steps. The last line is
"RESULT {json}" with median_ms, tokens_per_s (global: N*B*T / median step), the per-step times
and every rank's peak RSS.
"""
import os
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import argparse, datetime, json, resource, statistics, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
# the PyTorch peer: tests/torch_gpt.py (bench_dp.sh --peer-dir sets LOOM_PEER_DIR to another one)
sys.path.insert(0, os.path.abspath(os.environ.get("LOOM_PEER_DIR") or os.path.join(HERE, "..", "tests")))
import torch
import torch.distributed as dist
from torch_gpt import GPT, read_tokens, set_threads  # noqa: E402


def env_int(*names, default):
    for n in names:
        if n in os.environ:
            return int(os.environ[n])
    return default


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2, help="steps dropped before the median")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--data", required=True, help="llm.c token shard")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--timeout", type=float, default=600, help="seconds for gloo collectives")
    a = p.parse_args()

    rank = env_int("OMPI_COMM_WORLD_RANK", "RANK", default=0)
    world = env_int("OMPI_COMM_WORLD_SIZE", "WORLD_SIZE", default=1)
    set_threads(a.threads)
    torch.manual_seed(a.seed)

    model = GPT(a.layers, a.heads, a.dim, a.vocab, a.block_size)
    model.init_weights(a.seed)  # same seed on every rank: identical replicas
    decay = [q for q in model.parameters() if q.dim() >= 2]
    rest = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    toks = read_tokens(a.data)
    B, T = a.batch, a.seq
    if ((a.steps - 1) * world + world) * B * T + 1 > len(toks):
        raise SystemExit(f"torch_ddp: {a.data} has {len(toks)} tokens, too few for {a.steps} steps x {world} ranks")

    net = model
    if world > 1:
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = os.environ.get("MASTER_PORT", "29500")
        dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=a.timeout))
        net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=a.bucket_mb)

    times, losses = [], []
    for s in range(a.steps):
        w0 = (s * world + rank) * B * T
        w = toks[w0: w0 + B * T + 1]
        t0 = time.perf_counter()
        _, loss = net(w[:-1].view(B, T), w[1:].view(B, T))
        loss.backward()  # DDP: returns once every bucket's all-reduce has finished
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        if rank == 0:
            print(f"step {s + 1}/{a.steps} loss {losses[-1]:.4f} {times[-1] * 1000:.1f} ms", file=sys.stderr, flush=True)

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rss_all = [rss]
    if world > 1:
        t = torch.tensor([rss], dtype=torch.float64)
        out = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
        dist.all_gather(out, t)
        rss_all = [float(x.item()) for x in out]
    if rank == 0:
        timed = times[a.warmup:] if len(times) > a.warmup else times
        med = statistics.median(timed)
        res = {"engine": "torch_ddp" if world > 1 else "torch", "backend": "gloo" if world > 1 else None,
               "ranks": world, "threads": torch.get_num_threads(), "batch": B, "seq": T,
               "params": sum(q.numel() for q in model.parameters()),
               "median_ms": round(med * 1000, 2), "tokens_per_s": round(world * B * T / med, 1),
               "step_ms": [round(x * 1000, 2) for x in times], "loss": [round(x, 5) for x in losses],
               "peak_rss_mib": [round(x, 1) for x in rss_all], "torch": torch.__version__}
        print("RESULT " + json.dumps(res), flush=True)
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
