#!/usr/bin/env bash
# long: started first (tests/run.sh)
# t_llama.sh — --arch llama against the PyTorch LLaMA reference (tests/torch_llama.py) on loom's
# own initial weights (exported with --steps 0), for kv-heads = heads, kv-heads < heads, tied:
#   * first-step gradients (grad accumulation 2): every tensor within 1e-5 relative
#     (max |Δ| / max |g_torch|), the first-step loss within 1e-5 relative;
#   * a 10-step AdamW trajectory (weight decay 0.1, clip 1.0, accumulation 2): losses within
#     1e-5 relative per step, the final weights within 2e-5 absolute;
#   * the same with Llama 3.1's RoPE frequency scaling (--rope-scaling llama3, an original
#     context of 64 so that the head's 8 frequencies fall in all three of its bands);
#   * negative controls: the reference with interleaved-pair RoPE, or with the scaling left
#     out, must NOT match the gradients;
#   * strategies equal the single process (losses within 1e-5): --recompute, --dp 2 with
#     --zero 0..3, --pp 2 (gpipe untied, 1f1b tied); --co2 (2 workers) and --pp 2
#     --schedule 2bw equal the reference's CO2 and delayed-update rules (losses within 1e-5,
#     weights within 1e-4, the tolerance of t_co2.sh and t_pipeline.sh at this learning rate);
#   * resume continues bit-identically; `loom sample` of the checkpoint gives the reference's
#     logits on `loom export`'s file (1e-5); refusals: bad LLaMA flags (--tp and --sp:
#     t_llama_tp.sh; --cp: t_llama_cp.sh; --offload: t_llama_offload.sh).
# asan: skip
set -eu
. "$(dirname "$0")/lib.sh"
need_torch
need_mpi
REF="$PY $(dirname "$0")/torch_llama.py"
CMP="$PY $(dirname "$0")/torch_ref.py"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/t.bin" 256 30000 1
base="--arch llama --layers 2 --heads 4 --dim 64 --vocab 256 --block-size 64 --seed 3 --progress off"
opt="--batch 4 --seq 32 --grad-accum 2 --lr 1e-3 --weight-decay 0.1 --grad-clip 1.0 --beta1 0.9
     --beta2 0.95 --eps 1e-8"

# check NAME KV TIE [FLAGS]: loom against the reference for one shape (FLAGS to both)
check() {
    local n=$1 kv=$2 tie=$3 x=${4:-}
    local M="$base --kv-heads $kv --tie-embeddings $tie $x" R="--heads 4 --kv-heads $kv $x"
    echo "== $n (kv-heads $kv, tie $tie)"
    $LOOM train $M --data "$d/t.bin" --seq 32 --steps 0 --export "$d/$n.w0.safetensors"
    $REF grads --init "$d/$n.w0.safetensors" --data "$d/t.bin" $R $opt --out "$d/$n.gr" > "$d/$n.gr.json"
    $LOOM train $M --data "$d/t.bin" $opt --steps 1 --dump-grads "$d/$n.gl" \
        --metrics "$d/$n.gl.jsonl"
    $CMP compare-st "$d/$n.gl" "$d/$n.gr" --rel --tol 1e-5
    $PY - "$d/$n.gr.json" "$d/$n.gl.jsonl" <<'PY'
import json, sys
ref = json.load(open(sys.argv[1]))["loss"]; got = json.loads(open(sys.argv[2]).readline())["loss"]
rel = abs(ref - got) / abs(ref)
print(f"first-step loss: torch {ref:.7f} loom {got:.7f} relative {rel:.2g}")
sys.exit(0 if rel <= 1e-5 else 1)
PY
    $LOOM train $M --data "$d/t.bin" $opt --steps 10 --lr-schedule constant \
        --metrics "$d/$n.l.jsonl" --export "$d/$n.l.safetensors"
    $REF train --init "$d/$n.w0.safetensors" --data "$d/t.bin" $R $opt --steps 10 \
        --metrics "$d/$n.r.jsonl" --export "$d/$n.r.safetensors" > /dev/null
    $REF compare-losses "$d/$n.l.jsonl" "$d/$n.r.jsonl" --tol 1e-5
    $CMP compare-st "$d/$n.l.safetensors" "$d/$n.r.safetensors" --tol 2e-5
}
check mha 4 off
check gqa 2 off
check tied 2 on
scale="--rope-scaling llama3 --rope-factor 8 --rope-low-freq-factor 1 --rope-high-freq-factor 4
       --rope-original-max-pos 64"
check scaled 2 off "$scale"

echo "== negative control: interleaved-pair RoPE in the reference must not match"
$REF grads --rope interleaved --init "$d/gqa.w0.safetensors" --data "$d/t.bin" --heads 4 --kv-heads 2 $opt \
    --out "$d/gqa.gri" > /dev/null
