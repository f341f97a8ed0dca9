#!/usr/bin/env bash
# t_peak.sh — MFU's denominator: by default `loom train` measures the CPU's fp32 peak (the
# backend's FMA probe) and says so once; the value is positive and plausible. --peak-gflops X
# overrides it (no probe), and every metrics line's mfu is against the peak in use: mfu × peak ×
# step time gives the same FLOPs per step whichever peak (no timing is asserted).
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 256 50000 1
base="--data $d/train.bin --batch 4 --seq 32 --layers 2 --heads 2 --dim 64 --vocab 256
      --block-size 32 --steps 4 --progress off"
# shellcheck disable=SC2086
$LOOM train $base --metrics "$d/measured.jsonl" 2> "$d/err"
cat "$d/err"
[ "$(grep -c "peak fp32" "$d/err")" -eq 1 ] || { echo "expected one peak line"; exit 1; }
peak=$(sed -n 's/^loom: peak fp32 \([0-9.]*\) GFLOP\/s measured on \([0-9]*\) threads\{0,1\} (MFU is against it)$/\1/p' "$d/err")
[ -n "$peak" ] || { echo "peak line not in the expected form"; exit 1; }
for x in 0.001 0.004; do
    # shellcheck disable=SC2086
    $LOOM train $base --peak-gflops $x --metrics "$d/p$x.jsonl" 2> "$d/err$x"
    if grep -q "peak fp32" "$d/err$x"; then echo "--peak-gflops $x still probed"; exit 1; fi
done
$PY - "$peak" "$d" <<'PY'
import json, sys
peak, d = float(sys.argv[1]), sys.argv[2]
assert 1 < peak < 100000, f"implausible peak {peak} GFLOP/s"
def flops(name, gflops):  # FLOPs per step implied by each line, and the rounding allowance
    rows = [json.loads(l) for l in open(f"{d}/{name}.jsonl")]
    assert len(rows) == 4, rows
    # mfu is written to 4 decimals and step_ms to 3
    return [(r["mfu"] * gflops * 1e9 * r["step_ms"] / 1e3,
             gflops * 1e9 * (5e-5 * r["step_ms"] / 1e3 + r["mfu"] * 5e-7)) for r in rows]
ref = flops("p0.001", 0.001)
F = sorted(f for f, _ in ref)[len(ref) // 2]
for name, g in (("p0.001", 0.001), ("p0.004", 0.004), ("measured", peak)):
    for f, tol in flops(name, g):
        assert abs(f - F) <= tol + 0.02 * F, f"{name}: mfu implies {f:.4g} FLOPs/step, not {F:.4g}"
print(f"peak {peak} GFLOP/s; mfu consistent with {F:.4g} FLOPs/step under every peak")
PY
