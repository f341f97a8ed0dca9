#!/usr/bin/env bash
# t_llama_hf.sh — Hugging Face Llama directories (config.json + model.safetensors, or shards
# with model.safetensors.index.json) in and out of loom, for kv-heads = heads, kv-heads < heads
# and tied embeddings:
#   * round trip: loom's export directory read back (`loom export DIR -o DIR2`, and `train --init
#     DIR --steps 0 --export DIR3`) gives byte-identical config.json and model.safetensors;
#   * Llama 3.1's rope_scaling (--rope-scaling llama3) is written to config.json, survives the
#     round trip byte for byte, and the reference reading it gives loom's first-step loss and
#     gradients (negative control: the directory with rope_type "default" must not);
#   * BF16 export (`loom export --dtype bf16`, `train --export-dtype bf16`) is torch's
#     round-to-nearest-even of the F32 tensors, bit for bit;
#   * directories written by the reference side's own code (tests/hf_dir.py): BF16 in 3 shards
#     with an index, F16, F32 one file; loom's first-step loss from each equals
#     tests/torch_llama.py's on the same directory within 1e-5 relative;
#   * refusals, each exit 1..125 naming the file and the field, tensor or shard: head_dim,
#     attention_bias, mlp_bias, hidden_act, a rope_scaling type other than llama3 or a llama3
#     one missing a field, model_type, a missing field, no
#     config.json, a missing shard, a tensor missing from the index / the file, a wrong shape;
#   * `loom sample --ckpt DIR` reads a directory; GPT-2 files and .safetensors exports unchanged;
#   * --pp 2 and --dp 2 --zero 3 (each rank streams its range) equal one process from a sharded
#     BF16 directory (1e-5); exporting over a sharded directory removes its stale index;
#   * with transformers importable: LlamaForCausalLM.from_pretrained on loom's directory gives
#     the reference's logits (skipped, saying so, without it).
# asan: skip
set -eu
. "$(dirname "$0")/lib.sh"
need_torch
REF="$PY $(dirname "$0")/torch_llama.py"
HF="$PY $(dirname "$0")/hf_dir.py"
CMP="$PY $(dirname "$0")/torch_ref.py"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/t.bin" 256 30000 1
base="--arch llama --layers 2 --heads 4 --dim 64 --vocab 256 --block-size 64 --seed 3"
run="--progress off --peak-gflops 100 --data $d/t.bin"
opt="--batch 4 --seq 32 --grad-accum 2 --lr 1e-3 --weight-decay 0.1 --grad-clip 1.0"

# loss_match DIR NAME: loom's first-step loss from DIR equals the reference's within 1e-5
loss_match() {
    $REF grads --init "$1" --data "$d/t.bin" $opt --out "$d/$2.gr" > "$d/$2.gr.json"
    $LOOM train --init "$1" $run $opt --steps 1 --metrics "$d/$2.jsonl" 2> /dev/null
    $PY - "$d/$2.gr.json" "$d/$2.jsonl" "$2" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))["loss"]; got = json.loads(open(sys.argv[2]).readline())["loss"]
rel = abs(ref - got) / abs(ref)
print(f"{sys.argv[3]}: first-step loss torch {ref:.7f} loom {got:.7f} relative {rel:.2g}")
sys.exit(0 if rel <= 1e-5 else 1)
PY
}

for spec in "mha 4 off" "gqa 2 off" "tied 2 on"; do
    set -- $spec
    n=$1 kv=$2 tie=$3
    echo "== $n (kv-heads $kv, tie $tie)"
    $LOOM train $base --kv-heads $kv --tie-embeddings $tie $run --seq 32 --steps 0 \
        --export "$d/$n.d0" 2> /dev/null
    $LOOM export "$d/$n.d0" -o "$d/$n.d1" 2> /dev/null
    $LOOM train --init "$d/$n.d0" $run --seq 32 --steps 0 --export "$d/$n.d2" 2> /dev/null
    for k in 1 2; do
        cmp "$d/$n.d0/model.safetensors" "$d/$n.d$k/model.safetensors"
        cmp "$d/$n.d0/config.json" "$d/$n.d$k/config.json"
        $HF same "$d/$n.d0" "$d/$n.d$k"
    done
    echo "round trip: identical bytes"
    $HF write "$d/$n.d0/model.safetensors" "$d/$n.rb" --heads 4 --kv-heads $kv --dtype bf16 \
        --shards 3 $([ $tie = on ] && echo --tie)
    loss_match "$d/$n.rb" "$n-bf16-3-shards"
done

echo "== Llama 3.1 rope_scaling: written on export, kept by the round trip, read by the reference"
sc="--rope-scaling llama3 --rope-factor 8 --rope-low-freq-factor 1 --rope-high-freq-factor 4
    --rope-original-max-pos 64"