if $CMP compare-st "$d/gqa.gl" "$d/gqa.gri" --rel --tol 1e-5; then
    echo "FAILED: the interleaved convention matched loom's gradients"; exit 1
fi
echo "interleaved: differs, as it must"
$REF grads --init "$d/scaled.w0.safetensors" --data "$d/t.bin" --heads 4 --kv-heads 2 $opt \
    --out "$d/scaled.grn" > /dev/null
if $CMP compare-st "$d/scaled.gl" "$d/scaled.grn" --rel --tol 1e-5; then
    echo "FAILED: the reference without the rope scaling matched loom's scaled gradients"; exit 1
fi
echo "rope scaling left out: differs, as it must"

echo "== strategies against one process"
M="$base --kv-heads 2 --data $d/t.bin --steps 4 --lr 1e-3"
$LOOM train $M --batch 4 --seq 32 --grad-accum 2 --metrics "$d/one.jsonl"
$LOOM train $M --batch 4 --seq 32 --grad-accum 2 --recompute --metrics "$d/rc.jsonl"
same --tol 1e-5 recompute "$d/rc.jsonl" "$d/one.jsonl"
for z in 0 1 2 3; do
    $MPI -np 2 $LOOM train $M --batch 2 --seq 32 --grad-accum 2 --dp 2 --zero $z \
        --metrics "$d/dp$z.jsonl"
    same --tol 1e-5 "dp2-zero$z" "$d/dp$z.jsonl" "$d/one.jsonl"
done
$MPI -np 2 $LOOM train $M --batch 4 --seq 32 --grad-accum 2 --pp 2 --schedule gpipe \
    --metrics "$d/pp.jsonl"
same --tol 1e-5 pp2-gpipe "$d/pp.jsonl" "$d/one.jsonl"
$LOOM train $M --batch 4 --seq 32 --grad-accum 2 --tie-embeddings on --metrics "$d/tone.jsonl"
$MPI -np 2 $LOOM train $M --batch 4 --seq 32 --grad-accum 2 --tie-embeddings on --pp 2 \
    --metrics "$d/tpp.jsonl"
same --tol 1e-5 pp2-tied "$d/tpp.jsonl" "$d/tone.jsonl"

echo "== CO2 and 2bw against the reference's rules (torch_gpt.py's loops on the LLaMA model)"
W="$d/gqa.w0.safetensors"
c2="--batch 2 --seq 16 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5"
outer="--steps 11 --tau 3 --outer-lr 0.9 --outer-momentum 0.6 --gap-penalty 1.7 --outer-clip 0.004"
$REF co2 --init "$W" --heads 4 --kv-heads 2 --data "$d/t.bin" --workers 2 $c2 $outer \
    --metrics "$d/co2r.jsonl" --export "$d/co2r.safetensors" > /dev/null
$MPI -np 2 $LOOM train $base --kv-heads 2 --data "$d/t.bin" --dp 2 --co2 --gap-mode constant $c2 \
    $outer --lr-schedule constant --metrics "$d/co2l.jsonl" --export "$d/co2l.safetensors"
same --tol 1e-5 --wtol 1e-4 "co2 2 workers" "$d/co2l.jsonl" "$d/co2r.jsonl" "$d/co2l.safetensors" "$d/co2r.safetensors"
c3="--batch 2 --seq 16 --steps 7 --grad-accum 4 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5"
$REF train --init "$W" --heads 4 --kv-heads 2 --data "$d/t.bin" $c3 --mode 2bw \
    --metrics "$d/bwr.jsonl" --export "$d/bwr.safetensors" > /dev/null
$MPI -np 2 $LOOM train $base --kv-heads 2 --data "$d/t.bin" $c3 --lr-schedule constant --pp 2 \
    --schedule 2bw --metrics "$d/bwl.jsonl" --export "$d/bwl.safetensors"
same --tol 1e-5 --wtol 1e-4 "2bw pp 2" "$d/bwl.jsonl" "$d/bwr.jsonl" "$d/bwl.safetensors" "$d/bwr.safetensors"

echo "== resume"
R="$M --batch 4 --seq 32 --grad-accum 2 --steps 8 --warmup 2 --lr-schedule cosine --min-lr 1e-4
   --shuffle on"
$LOOM train $R --save "$d/ck" --save-every 4 --keep 0 --metrics "$d/ra.jsonl" --export "$d/ra.safetensors"
grep -q '"arch":[[:space:]]*"llama"' "$d/ck/step_00000004/checkpoint.json"
$LOOM train $R --resume "$d/ck/step_00000004" --metrics "$d/rb.jsonl" --export "$d/rb.safetensors"
same --part --steps 5-8 resume "$d/rb.jsonl" "$d/ra.jsonl" "$d/rb.safetensors" "$d/ra.safetensors"

