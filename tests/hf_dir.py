#!/usr/bin/python3
"""hf_dir.py - Hugging Face Llama directories for loom's tests, written and read by code of its
own (NumPy; torch only for the BF16 rounding), not by loom's and not by the `safetensors` or
`transformers` packages.

A directory: config.json, then model.safetensors, or shards model-0000K-of-0000N.safetensors
with model.safetensors.index.json {"metadata": {...}, "weight_map": {tensor: shard}}. A
safetensors file: u64 little-endian header length, the JSON header {name: {dtype, shape,
data_offsets}}, the raw little-endian data.

Commands
  write W.safetensors DIR --heads H [--kv-heads KV] [--dtype f32|bf16|f16] [--shards N]
        [--tie] [--rope-theta X] [--norm-eps X] [--max-pos T]
        DIR from the tensors of W (a loom LLaMA export), BF16/F16 rounded by torch (to nearest
        even), the shards taking the tensors in order
  same A B        the tensors of directories A and B: same names, dtypes, shapes and bytes
  rounded F32DIR BF16DIR   every tensor of BF16DIR is torch's BF16 rounding of F32DIR's
"""
import json, os, struct, sys

import numpy as np

DT = {"F32": np.float32, "BF16": np.uint16, "F16": np.float16}


def read_file(path):
    """{name: (dtype, shape, raw bytes)} of one safetensors file"""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in hdr.items():
        if k != "__metadata__":
            a, b = v["data_offsets"]
            out[k] = (v["dtype"], tuple(v["shape"]), data[a:b])
    return out


def read_raw(d):
    """(config, {name: (dtype, shape, bytes)}) of a directory"""
    cfg = json.load(open(os.path.join(d, "config.json")))
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) \
        else ["model.safetensors"]
    raw = {}
    for f in files:
        raw.update(read_file(os.path.join(d, f)))
    return cfg, raw


def to_f32(dtype, shape, b):
    x = np.frombuffer(b, dtype=DT[dtype])
    if dtype == "BF16":
        x = (x.astype(np.uint32) << 16).view(np.float32)
    return x.astype(np.float32).reshape(shape)


def read_dir(d):
    """(config, {name: float32 array}) of a directory"""
    cfg, raw = read_raw(d)
    return cfg, {k: to_f32(*v) for k, v in raw.items()}


def encode(x, dtype):
    if dtype == "F32":
        return x.astype("<f4").tobytes()
    import torch
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    if dtype == "F16":
        return t.to(torch.float16).numpy().tobytes()
    return t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()


def write_st(path, items):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, dtype, shape, b in items:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def cmd_write(argv):
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("src"); p.add_argument("out")
    p.add_argument("--heads", type=int, required=True); p.add_argument("--kv-heads", type=int, default=0)
    p.add_argument("--dtype", choices=["f32", "bf16", "f16"], default="f32")
    p.add_argument("--shards", type=int, default=1); p.add_argument("--tie", action="store_true")
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--norm-eps", type=float, default=1e-5); p.add_argument("--max-pos", type=int, default=64)
    a = p.parse_args(argv)
    st = {k: to_f32(*v) for k, v in read_file(a.src).items()}
    V, C = st["model.embed_tokens.weight"].shape
    L = 1 + max(int(k.split(".")[2]) for k in st if k.startswith("model.layers."))
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": int(C),
           "intermediate_size": int(st["model.layers.0.mlp.gate_proj.weight"].shape[0]),
           "num_hidden_layers": L, "num_attention_heads": a.heads,
           "num_key_value_heads": a.kv_heads or a.heads, "vocab_size": int(V),
           "max_position_embeddings": a.max_pos, "rms_norm_eps": a.norm_eps,
           "rope_theta": a.rope_theta, "tie_word_embeddings": a.tie, "hidden_act": "silu",
           "torch_dtype": {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[a.dtype]}
    os.makedirs(a.out, exist_ok=True)
    json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
    dt = a.dtype.upper()
    items = [(k, dt, v.shape, encode(v, dt)) for k, v in st.items()]
    if a.shards == 1:
        write_st(os.path.join(a.out, "model.safetensors"), items)
        return 0
    per = -(-len(items) // a.shards)
    wm = {}
    for s in range(a.shards):
        name = f"model-{s + 1:05d}-of-{a.shards:05d}.safetensors"
        part = items[s * per:(s + 1) * per]
        write_st(os.path.join(a.out, name), part)
        wm.update({k: name for k, *_ in part})
    total = sum(len(b) for *_, b in items)
    json.dump({"metadata": {"total_size": total}, "weight_map": wm},
              open(os.path.join(a.out, "model.safetensors.index.json"), "w"), indent=2)
    return 0


def cmd_same(a, b):
    (_, x), (_, y) = read_raw(a), read_raw(b)
    if sorted(x) != sorted(y):
        print("tensor names differ:", sorted(set(x) ^ set(y)))
        return 1
    bad = [k for k in x if x[k] != y[k]]
    print(f"{len(x)} tensors, {len(bad)} differ{': ' + ', '.join(bad[:5]) if bad else ''}")
    return 1 if bad else 0


def cmd_rounded(f32dir, bdir):
    (_, x), (_, y) = read_dir(f32dir), read_raw(bdir)
    bad = [k for k in x if y[k][0] != "BF16" or encode(x[k], "BF16") != y[k][2]]
    print(f"{len(x)} tensors, {len(bad)} not torch's BF16 rounding{': ' + ', '.join(bad[:5]) if bad else ''}")
    return 1 if bad or sorted(x) != sorted(y) else 0


def main():
    cmd, rest = sys.argv[1], sys.argv[2:]
    if cmd == "write":
        return cmd_write(rest)
    return {"same": cmd_same, "rounded": cmd_rounded}[cmd](*rest)


if __name__ == "__main__":
    sys.exit(main())
