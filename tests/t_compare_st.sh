#!/usr/bin/env bash
# t_compare_st.sh — the comparison commands the other tests trust (tests/torch_ref.py) must fail
# when they should: compare-st on a file with a NaN or an infinity (in either file, or the same
# NaN in both), on tensors whose shapes differ but broadcast (a bias [N] vs [1, N] with the same
# values), on a difference above the tolerance; compare-losses on a NaN loss; compare-f32 on a
# NaN. Each failure must be exit 1 with the reason in the message (not a crash). Positive
# controls: a file against itself (tolerance 0) and a difference below the tolerance pass.
set -eu
. "$(dirname "$0")/lib.sh"
need_torch
PEER=$(dirname "$0")/torch_gpt.py
REF="$PY $(dirname "$0")/torch_ref.py"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
$PY "$PEER" gen --layers 1 --heads 2 --dim 16 --vocab 32 --block-size 8 --seed 1 --out "$d/w.safetensors"

# edit IN OUT NAME EXPR: OUT = IN with tensor NAME replaced by EXPR (a function of t, the tensor)
edit() {
    TESTS=$(dirname "$0") $PY - "$@" <<'PY'
import math, os, sys
sys.path.insert(0, os.environ["TESTS"])
import torch, torch_gpt as tg
src, dst, name, expr = sys.argv[1:5]
st = tg.load_safetensors(src)
t = st[name].clone()
st[name] = eval(expr, {"t": t, "torch": torch, "nan": math.nan, "inf": math.inf})
tg.save_safetensors(dst, list(st.items()))
PY
}
# must_fail PATTERN CMD...: CMD exits 1 and its output contains PATTERN
must_fail() {
    local pattern=$1 out rc; shift
    out=$("$@" 2>&1) && rc=0 || rc=$?
    if [ "$rc" -ne 1 ] || ! grep -qF -- "$pattern" <<<"$out"; then
        echo "FAILED: '$*' exited $rc (want 1 with '$pattern'): $out"; exit 1
    fi
    echo "fails as it should: $(tail -1 <<<"$out")"
}

echo "== positive controls"
$REF compare-st "$d/w.safetensors" "$d/w.safetensors" --tol 0
edit "$d/w.safetensors" "$d/small.safetensors" h.0.ln_1.bias 't + 1e-6'
$REF compare-st "$d/small.safetensors" "$d/w.safetensors" --tol 1e-5

echo "== negative controls"
edit "$d/w.safetensors" "$d/nan.safetensors" h.0.attn.c_attn.weight 't.index_put_((torch.tensor([3]), torch.tensor([5])), torch.tensor(nan))'
must_fail "non-finite" $REF compare-st "$d/nan.safetensors" "$d/w.safetensors" --tol 1e-4
must_fail "non-finite" $REF compare-st "$d/w.safetensors" "$d/nan.safetensors" --tol 1e-4 --rel
must_fail "non-finite" $REF compare-st "$d/nan.safetensors" "$d/nan.safetensors" --tol 1e-4
edit "$d/w.safetensors" "$d/inf.safetensors" wte.weight 't.fill_(inf)'
must_fail "non-finite" $REF compare-st "$d/inf.safetensors" "$d/inf.safetensors" --tol 1e-4
edit "$d/w.safetensors" "$d/shape.safetensors" h.0.mlp.c_fc.bias 't.view(1, -1)'
must_fail "shapes differ" $REF compare-st "$d/shape.safetensors" "$d/w.safetensors" --tol 1e-4
must_fail "tolerance 1e-07" $REF compare-st "$d/small.safetensors" "$d/w.safetensors" --tol 1e-7

printf '{"step": 1, "loss": 4.1}\n{"step": 2, "loss": NaN}\n' > "$d/nan.jsonl"
printf '{"step": 1, "loss": 4.1}\n{"step": 2, "loss": 4.0}\n' > "$d/ok.jsonl"
$REF compare-losses "$d/ok.jsonl" "$d/ok.jsonl" --tol 0 | tail -1
must_fail "non-finite" $REF compare-losses "$d/nan.jsonl" "$d/ok.jsonl" --tol 1e-4
must_fail "non-finite" $REF compare-losses "$d/ok.jsonl" "$d/nan.jsonl" --tol 1e-4

$PY -c 'import numpy as np, sys; np.array([1, 2, 3], np.float32).tofile(sys.argv[1]); np.array([1, np.nan, 3], np.float32).tofile(sys.argv[2])' "$d/ok.f32" "$d/nan.f32"
$REF compare-f32 "$d/ok.f32" "$d/ok.f32" --tol 0
must_fail "non-finite" $REF compare-f32 "$d/nan.f32" "$d/ok.f32" --tol 1e-4