# a pipeline's checkpoint (2bw: both weight versions; untied: the last stage holds no wte copy)
rm -rf "$d/pk"
P="$R --pp 2 --schedule 2bw"
$MPI -np 2 $LOOM train $P --save "$d/pk" --save-every 4 --keep 0 --metrics "$d/pa.jsonl" \
    --export "$d/pa.safetensors"
$MPI -np 2 $LOOM train $P --resume "$d/pk/step_00000004" --metrics "$d/pb.jsonl" --export "$d/pb.safetensors"
same --part --steps 5-8 "resume pp 2 2bw" "$d/pb.jsonl" "$d/pa.jsonl" "$d/pb.safetensors" "$d/pa.safetensors"

echo "== sample from the llama checkpoint: its logits equal the reference's on the export"
$LOOM export "$d/ck" -o "$d/ck.safetensors"
toks=5,17,99,0,42,42,7,63,11
$LOOM sample --ckpt "$d/ck" --prompt-tokens $toks --dump-logits "$d/l_loom.f32"
$REF logits --init "$d/ck.safetensors" --heads 4 --kv-heads 2 --tokens $toks --out "$d/l_ref.f32"
$CMP compare-f32 "$d/l_loom.f32" "$d/l_ref.f32" --tol 1e-5

echo "== a scaled-RoPE checkpoint keeps its scaling: sample's logits equal the reference's"
$LOOM train $M --batch 4 --seq 32 --steps 2 $scale --save "$d/sk" --keep 0
$LOOM export "$d/sk" -o "$d/sk.safetensors"
$PY - "$d/sk.safetensors" <<'PY' # the one-file export's metadata names the scaling too
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
rs = json.loads(json.loads(f.read(n))["__metadata__"]["rope_scaling"])
print("safetensors metadata rope_scaling:", rs)
sys.exit(0 if rs == {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
                     "high_freq_factor": 4, "original_max_position_embeddings": 64} else 1)
PY
$LOOM sample --ckpt "$d/sk" --prompt-tokens $toks --dump-logits "$d/sl_loom.f32"
$REF logits --init "$d/sk.safetensors" --heads 4 --kv-heads 2 $scale --tokens $toks \
    --out "$d/sl_ref.f32"
$CMP compare-f32 "$d/sl_loom.f32" "$d/sl_ref.f32" --tol 1e-5

echo "== the LLaMA flags from --config reach the checkpoint's model record"
printf '%s' '{"arch": "llama", "kv_heads": 2, "heads": 4, "dim": 64, "layers": 1, "ffn_dim": 128,
  "rope_theta": 500000, "norm_eps": 1e-6, "tie_embeddings": "on", "batch": 2, "seq": 8,
  "rope_scaling": "llama3", "rope_factor": 16, "rope_original_max_pos": 32}' > "$d/c.json"
$LOOM train --config "$d/c.json" --data "$d/t.bin" --steps 1 --progress off --save "$d/cc"
$PY - "$d/cc/step_00000001/checkpoint.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["model"]
want = {"arch": "llama", "kv_heads": 2, "ffn": 128, "rope_theta": 500000, "tie": 1,
        "rope_scaling": {"type": "llama3", "factor": 16, "low_freq_factor": 1,
                         "high_freq_factor": 4, "original_max_pos": 32}}
bad = {k: m.get(k) for k in want if m.get(k) != want[k]}
bad.update({} if abs(m["norm_eps"] - 1e-6) < 1e-12 else {"norm_eps": m["norm_eps"]})
print("config -> manifest:", "ok" if not bad else f"FAILED {bad}")
sys.exit(1 if bad else 0)
PY

echo "== refusals"
expect_fail "--kv-heads 3 must divide --heads 4" $LOOM train $M --batch 4 --seq 32 --kv-heads 3
expect_fail "must be even (RoPE" $LOOM train $M --batch 4 --seq 32 --dim 72 --heads 8 --kv-heads 8
expect_fail "--rope-theta is a LLaMA option" $LOOM train --data "$d/t.bin" --rope-theta 500000
expect_fail "--rope-scaling is a LLaMA option" $LOOM train --data "$d/t.bin" --rope-scaling llama3
expect_fail "--rope-factor belongs to --rope-scaling llama3" $LOOM train $M --batch 4 --seq 32 \
    --rope-factor 4
expect_fail "need 0 < low < high" $LOOM train $M --batch 4 --seq 32 --rope-scaling llama3 \
    --rope-low-freq-factor 4 --rope-high-freq-factor 2
