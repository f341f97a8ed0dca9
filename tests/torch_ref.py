#!/usr/bin/python3
"""torch_ref.py — reference values from PyTorch for loom's tests, on top of the PyTorch GPT-2
peer tests/torch_gpt.py (its model, safetensors/token files and AdamW set-up; the peer itself
runs `train` (plain, 2bw) and `co2` (constant or adaptive gap penalty)), and the comparisons
the tests make (NumPy only).

  grads  --init W --data D --batch B --seq T --grad-accum K --out G.safetensors
         gradient of the first step's mean loss (HF names and layout) and prints the loss
  logits --init W --tokens 1,2,3 --out L.f32      logits (T,V) as raw float32
  delayed-dp --init W --data D --workers N --steps S --batch B --seq T [AdamW flags] --metrics M --export E
         data parallelism in which every worker's own AdamW update, computed at the weights of
         one step earlier, is averaged and applied one step late:
         a(t+1) = a(t) - mean_r u_r(a(t-1)), a(1) = a(0), the last average applied at the end
         (CO2 with tau=1, beta=0, alpha=1, lambda=1, no outer clip must equal this)
  compare-st A B --tol X [--rel]   max |a-b| over all tensors (relative to each tensor's max |b|
         with --rel); exit 1 when above tol, when the tensor names or shapes differ, or when
         either file holds a NaN or an infinity
  compare-losses A.jsonl B.jsonl --tol X   per-step |loss_a - loss_b|; exit 1 when above tol,
         when the steps differ or when a loss is not finite
  compare-f32 A B --tol X          max |a-b| of two raw float32 files (exit 1 as for compare-st)
"""
import argparse, json, math, os, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # torch_gpt.py sits next to this file


def read_st(path):
    """{name: float32 numpy array} of a safetensors file, without importing torch (the compare
    commands run it many times per suite); the peer's torch_gpt.load_safetensors wraps it."""
    import numpy as np
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        if v["dtype"] != "F32":
            raise SystemExit(f"{path}: {k}: only F32 is supported here, got {v['dtype']}")
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], dtype=np.float32).reshape(v["shape"])
    return out


def cmd_grads(a):
    import torch
    import torch_gpt as tg
    tg.set_threads(2)
    m = tg.model_from_safetensors(a.init, a.heads)
    toks = tg.read_tokens(a.data)
    ns = argparse.Namespace(batch=a.batch, seq=a.seq, grad_accum=a.grad_accum)
    loss = tg.grads_at(m, toks, 0, ns)
    tg.save_safetensors(a.out, [(n, p.grad.t() if conv else p.grad) for n, p, conv in m.hf_items()])
    print(json.dumps({"loss": loss}))


def cmd_logits(a):
    import torch
    import torch_gpt as tg
    m = tg.model_from_safetensors(a.init, a.heads)
    idx = torch.tensor([[int(t) for t in a.tokens.split(",")]])
    with torch.no_grad():
        logits, _ = m(idx)
    logits[0].numpy().astype("float32").tofile(a.out)


def cmd_delayed_dp(a):
    import copy
    import torch
    import torch_gpt as tg
    tg.set_threads(1)
    base = tg.model_from_safetensors(a.init, a.heads)
    toks = tg.read_tokens(a.data)
    N, B, T = a.workers, a.batch, a.seq
    workers = [copy.deepcopy(base) for _ in range(N)]
    ns = argparse.Namespace(lr=a.lr, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=a.weight_decay)
    opts = [tg.make_opt(w, ns) for w in workers]
    anchor = [p.detach().clone() for p in base.parameters()]
    prev = None
    out = open(a.metrics, "w")
    for s in range(a.steps):
        losses, updates = [], []
        for r, (w, o) in enumerate(zip(workers, opts)):
            with torch.no_grad():
                for p, q in zip(w.parameters(), anchor):
                    p.copy_(q)
            st = (s * N + r) * B * T
            win = toks[st: st + B * T + 1]
            w.zero_grad(set_to_none=True)
            _, loss = w(win[:-1].view(B, T), win[1:].view(B, T))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(w.parameters(), a.grad_clip if a.grad_clip > 0 else float("inf"))
            o.step()
            losses.append(loss.item())
            updates.append([q - p.detach() for p, q in zip(w.parameters(), anchor)])
        mean_u = [sum(u[i] for u in updates) / N for i in range(len(anchor))]
        if prev is not None:
            anchor = [q - u for q, u in zip(anchor, prev)]
        prev = mean_u
        out.write(json.dumps({"step": s + 1, "loss": sum(losses) / N}) + "\n")
    anchor = [q - u for q, u in zip(anchor, prev)]
    with torch.no_grad():
        for p, q in zip(base.parameters(), anchor):
            p.copy_(q)
    tg.save_safetensors(a.export, [(n, p.t() if conv else p) for n, p, conv in base.hf_items()])


