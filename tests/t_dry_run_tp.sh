#!/usr/bin/env bash
# t_dry_run_tp.sh — `loom train --dry-run` prints this run's layout's memory per rank, and it is
# what the runs themselves hold:
#   * tp 2 (1D): the parameters and activations equal what the tp 2 run's summary prints, and the
#     part's parameter count equals Megatron's split computed here by hand (the vocabulary padded
#     to a multiple of 64·tp) for tp 2 and 4; with --recompute too;
#   * pp 2 (2bw and 1f1b): weights, grads, optimizer, activations equal the pipeline's summary;
#   * --sp takes each layer's LayerNorm/residual activations ÷ tp (the exact difference is
#     checked), --cp 2 holds the activations of T/2 tokens (= a dry-run at --seq T/2) plus the
#     ring's buffers as ring_attention.c allocates them,
#     --tp-mode 2d divides each layer's parameters by q² = tp; ZeRO-1 halves the moments over dp 2;
#   * bad layouts are clear errors naming the numbers.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/v.bin" 4000 20000 3
f="--data $d/v.bin --vocab 4000 --block-size 64 --seq 64 --layers 2 --heads 4 --dim 128 --batch 2
   --steps 2 --progress off"
field() { sed -n "s/.*[ (]$1 \([0-9.]*\) MiB.*/\1/p" "$2" | head -1; }
same_mib() { # NAME A B [TOL]: two MiB figures printed with 2 decimals (or one: TOL) agree
    awk -v n="$1" -v a="$2" -v b="$3" -v t="${4:-0.005}" 'BEGIN {
        d = a - b; if (d < 0) d = -d
        printf "%s: %s MiB vs %s MiB\n", n, a, b
        exit !(a != "" && b != "" && d <= t) }' || { echo "FAILED: $1"; exit 1; }
}
dry() { $LOOM train $f "$@" --dry-run > "$d/dry.txt"; tail -2 "$d/dry.txt" | tee "$d/last.txt"; }

# tp 2 against its run's summary (params printed with 2 decimals, activations with 1)
for rc in "" --recompute; do
    $MPI -np 2 $LOOM train $f --tp 2 $rc 2> "$d/run.log"
    dry --tp 2 $rc > /dev/null
    same_mib "tp 2 $rc params" "$(field params "$d/last.txt")" "$(field params "$d/run.log")"
    same_mib "tp 2 $rc activations" "$(field activations "$d/last.txt")" \
        "$(field activations "$d/run.log")" 0.05
done
parts() { sed -n 's/.* \([0-9]*\) parameters per tensor-parallel part.*/\1/p' "$d/last.txt"; }
for tp in 1 2 4; do
    dry --tp $tp > /dev/null
    $PY - "$tp" "$(parts)" <<'PY'
import sys
tp, got = int(sys.argv[1]), int(sys.argv[2])
V, C, L, T = 4000, 128, 2, 64
vrows = V if tp == 1 else -(-V // (64 * tp)) * 64 * tp // tp   # padded vocabulary / tp
layer = 12 * C * C // tp + 7 * C // tp + 6 * C                 # split q,k,v, proj, MLP; LNs, biases
want = vrows * C + T * C + L * layer + 2 * C
print(f"tp {tp}: part of {got} parameters (by hand: {want})")
sys.exit(got != want)
PY
done

# pp 2 against the pipeline's own accounting (stage 0 is the largest here)
for s in 2bw 1f1b; do
    $MPI -np 2 $LOOM train $f --pp 2 --grad-accum 2 --schedule $s 2> "$d/run.log"
    dry --pp 2 --grad-accum 2 --schedule $s > /dev/null
    grep -q "stage 0, the largest" "$d/last.txt"
    for k in params:weights grads:grads optimizer:optimizer activations:activations; do
        same_mib "pp 2 $s ${k%%:*}" "$(field "${k%%:*}" "$d/last.txt")" "$(field "${k##*:}" "$d/run.log")"
    done
done

# sp, cp, 2d, ZeRO-1 from their definitions; all MiB
dry --tp 2 > /dev/null; cp "$d/last.txt" "$d/tp2.txt"
dry --tp 2 --sp > /dev/null; cp "$d/last.txt" "$d/sp.txt"
dry > /dev/null; cp "$d/last.txt" "$d/one.txt"
dry --cp 2 > /dev/null; cp "$d/last.txt" "$d/cp2.txt"
$LOOM train ${f/--seq 64/--seq 32} --dry-run | tail -1 > "$d/half.txt"
dry --tp 4 --tp-mode 2d > /dev/null; cp "$d/last.txt" "$d/2d.txt"
dry --dp 2 --zero 1 > /dev/null; cp "$d/last.txt" "$d/z1.txt"
v() { field "$1" "$d/$2.txt"; }
$PY - <<PY
B, T, C, L, MiB = 2, 64, 128, 2, 1048576.0
tp2, sp = dict(p=$(v params tp2), a=$(v activations tp2)), dict(p=$(v params sp), a=$(v activations sp))
one, cp2 = dict(p=$(v params one), a=$(v activations one)), dict(p=$(v params cp2), a=$(v activations cp2))
half, d2 = $(v activations half), dict(p=$(v params 2d), a=$(v activations 2d))
z1 = dict(p=$(v params z1), o=$(v optimizer z1)); o1 = $(v optimizer one)
def close(a, b, tol=0.011): return abs(a - b) <= tol
# sp: ln1, res2, ln2 (B,T,C) and 2 x (mean, rstd) per layer, the L+3 stream slots, the stream's
# gradient and lnf (B,T,C) + (B,T,2), each halved
BT = B * T
sp_less = 0.5 * 4 * (L * BT * (3 * C + 4) + (L + 3) * BT * C + BT * C + BT * C + 2 * BT) / MiB
print(f"sp: params {sp['p']} = tp 2's {tp2['p']}; activations {sp['a']} = {tp2['a']} - {sp_less:.3f}")
assert sp["p"] == tp2["p"] and close(tp2["a"] - sp["a"], sp_less), (tp2, sp)
H = 4  # the ring's buffers (ring_attention.c): 6 of (B,T/2,2C), a (B,T/2,C) partial, its LSE
ring = (6 * B * (T // 2) * 2 * C + B * (T // 2) * C + B * H * (T // 2)) * 4 / MiB
print(f"cp 2: activations {cp2['a']} = seq {T//2}'s {half} + ring {ring:.3f} (cp 1: {one['a']})")
assert cp2["p"] == one["p"] and cp2["a"] < one["a"] and close(cp2["a"], half + ring), (cp2, one)
layer = (12 * C * C + 13 * C) * 4 / MiB
print(f"2d tp 4: params {d2['p']} = {one['p']} - {L} layers x 3/4 x {layer:.3f}; activations {d2['a']} < {one['a']}")
assert close(d2["p"], one["p"] - L * layer * 0.75, 0.02) and d2["a"] < one["a"], d2
print(f"dp 2 zero 1: optimizer {z1['o']} = {o1} / 2, params {z1['p']}")
assert close(z1["o"], o1 / 2) and z1["p"] == one["p"], z1
PY
expect_fail "--tp 3 must divide --heads 4" $LOOM train $f --tp 3 --dry-run
expect_fail "--seq 64 is not divisible by 6" $LOOM train $f --cp 3 --dry-run
expect_fail "--tp-mode 2d needs --tp q*q >= 4 (got --tp 2)" $LOOM train $f --tp 2 --tp-mode 2d --dry-run
expect_fail "--sp splits the sequence" $LOOM train $f --sp --dry-run
