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
REF="$PY $(dirname "$0")/torch_ref.py"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
# the files, written in one process (each torch import costs seconds): w = small GPT-2 weights;
# small = w + 1e-6 on one bias; nan = w with one NaN; inf = w with an infinite tensor;
# shape = w with one bias stored as [1, N] (same values: broadcasting would hide it)
TESTS=$(dirname "$0") $PY - "$d" <<'PY'
import math, os, sys
sys.path.insert(0, os.environ["TESTS"])
import torch_gpt as tg
d = sys.argv[1]
m = tg.GPT(1, 2, 16, 32, 8)
m.init_weights(1)
w = [(n, (p.t() if conv else p).detach().clone()) for n, p, conv in m.hf_items()]
def save(name, edit=None, fn=None):
    tg.save_safetensors(f"{d}/{name}.safetensors", [(n, fn(t.clone()) if n == edit else t) for n, t in w])
save("w")
save("small", "h.0.ln_1.bias", lambda t: t + 1e-6)
save("nan", "h.0.attn.c_attn.weight", lambda t: t.index_fill_(0, tg.torch.tensor([3]), math.nan))
save("inf", "wte.weight", lambda t: t.fill_(math.inf))
save("shape", "h.0.mlp.c_fc.bias", lambda t: t.view(1, -1))
PY
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
$REF compare-st "$d/small.safetensors" "$d/w.safetensors" --tol 1e-5

echo "== negative controls"
must_fail "non-finite" $REF compare-st "$d/nan.safetensors" "$d/w.safetensors" --tol 1e-4
must_fail "non-finite" $REF compare-st "$d/w.safetensors" "$d/nan.safetensors" --tol 1e-4 --rel
must_fail "non-finite" $REF compare-st "$d/nan.safetensors" "$d/nan.safetensors" --tol 1e-4
must_fail "non-finite" $REF compare-st "$d/inf.safetensors" "$d/w.safetensors" --tol 1e-4
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
