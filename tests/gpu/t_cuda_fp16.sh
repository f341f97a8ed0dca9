#!/usr/bin/env bash
# t_cuda_fp16.sh — --dtype fp16 on the GPU (products on fp16 operands, fp32 accumulation, fp32
# master weights and moments) with dynamic loss scaling (optim/loss_scale.h), through the CLI:
#   1. a 10-step trajectory in fp16 against fp32 on the GPU: losses within 1e-2 of each other,
#      fp16 scaling dynamically by default (65536 throughout: no overflow, no growth);
#   2. a forced overflow (LOOM_FAULT_OVERFLOW=3) is skipped and halves the scale: the weights
#      after steps 1-3 equal those after steps 1-2, the metrics say so;
#   3. a real fp16 overflow: starting at --loss-scale-init 2^40 the scaled gradients pass
#      fp16's 65504 in the products, so the first steps are skipped and the scale halves until
#      they fit, then training goes on with finite losses; the same start in fp32 skips
#      nothing (the skips come from fp16's range);
#   4. fp16 and fp32 on the bundled corpus (data/fortunes, FORTUNES overrides; skipped when
#      absent): 300 steps each, validation losses within 1% of each other.
# Exit 77 (skip) when this loom has no usable GPU.
set -eu
. "$(dirname "$0")/../lib.sh"
LOOM=${LOOM:-build-cuda/loom}
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/d.bin" 300 30000 2
shape="--layers 3 --heads 4 --dim 64 --vocab 300 --block-size 64 --seed 5 --data $d/d.bin
       --progress off --batch 4 --seq 32 --lr 1e-3"
need_gpu $shape --device cuda:fp16

echo "== 1. 10 steps, fp16 vs fp32"
for dt in fp32 fp16; do
    $LOOM train $shape --steps 10 --device cuda:$dt --metrics "$d/t_$dt.jsonl"
done
$PY - "$d/t_fp32.jsonl" "$d/t_fp16.jsonl" <<'PY'
import json, sys
ra, rb = ([json.loads(l) for l in open(p) if '"loss"' in l] for p in sys.argv[1:])
a, b = [r["loss"] for r in ra], [r["loss"] for r in rb]
err = max(abs(x - y) / abs(x) for x, y in zip(a, b))
scales = sorted({r.get("loss_scale") for r in rb})
print(f"fp16 vs fp32 losses over 10 steps: max relative {err:.2g} (bound 1e-2); fp16's loss "
      f"scale {scales} (dynamic by default)")
sys.exit(0 if len(a) == len(b) == 10 and err <= 1e-2 and scales == [65536] else 1)
PY

echo "== 2. a forced overflow"
$LOOM train $shape --steps 2 --lr-schedule constant --device cuda:fp16 --export "$d/two.st"
LOOM_FAULT_OVERFLOW=3 $LOOM train $shape --steps 3 --lr-schedule constant --device cuda:fp16 \
    --metrics "$d/ov.jsonl" --export "$d/three.st" 2>"$d/err"
cat "$d/err"
grep -q "step 3: gradient overflow at loss scale 65536; update skipped, scale now 32768" "$d/err"
cmp "$d/two.st" "$d/three.st"
echo "step 3 skipped: weights as after step 2, scale 65536 -> 32768"

echo "== 3. a real fp16 overflow"
for dt in fp16 fp32; do
    $LOOM train $shape --steps 40 --device cuda:$dt --loss-scale dynamic \
        --loss-scale-init 1099511627776 --metrics "$d/big_$dt.jsonl" 2>"$d/err_$dt"
    grep "loss scale" "$d/err_$dt" | tail -1
done
$PY - "$d/big_fp16.jsonl" "$d/big_fp32.jsonl" <<'PY'
import json, math, sys
runs = [[json.loads(l) for l in open(p) if '"loss"' in l] for p in sys.argv[1:]]
h, f = runs
skips = h[-1]["overflow_skips"]
print(f"fp16 from 2^40: {skips} steps skipped, scale {h[-1]['loss_scale']:.0f} at the last "
      f"logged step, {len(h)} steps applied, last loss {h[-1]['loss']:.4f}; fp32: "
      f"{f[-1]['overflow_skips']} skipped")
ok = skips >= 1 and len(h) == 40 - skips and all(math.isfinite(r["loss"]) for r in h) \
    and h[-1]["loss_scale"] == 2.0 ** 40 / 2 ** skips and f[-1]["overflow_skips"] == 0
sys.exit(0 if ok else 1)
PY

echo "== 4. fp16 vs fp32 on the bundled corpus"
corpus_vs_fp32 fp16 "$d"
