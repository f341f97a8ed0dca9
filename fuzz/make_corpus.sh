#!/usr/bin/env bash
# make_corpus.sh — regenerates the seed corpora in fuzz/corpus/<name>/: small valid files
# written by loom itself (a 1-layer model trained for 3 steps: its safetensors and llm.c
# exports, metrics log and checkpoint manifest) plus hand-made valid files and edge cases
# (written by the Python below; among them a valid swarm message of every type, wire/). Needs
# ./loom (make) and python3. Deterministic except for the trained weights' timing columns.
set -eu
cd "$(dirname "$0")/.."
LOOM=${LOOM:-./loom}
PY=${PY:-python3}
. tests/lib.sh
c=fuzz/corpus
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
rm -rf "$c"
mkdir -p "$c"/{safetensors,llmc,shard,bpe,tokjson,config,metrics,state,manifest,wire,hfconfig}
mkshard "$tmp/ok.bin" 16 400 1
$LOOM train --layers 1 --heads 2 --dim 4 --vocab 16 --block-size 4 --batch 1 --seq 4 --steps 3 \
    --data "$tmp/ok.bin" --val-data "$tmp/ok.bin" --val-every 2 --val-windows 1 --progress off \
    --metrics "$c/metrics/loom.jsonl" --save "$tmp/ck" --export "$c/safetensors/loom.safetensors" \
    >/dev/null 2>&1
$LOOM export "$tmp/ck" -o "$c/llmc/loom.bin" >/dev/null 2>&1
cp "$tmp"/ck/step_*/checkpoint.json "$c/manifest/loom.json"
$PY - "$c" <<'PY'
import json, struct, sys, zlib
c = sys.argv[1]
def w(path, data):
    with open(f"{c}/{path}", "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)

# safetensors: F16 with a prefix and no n_head; a header-only file; a bad offsets entry
def st(tensors, meta=None, dtype="F16", prefix="transformer."):
    hdr, data = {}, b""
    for name, shape in tensors:
        n = 1
        for d in shape: n *= d
        size = n * (2 if dtype in ("F16", "BF16") else 4)
        hdr[prefix + name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + size]}
        data += bytes((i * 37) % 251 for i in range(size))
    if meta: hdr["__metadata__"] = meta
    h = json.dumps(hdr).encode()
    return struct.pack("<Q", len(h)) + h + data
C, V, T = 4, 8, 4
layer = [("ln_1.weight", [C]), ("ln_1.bias", [C]), ("attn.c_attn.weight", [C, 3 * C]),
         ("attn.c_attn.bias", [3 * C]), ("attn.c_proj.weight", [C, C]), ("attn.c_proj.bias", [C]),
         ("ln_2.weight", [C]), ("ln_2.bias", [C]), ("mlp.c_fc.weight", [C, 4 * C]),
         ("mlp.c_fc.bias", [4 * C]), ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])]
ts = [("wte.weight", [V, C]), ("wpe.weight", [T, C])] + [("h.0." + n, s) for n, s in layer] + \
     [("ln_f.weight", [C]), ("ln_f.bias", [C])]
w("safetensors/f16_prefix.safetensors", st(ts))
w("safetensors/bf16_meta.safetensors", st(ts, {"n_head": "2", "n_layer": "1"}, "BF16", ""))
w("safetensors/header_only.safetensors", struct.pack("<Q", 2) + b"{}")
w("safetensors/overlap.safetensors", st([("wte.weight", [2, 2]), ("wpe.weight", [2, 2])])[:-3])

# llm.c: bf16 (version 5) with a padded vocabulary; a header alone
def llmc(version, maxT, V, L, NH, C, Vp):
    h = struct.pack("<8i", 20240326, version, maxT, V, L, NH, C, Vp) + b"\0" * (1024 - 32)
    n = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
    return h + bytes(i % 7 for i in range(n * (4 if version == 3 else 2)))
w("llmc/bf16_padded.bin", llmc(5, 4, 6, 1, 2, 4, 8))
w("llmc/header_only.bin", llmc(3, 4, 6, 1, 2, 4, 8)[:1024])