$LOOM train $base --kv-heads 2 $sc $run --seq 32 --steps 0 --export "$d/sc.d0" 2> /dev/null
$LOOM export "$d/sc.d0" -o "$d/sc.d1" 2> /dev/null
$LOOM train --init "$d/sc.d0" $run --seq 32 --steps 0 --export "$d/sc.d2" 2> /dev/null
for k in 1 2; do
    cmp "$d/sc.d0/config.json" "$d/sc.d$k/config.json"
    cmp "$d/sc.d0/model.safetensors" "$d/sc.d$k/model.safetensors"
done
$PY - "$d/sc.d0/config.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["rope_scaling"]
want = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}
print("config.json rope_scaling:", r)
sys.exit(0 if r == want else 1)
PY
loss_match "$d/sc.d0" "llama3-rope-scaling" # and its gradients (the loss barely sees RoPE at init)
$LOOM train --init "$d/sc.d0" $run $opt --steps 1 --dump-grads "$d/sc.gl" 2> /dev/null
$CMP compare-st "$d/sc.gl" "$d/llama3-rope-scaling.gr" --rel --tol 1e-5
cp -r "$d/sc.d0" "$d/sc.none" # negative control: the same directory read without its scaling
$PY - "$d/sc.none/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["rope_scaling"]["rope_type"] = "default"
json.dump(c, open(sys.argv[1], "w"))
PY
$REF grads --init "$d/sc.none" --data "$d/t.bin" $opt --out "$d/sc.none.gr" > /dev/null
if $CMP compare-st "$d/sc.gl" "$d/sc.none.gr" --rel --tol 1e-5; then
    echo "FAILED: rope_scaling ignored and still equal"; exit 1
fi

$LOOM sample --ckpt "$d/gqa.d0" --prompt ab --tokens 4 --seed 1 > /dev/null 2>&1 # reads DIR too
echo "== BF16 export: torch's rounding, the same from export and train"
$LOOM train $base --kv-heads 2 $run $opt --steps 2 --export "$d/tr.f" 2> /dev/null
$LOOM export "$d/tr.f" -o "$d/tr.b" --dtype bf16 2> /dev/null
$HF rounded "$d/tr.f" "$d/tr.b"
$LOOM train $base --kv-heads 2 $run $opt --steps 2 --export "$d/tr.b2" --export-dtype bf16 \
    2> /dev/null
cmp "$d/tr.b/model.safetensors" "$d/tr.b2/model.safetensors"
grep -q '"torch_dtype":.*"bfloat16"' "$d/tr.b/config.json"
loss_match "$d/tr.b" "loom-bf16"
$HF write "$d/gqa.d0/model.safetensors" "$d/f16" --heads 4 --kv-heads 2 --dtype f16
loss_match "$d/f16" "f16"
$HF write "$d/gqa.d0/model.safetensors" "$d/f32" --heads 4 --kv-heads 2 --norm-eps 1e-6 \
    --rope-theta 500000
loss_match "$d/f32" "f32-theta5e5-eps1e-6"
cp -r "$d/f32" "$d/min" # only the required fields: the defaults (eps 1e-6, theta 10000, KV = H)
$PY - "$d/min/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
keep = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "vocab_size", "max_position_embeddings")
json.dump({k: c[k] for k in keep}, open(sys.argv[1], "w"))
PY
$HF write "$d/mha.d0/model.safetensors" "$d/min2" --heads 4 --norm-eps 1e-6
cp "$d/min/config.json" "$d/min2/config.json"
loss_match "$d/min2" "required-fields-only"
$LOOM train --arch llama --init "$d/f32" $run --seq 32 --steps 0 --export "$d/f32.x.safetensors" \
    2> /dev/null # a path ending in .safetensors: one file, as before
[ -f "$d/f32.x.safetensors" ]

echo "== ranks stream their parts of a sharded BF16 directory; export over a sharded one"
need_mpi
M="--init $d/gqa.rb $run --steps 3 --lr 1e-3 --seq 32 --grad-accum 2"
$LOOM train $M --batch 4 --metrics "$d/one.jsonl" 2> /dev/null
$MPI -np 2 $LOOM train $M --batch 4 --pp 2 --metrics "$d/pp.jsonl" 2> /dev/null
same --tol 1e-5 pp2-from-dir "$d/pp.jsonl" "$d/one.jsonl"
$MPI -np 2 $LOOM train $M --batch 2 --dp 2 --zero 3 --metrics "$d/z3.jsonl" 2> /dev/null
same --tol 1e-5 dp2-zero3-from-dir "$d/z3.jsonl" "$d/one.jsonl"
cp -r "$d/gqa.rb" "$d/over"
$LOOM export "$d/gqa.d0" -o "$d/over" 2> /dev/null # its stale index must not be read back
[ ! -e "$d/over/model.safetensors.index.json" ]
$LOOM export "$d/over" -o "$d/over2" 2> /dev/null
cmp "$d/gqa.d0/model.safetensors" "$d/over2/model.safetensors"

