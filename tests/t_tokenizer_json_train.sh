#!/usr/bin/env bash
# t_tokenizer_json_train.sh — a Hugging Face tokenizer.json end to end: `loom prepare` with a
# small synthetic Llama-3-style file (Split with Llama-3's pattern + ByteLevel, ignore_merges,
# <|begin_of_text|> = 127999 and <|end_of_text|> = 128000 as added tokens) writes uint32
# shards (the vocabulary, 128,001 ids, passes 65,536) with <|end_of_text|> between the files,
# meta.json says hf-bpe; `loom train --vocab 128001` reads them and its checkpoint carries the
# tokenizer; `loom sample` encodes a prompt and decodes with it (from the checkpoint, and from
# --tokenizer FILE.json). Negative control: --vocab 128000 refuses the shards.
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
for i in $(seq 30); do echo "hello world, the cat sat on the mat $i times. It's FINE!"; done >"$d/a.txt"
for i in $(seq 30); do printf 'second file line %d\r\n' "$i"; done >"$d/b.txt"
mkdir "$d/tok"
$PY - "$d/tok/tokenizer.json" <<'PY'
import json, sys
bs = list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, k = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + k); k += 1
alpha = {b: chr(c) for b, c in zip(bs, cs)}
A = lambda s: "".join(alpha[b] for b in s.encode())
vocab = {alpha[b]: b for b in range(256)}
merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), (" ", "w"), ("o", "r"),
          (" w", "or"), ("l", "d"), (" wor", "ld"), (" ", "t"), (" t", "h"), (" th", "e")]
for a, b in merges: vocab.setdefault(A(a + b), len(vocab))
vocab[A(" cat")] = len(vocab)  # reached by ignore_merges only
pat = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
json.dump({"version": "1.0", "normalizer": None, "decoder": bl,
           "added_tokens": [{"id": 127999, "content": "<|begin_of_text|>", "special": True},
                            {"id": 128000, "content": "<|end_of_text|>", "special": True}],
           "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
               {"type": "Split", "pattern": {"Regex": pat}, "behavior": "Isolated", "invert": False}, bl]},
           "post_processor": {"type": "TemplateProcessing"},
           "model": {"type": "BPE", "dropout": None, "byte_fallback": False, "ignore_merges": True,
                     "vocab": vocab, "merges": [f"{A(a)} {A(b)}" for a, b in merges]}},
          open(sys.argv[1], "w"), ensure_ascii=False)
PY
$LOOM prepare --tokenizer "$d/tok" --out "$d/data" --val-fraction 0.1 "$d/a.txt" "$d/b.txt"
grep -q '"tokenizer":"hf-bpe","vocab":128001' "$d/data/meta.json" ||
    { echo "FAILED: meta.json: $(cat "$d/data/meta.json")"; exit 1; }
if ! cmp -s "$d/tok/tokenizer.json" "$d/data/tokenizer/tokenizer.json" ||
    [ "$(cat "$d/data/tokenizer/kind")" != hf-bpe ]; then echo "FAILED: DIR/tokenizer/"; exit 1; fi
$PY - "$d/data/train_000000.bin" <<'PY' || exit 1
import struct, sys
b = open(sys.argv[1], "rb").read()
magic, version, n = struct.unpack("<3i", b[:12])
assert (magic, version) == (20240801, 7), f"not a uint32 shard: {magic} {version}"
toks = struct.unpack(f"<{n}I", b[1024:1024 + 4 * n])
assert toks.count(128000) == 1, f"<|end_of_text|> {toks.count(128000)} times"
i = toks.index(128000)
assert max(toks[:i] + toks[i + 1:]) < 300, "ids past the model vocabulary"
print(f"ok: uint32 shard, {n} tokens, <|end_of_text|> (128000) between the files at {i}")
PY
F="--layers 1 --heads 2 --dim 16 --block-size 32 --batch 2 --seq 16 --steps 3 --lr 1e-3
   --progress off --threads 1"
$LOOM train --data "$d/data/train_000000.bin" --vocab 128001 $F --save "$d/ck" >"$d/train.log" 2>&1 ||
    { cat "$d/train.log"; echo "FAILED: loom train --vocab 128001"; exit 1; }
ck=$(ls -d "$d"/ck/step_* | tail -1)
[ "$(cat "$ck/tokenizer/kind")" = hf-bpe ] || { echo "FAILED: the checkpoint has no hf-bpe tokenizer"; ls -R "$d/ck"; exit 1; }
echo "ok: loom train --vocab 128001 read the uint32 shards; the checkpoint carries tokenizer.json"
for tok in "" "--tokenizer $d/tok/tokenizer.json"; do
    # shellcheck disable=SC2086
    out=$($LOOM sample --ckpt "$d/ck" $tok --prompt "hello world, the cat" --tokens 8 --threads 1 2>"$d/s.err") ||
        { cat "$d/s.err"; echo "FAILED: loom sample ${tok:-(the tokenizer of the checkpoint)}"; exit 1; }
    case $out in *"hello world, the cat"*) ;; *) echo "FAILED: sample printed: $out"; exit 1 ;; esac
done
echo "ok: loom sample encodes and decodes with the tokenizer.json (the checkpoint's and --tokenizer)"
expect_fail "out of range" $LOOM train --data "$d/data/train_000000.bin" --vocab 128000 $F
echo "negative control: --vocab 128000 refuses token 128000"