# shards: the first byte picks the vocabulary (2 + 257·byte; 255: 128256), then the file
def shard(toks, count=None, wide=False):
    magic, version = (20240801, 7) if wide else (20240520, 1)
    h = struct.pack("<3i", magic, version, len(toks) if count is None else count) + b"\0" * (1024 - 12)
    return h + struct.pack(f"<{len(toks)}{'I' if wide else 'H'}", *toks)
w("shard/ok", b"\x01" + shard([(i * 7) % 200 for i in range(64)]))
w("shard/empty", b"\x00" + shard([]))
w("shard/count_mismatch", b"\x00" + shard([1, 2, 3], 5))
w("shard/out_of_vocab", b"\x00" + shard([0, 1, 9]))
w("shard/u32", b"\xff" + shard([0, 70000, 128255, 5, 65536, 1, 100000, 2, 3, 4, 5, 6], wide=True))

# BPE: encoder.json (the 256 byte tokens in GPT-2's alphabet, some merges, <|endoftext|>),
# a NUL byte, vocab.bpe
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, k = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + k); k += 1
alpha = {b: chr(ch) for b, ch in zip(bs, cs)}
enc = {alpha[b]: i for i, b in enumerate(range(256))}
merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("\u0120", "w"), ("o", "r"),
          ("\u0120w", "or"), ("l", "d"), ("\u0120wor", "ld"), ("i", "t"), ("'", "s")]
for a, b in merges:
    enc.setdefault(a + b, len(enc))
enc["<|endoftext|>"] = len(enc)
mtext = "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges)
w("bpe/small", json.dumps(enc) + "\0" + mtext)
w("bpe/crlf", json.dumps(enc) + "\0" + mtext.replace("\n", "\r\n"))
w("bpe/no_merges", json.dumps({alpha[b]: b for b in range(256)}))

# config files
w("config/good.json", '{"layers": 2, "steps": 10, "lr": 3e-4, "beta1": 0.9, "lr_schedule": "constant", "data": "x.bin", "shuffle": true, "recompute": true}')
w("config/strings.json", '{"shuffle": "off", "lr-schedule": "cosine", "steps": -3, "beta1": 1e308}')
w("config/bad.json", '{"layers": 2.5, "steps": "ten"}')

# Hugging Face Llama config.json (fuzz_hfconfig): loom's own, the required fields only, and one
# with every refused or malformed field
hf = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
      "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 64,
      "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": None,
      "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False,
      "mlp_bias": False, "torch_dtype": "float32"}