echo "== refusals"
# bad NAME PY_EDIT: a copy of the F32 directory with config.json edited (c: the dict)
bad() {
    rm -rf "$d/$1"
    cp -r "$d/f32" "$d/$1"
    $PY - "$d/$1/config.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(c, open(sys.argv[1], "w"))
PY
}
T="$LOOM train $run --seq 32 --steps 1 --init"
bad hd 'c["head_dim"] = 32'
expect_fail "hd/config.json: \"head_dim\" 32" $T "$d/hd"
bad ab 'c["attention_bias"] = True'
expect_fail "ab/config.json: \"attention_bias\" true" $T "$d/ab"
bad mb 'c["mlp_bias"] = True'
expect_fail "mb/config.json: \"mlp_bias\" true" $T "$d/mb"
bad act 'c["hidden_act"] = "gelu"'
expect_fail "act/config.json: \"hidden_act\"" $T "$d/act"
bad rs 'c["rope_scaling"] = {"rope_type": "yarn", "factor": 8.0}'
expect_fail "rs/config.json: \"rope_scaling\" type \"yarn\" is not supported" $T "$d/rs"
bad rs3 'c["rope_scaling"] = {"type": "llama3", "factor": 8.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64}'
expect_fail "rs3/config.json: \"rope_scaling\".\"low_freq_factor\" is missing" $T "$d/rs3"
bad rs4 'c["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
    "high_freq_factor": 1.0, "original_max_position_embeddings": 64}'
expect_fail "rs4/config.json: \"rope_scaling\" needs \"factor\" >= 1 and \"high_freq_factor\"" \
    $T "$d/rs4"
bad mt 'c["model_type"] = "mistral"'
expect_fail "mt/config.json: \"model_type\" \"mistral\"" $T "$d/mt"
bad nohs 'del c["hidden_size"]'
expect_fail "nohs/config.json: required field \"hidden_size\"" $T "$d/nohs"
bad ffn 'c["intermediate_size"] = 128'
expect_fail "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [192, 64], expected [128, 64]" \
    $T "$d/ffn"
rm -rf "$d/untie" && cp -r "$d/tied.d0" "$d/untie"
$PY - "$d/untie/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["tie_word_embeddings"] = False; json.dump(c, open(sys.argv[1], "w"))
PY
expect_fail "untie/model.safetensors: missing tensor 'lm_head.weight'" $T "$d/untie"
rm "$d/nohs/config.json"
expect_fail "nohs/config.json: cannot read" $T "$d/nohs"
cp -r "$d/gqa.rb" "$d/noshard"
rm "$d/noshard/model-00002-of-00003.safetensors"
expect_fail "noshard/model-00002-of-00003.safetensors: shard named by" $T "$d/noshard"
cp -r "$d/gqa.rb" "$d/nomap"
$PY - "$d/nomap/model.safetensors.index.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); del c["weight_map"]["model.layers.1.mlp.down_proj.weight"]
json.dump(c, open(sys.argv[1], "w"))
PY
expect_fail "index.json: missing tensor 'model.layers.1.mlp.down_proj.weight'" $T "$d/nomap"
$LOOM train --layers 1 --heads 2 --dim 32 --vocab 256 --block-size 64 $run --seq 32 --steps 0 \
    --export "$d/g2.safetensors" 2> /dev/null
expect_fail "--arch llama: $d/g2.safetensors holds a GPT-2 model" $T "$d/g2.safetensors" --arch llama
expect_fail "--export-dtype bf16: only a LLaMA" $T "$d/g2.safetensors" --export "$d/g2b.safetensors" \
    --export-dtype bf16

echo "== transformers"
if $PY -c "import transformers" 2> /dev/null; then
    $REF logits --init "$d/gqa.d0" --tokens 1,2,3,250,7,9 --out "$d/ref.f32"
    $PY - "$d/gqa.d0" "$d/ref.f32" <<'PY'
import sys, numpy as np, torch, transformers
m = transformers.LlamaForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32).eval()
got = m(torch.tensor([[1, 2, 3, 250, 7, 9]])).logits[0].detach().numpy()
ref = np.fromfile(sys.argv[2], dtype=np.float32).reshape(got.shape)
err = float(np.abs(got - ref).max() / np.abs(ref).max())
print(f"transformers logits vs reference: max relative {err:.2g}")
sys.exit(0 if err <= 1e-5 else 1)
PY
else
    echo "transformers not importable: from_pretrained comparison skipped"
fi
echo "t_llama_hf: ok"