def cmd_compare_st(a):
    import numpy as np
    x, y = read_st(a.a), read_st(a.b)
    if set(x) != set(y):
        print("tensor names differ:", sorted(set(x) ^ set(y)))
        return 1
    if not y:
        print("no tensors to compare")
        return 1
    shapes = [f"{k} {list(x[k].shape)} vs {list(y[k].shape)}" for k in sorted(y) if x[k].shape != y[k].shape]
    if shapes:
        print("tensor shapes differ:", "; ".join(shapes))
        return 1
    for path, t in ((a.a, x), (a.b, y)):
        bad = [k for k in sorted(t) if not np.isfinite(t[k]).all()]
        if bad:
            print(f"{path}: non-finite values (NaN or inf) in", ", ".join(bad))
            return 1
    worst = (0.0, sorted(y)[0])
    for k in sorted(y):
        if y[k].size == 0:
            continue
        d = float(np.max(np.abs(x[k].astype(np.float64) - y[k])))
        if a.rel:
            d /= max(float(np.max(np.abs(y[k]))), 1e-30)
        if d > worst[0]:
            worst = (d, k)
    print(f"max {'relative ' if a.rel else ''}difference {worst[0]:.3g} ({worst[1]}), tolerance {a.tol}")
    return 0 if worst[0] <= a.tol else 1


def read_losses(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if "loss" in r:
            out[r["step"]] = r["loss"]
    return out


def cmd_compare_losses(a):
    x, y = read_losses(a.a), read_losses(a.b)
    if sorted(x) != sorted(y) or not x:
        print("steps differ:", sorted(x), sorted(y))
        return 1
    bad = [s for s in sorted(x) if not (math.isfinite(x[s]) and math.isfinite(y[s]))]
    if bad:
        print("non-finite loss at steps", bad)
        return 1
    worst = max(abs(x[s] - y[s]) for s in x)
    for s in sorted(x):
        print(f"step {s}: {x[s]:.6f} {y[s]:.6f} diff {abs(x[s] - y[s]):.2e}")
    print(f"max loss difference {worst:.3g}, tolerance {a.tol}")
    return 0 if worst <= a.tol else 1


def cmd_compare_f32(a):
    import numpy as np
    x, y = np.fromfile(a.a, dtype=np.float32), np.fromfile(a.b, dtype=np.float32)
    if x.shape != y.shape or not x.size:
        print("sizes differ (or are 0)", x.shape, y.shape)
        return 1
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        print("non-finite values (NaN or inf)")
        return 1
    d = float(np.max(np.abs(x.astype(np.float64) - y)))
    print(f"max difference {d:.3g} over {x.size} values, tolerance {a.tol}")
    return 0 if d <= a.tol else 1


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd")
    p.add_argument("a", nargs="?")
    p.add_argument("b", nargs="?")
    p.add_argument("--init"); p.add_argument("--data"); p.add_argument("--out"); p.add_argument("--tokens")
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--batch", type=int, default=4); p.add_argument("--seq", type=int, default=32)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--tol", type=float, default=1e-4); p.add_argument("--rel", action="store_true")
    p.add_argument("--workers", type=int, default=2); p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-3); p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--metrics"); p.add_argument("--export")
    a = p.parse_args()
    f = {"grads": cmd_grads, "logits": cmd_logits, "compare-st": cmd_compare_st,
         "delayed-dp": cmd_delayed_dp,
         "compare-losses": cmd_compare_losses, "compare-f32": cmd_compare_f32}[a.cmd]
    sys.exit(f(a) or 0)


if __name__ == "__main__":
    main()