w("hfconfig/loom.json", json.dumps(hf, indent=1))
w("hfconfig/minimal.json", json.dumps({k: hf[k] for k in (
    "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "vocab_size", "max_position_embeddings")}))
w("hfconfig/bad.json", json.dumps(dict(hf, head_dim=32, rope_scaling={"rope_type": "llama3", "factor": 8.0},
                                       num_key_value_heads=3, rms_norm_eps=-1, tie_word_embeddings="yes")))

# metrics: hand-written rows with non-finite values, a resume, validation rows, a failed save
w("metrics/edge.jsonl", '{"step": 1, "loss": 3.5, "lr": 1e-4, "grad_norm": nan, "step_ms": 10, "tokens_per_s": 800}\n'
  '{"step": 2, "loss": inf, "tokens": 16}\n{"step": 1, "loss": -Infinity, "val_loss": "nan"}\n'
  '\n  {"step": 3, "val_loss": 2.0, "tokens": 24}\r\n{"other": 1}\n')
w("metrics/save_failed.jsonl", '{"step": 1, "loss": 3.5, "tokens": 8}\n{"step": 2, "loss": 3.25, "tokens": 16}\n'
  '{"step": 2, "save_failed": "ck/step_00000002.partial/shard_00000.bin: write failed: No space left on device \\"q\\" \\u00ff"}\n'
  '{"step": 3, "loss": 3.0, "tokens": 24}\n')

# CO2 state files: the first byte is the harness's selector (bit 0: fix the CRC; bits 1-2:
# expected lengths {3,5,0}/{0,0,0}/{1,1,1}/{16,0,2}; bits 3-4: one more array each; bit 5:
# rank; bit 6: kind "co2-sharded"), then the file: magic, kind, rank, nranks, narrays, crc,
# the lengths as u64, the float32 arrays
def state(kind, rank, nranks, arrays):
    body = struct.pack(f"<{len(arrays)}Q", *[len(a) for a in arrays])
    for a in arrays: body += struct.pack(f"<{len(a)}f", *a)
    hdr = b"LOOMST1\0" + kind.encode().ljust(16, b"\0") + struct.pack("<3i", rank, nranks, len(arrays))
    return hdr + struct.pack("<I", zlib.crc32(body)) + body
w("state/ok", b"\x08" + state("co2", 0, 2, [[1, 2, 3], [4, 5, 6, 7, 8]]))
w("state/sharded_rank1", b"\x60" + state("co2-sharded", 1, 2, [[0.5, 0.25, 0.125]]))
w("state/lens_differ", b"\x09" + state("co2", 0, 2, [[1, 2], [3, 4, 5, 6, 7, 8]]))
w("state/bad_crc", b"\x08" + state("co2", 0, 2, [[1, 2, 3], [4, 5, 6, 7, 8]])[:-1] + b"\x01")
# swarm messages (src/swarm/wire.c has the layout): one valid message of each type, some at
# their edges (a gone DATA, an empty GOSSIP, the largest counts of ids and losses, sparse codes)
def hdr(t, rnd=3, frm=b"peer-1"):
    return b"LMSW" + struct.pack("<HHqB", 3, t, rnd, len(frm)) + frm
def rec(i, first=0):
    pid, addr = b"node-%d" % i, b"10.0.0.%d:%d" % (i, 5555 + i)
    return (struct.pack("<B", len(pid)) + pid + struct.pack("<H", len(addr)) + addr +
            struct.pack("<QqqI", 7 + i, first, 9, i % 4))
def recs(n): return struct.pack("<H", n) + b"".join(rec(i, i) for i in range(n))
def text(t): return struct.pack("<I", len(t)) + t
def ids(names): return struct.pack("<H", len(names)) + b"".join(bytes([len(n)]) + n for n in names)
def floats(n): return struct.pack(f"<{n}f", *[(i * 0.37) - 1 for i in range(n)])
nan = struct.pack("<If", 0x7fc01234, -0.0)
w("wire/hello", hdr(1, 0) + recs(1) + text(b"seq 64 dim 32 layers 2 lr 3e-4"))
w("wire/welcome", hdr(2) + recs(3))
w("wire/refuse", hdr(3) + text(b"seq: 1024 here, 512 there"))
w("wire/gossip", hdr(4) + recs(2))
w("wire/gossip_empty", hdr(4, 0, b"a") + recs(0))
w("wire/delta", hdr(5) + struct.pack("<QQII", 4, 16, 6, 2) + floats(4) + nan +
  struct.pack("<2d", 3.25, float("nan")))
w("wire/delta_losses", hdr(5) + struct.pack("<QQII", 0, 1, 1, 256) + floats(1) +
  struct.pack("<256d", *[2.5 + i / 256 for i in range(256)]))
w("wire/have", hdr(6) + struct.pack("<Q", 0x0123456789abcdef) + ids([b"a", b"b.2", b"c_3"]))
w("wire/have_many", hdr(6) + struct.pack("<Q", 1) + ids([b"p%03d" % i for i in range(256)]))
w("wire/commit", hdr(7) + struct.pack("<IQ", 2, 99) + ids([b"node-0", b"node-1"]) +
  struct.pack("<H", 0))
w("wire/commit_cut", hdr(7) + struct.pack("<IQ", 4, 99) + ids([b"a", b"b", b"c"]) +
  struct.pack("<HII", 2, 5, 17))
w("wire/fetch", hdr(8) + struct.pack("<IQQI", 1, 0, 1 << 20, 1 << 18))
w("wire/data", hdr(9) + struct.pack("<IQQIQ", 2, 8, 12, 4, 5) + floats(4))
w("wire/data_gone", hdr(9) + struct.pack("<IQQIQ", 3, 0, 0, 0, 0))
w("wire/bye", hdr(10, 12))
# sparse indices as LEB128 gaps: 1, 4, 9 are gaps 1, 2, 4; 0, 201, 202 are 0, (200: c8 01), 0
gaps = struct.pack("<I", 3) + bytes([1, 2, 4])
w("wire/delta8", hdr(11) + struct.pack("<QQII", 4096, 8200, 4100, 2) + floats(2) +
  struct.pack("<I", 4100) + bytes((i * 37) % 256 for i in range(4100)) +
  struct.pack("<2d", 3.25, 2.0))
w("wire/delta8_sparse", hdr(11) + struct.pack("<QQII", 0, 300, 300, 0) + floats(1) +
  struct.pack("<II", 3, 4) + bytes([0, 0xc8, 0x01, 0]) + bytes([1, 0x81, 127]))
w("wire/deltas", hdr(12) + struct.pack("<QQIII", 0, 20, 10, 1, 3) + gaps +
  floats(3) + struct.pack("<d", 2.5))
w("wire/sum", hdr(13) + struct.pack("<IQQII", 2, 4096, 8200, 5, 1) + floats(5) +
  struct.pack("<d", 3.5))
w("wire/sums", hdr(14) + struct.pack("<IQQIII", 2, 0, 20, 10, 1, 3) + gaps +
  floats(3) + struct.pack("<d", 2.5))
w("wire/hold", hdr(15) + struct.pack("<IQ", 1, 7) + ids([b"node-0"]))
w("wire/sum8", hdr(16) + struct.pack("<IQQII", 2, 4096, 8200, 4100, 2) + floats(2) +
  struct.pack("<I", 4100) + bytes((i * 37) % 256 for i in range(4100)) +
  struct.pack("<2d", 3.25, 2.0))
w("wire/deltas2", hdr(17) + struct.pack("<QQII", 0, 4200, 4100, 1) + floats(4) +
  struct.pack("<I", 3) + gaps + bytes([0x39]) + struct.pack("<d", 2.0))
w("wire/sum8_sparse", hdr(16) + struct.pack("<IQQII", 2, 4096, 8200, 4100, 1) + floats(2) +
  struct.pack("<II", 2, 3) + bytes([0x80, 0x20, 2]) + bytes([0xff, 3]) + struct.pack("<d", 1.0))
PY
# Hugging Face tokenizer.json (fuzz_tokjson): the 256 byte tokens in GPT-2's alphabet and a few
# merges; GPT-2's ByteLevel with "a b" merges, Llama-3's Split with ["a", "b"] merges, added
# tokens past the vocabulary, ignore_merges; a refused byte_fallback file
$PY - "$c/tokjson" <<'PY'
import json, sys
c = sys.argv[1]
bs = list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, k = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + k); k += 1
alpha = {b: chr(ch) for b, ch in zip(bs, cs)}
A = lambda s: "".join(alpha[b] for b in s.encode())
vocab = {alpha[b]: b for b in range(256)}
merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), (" ", "w"), ("'", "S"), ("1", "2")]
for a, b in merges: vocab[A(a + b)] = len(vocab)
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
def w(name, t): open(f"{c}/{name}", "w").write(json.dumps(t, ensure_ascii=False))
w("gpt2.json", {"added_tokens": [{"id": len(vocab), "content": "<|endoftext|>"}], "normalizer": None,
                "pre_tokenizer": bl, "decoder": bl,
                "model": {"type": "BPE", "vocab": vocab, "merges": [f"{A(a)} {A(b)}" for a, b in merges]}})
pat = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
w("llama3.json", {"added_tokens": [{"id": 70000, "content": "<|end_of_text|>"}, {"id": 300, "content": "</s>"}],
                  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                      {"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False},
                      dict(bl, use_regex=False)]},
                  "model": {"type": "BPE", "ignore_merges": True, "vocab": dict(vocab, **{A(" cat"): 299}),
                            "merges": [[A(a), A(b)] for a, b in merges]}})
w("byte_fallback.json", {"pre_tokenizer": bl, "model": {"type": "BPE", "byte_fallback": True,
                                                        "vocab": {"a": 0}, "merges": []}})
PY
du -sh "$c"
