#!/usr/bin/env bash
# t_2bw_zero.sh — the pipeline's 2bw schedule (PipeDream-2BW: two weight versions, batch t runs
# on W(t-1)) with ZeRO-2 and ZeRO-3 over each stage's dp replicas, against 2bw with ZeRO-1 (the
# same update rule, whole-stage gradients all-reduced): dp 2 x pp 2, --grad-accum 3, 6 steps,
# weight decay and clipping.
#   * ZeRO-2 and ZeRO-3 = ZeRO-1 within 1e-5 (losses, grad norms relative, exported weights):
#     not bit for bit, since ZeRO-2 reduce-scatters every micro-batch's gradient (another
#     summation order than one all-reduce of the batch's sum); ZeRO-3 = ZeRO-2 bit for bit (the
#     same reduce-scatters), validation losses included;
#   * checkpoints at step 3 (with the previous version) resume bit-identically on their own
#     layout, and a ZeRO-3 checkpoint resumes at ZeRO-1 within 1e-5;
#   * dp 2 x pp 2 x tp 2 (8 ranks): ZeRO-3 = ZeRO-1 within 1e-5, its checkpoint resumes
#     bit-identically; dp 2 x pp 3 (a middle stage) and dp 2 x pp 2 x cp 2: ZeRO-3 = ZeRO-1;
#   * the summary: ZeRO-3's stage 0 holds less weight memory than ZeRO-1's, ZeRO-2 less grads;
#   * negative control: 1f1b (no delay: batch t on W(t)) fails the same comparison.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
$PY -c "import numpy" 2>/dev/null || missing_dep "python3-numpy for $PY" # compare-st
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
mkshard "$d/v64.bin" 64 60000 3
pf="--data $d/v64.bin --layers 5 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2 --seq 16
    --steps 6 --lr 3e-3 --warmup 1 --weight-decay 0.1 --grad-clip 0.5 --progress off
    --val-data $d/v64.bin --val-every 2"
pp() { $MPI -np 4 $LOOM train $pf --grad-accum 3 --dp 2 --pp 2 "$@"; }
norms() { # A B TOL: per-step grad norms (full precision) within TOL relative
    $PY - "$@" <<'EOF'
import json, sys
rd = lambda f: [json.loads(l)["grad_norm"] for l in open(f) if '"grad_norm"' in l]
a, b, tol = rd(sys.argv[1]), rd(sys.argv[2]), float(sys.argv[3])
w = max(abs(x - y) / abs(y) for x, y in zip(a, b)) if len(a) == len(b) and a else float("inf")
print(f"max relative grad-norm difference {w:.3g} over {len(a)} steps, tolerance {tol}")
sys.exit(0 if w <= tol else 1)
EOF
}
# same2bw NAME A B TOL: with TOL 0, every field of every record equal (lib.sh's same); else the
# losses (lib.sh's same --tol) and the grad norms, relative, within TOL
same2bw() {
    if [ "$4" = 0 ]; then same "$1" "$2" "$3"; return; fi
    same --tol "$4" "$1" "$2" "$3"
    local out
    out=$(norms "$2" "$3" "$4") || { echo "$1: FAILED: $out"; exit 1; }
    echo "$1: $out"
}
val() { grep val_loss "$1" | sed 's/.*"val_loss":\([^,}]*\).*/\1/'; }
for z in 1 2 3; do
    pp --schedule 2bw --zero $z --metrics "$d/z$z.jsonl" --export "$d/z$z.st" \
        --save "$d/c$z" --save-every 3 --keep 0 2> "$d/err$z" || { cat "$d/err$z"; exit 1; }
    grep -v val_loss "$d/z$z.jsonl" > "$d/t$z.jsonl"
done
[ "$(wc -l < "$d/t1.jsonl")" -eq 6 ] || { echo "FAILED: expected 6 steps"; exit 1; }
for z in 2 3; do
    same2bw "2bw ZeRO-$z vs ZeRO-1 (losses, grad norms)" "$d/t$z.jsonl" "$d/t1.jsonl" 1e-5
    same_st --tol 1e-5 "2bw ZeRO-$z vs ZeRO-1 (weights)" "$d/z$z.st" "$d/z1.st"
done
same2bw "2bw ZeRO-3 vs ZeRO-2 (bit-identical)" "$d/t3.jsonl" "$d/t2.jsonl" 0
same_st "2bw ZeRO-3 vs ZeRO-2 (bit-identical)" "$d/z3.st" "$d/z2.st"
[ -n "$(val "$d/z3.jsonl")" ] && [ "$(val "$d/z3.jsonl")" = "$(val "$d/z2.jsonl")" ] ||
    { echo "FAILED: ZeRO-3's validation losses differ from ZeRO-2's"; exit 1; }
$PY - "$(val "$d/z3.jsonl")" "$(val "$d/z1.jsonl")" <<'EOF' || { echo "FAILED: validation"; exit 1; }
import sys
a, b = [list(map(float, s.split())) for s in sys.argv[1:3]]
assert len(a) == len(b) == 3 and max(abs(x - y) for x, y in zip(a, b)) <= 1e-5, (a, b)
print("2bw ZeRO-3 validation losses = ZeRO-1's within 1e-5:", a)
EOF

# checkpoints: the newest and the previous version, moments; resumed mid-run
for z in 2 3; do
    pp --schedule 2bw --zero $z --resume "$d/c$z/step_00000003" --metrics "$d/r$z.jsonl" \
        --export "$d/r.st" 2> /dev/null # (a resumed run appends to its metrics)
    grep -v val_loss "$d/r$z.jsonl" > "$d/rt.jsonl"
    tail -n 3 "$d/t$z.jsonl" > "$d/tail.jsonl"
    same2bw "2bw ZeRO-$z checkpoint -> itself (bit-identical)" "$d/rt.jsonl" "$d/tail.jsonl" 0
    same_st "2bw ZeRO-$z checkpoint -> itself (bit-identical)" "$d/r.st" "$d/z$z.st"
done
pp --schedule 2bw --zero 1 --resume "$d/c3/step_00000003" --metrics "$d/r31.jsonl" \
    --export "$d/r.st" 2> /dev/null
grep -v val_loss "$d/r31.jsonl" > "$d/rt.jsonl"
tail -n 3 "$d/t1.jsonl" > "$d/tail.jsonl"
same2bw "2bw ZeRO-3 checkpoint -> ZeRO-1" "$d/rt.jsonl" "$d/tail.jsonl" 1e-5
same_st --tol 1e-5 "2bw ZeRO-3 checkpoint -> ZeRO-1" "$d/r.st" "$d/z1.st"

# with 1D tensor parallelism in every stage (8 ranks; checkpoints gathered over tp, the previous
# version gathered over the replicas' shards)
mkshard "$d/v300.bin" 300 60000 3
tf="--data $d/v300.bin --vocab 300 --block-size 64 --seq 32 --layers 2 --heads 4 --dim 32
    --lr 3e-3 --warmup 2 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5 --batch 2
    --steps 6 --grad-accum 2 --dp 2 --pp 2 --tp 2 --schedule 2bw"
for z in 1 3; do
    $MPI -np 8 $LOOM train $tf --zero $z --metrics "$d/tp$z.jsonl" --export "$d/tp$z.st" \
        --save "$d/ctp$z" --save-every 3 --keep 0 2> /dev/null
done
same2bw "dp 2 x pp 2 x tp 2 2bw ZeRO-3 vs ZeRO-1" "$d/tp3.jsonl" "$d/tp1.jsonl" 1e-5
same_st --tol 1e-5 "dp 2 x pp 2 x tp 2 2bw ZeRO-3 vs ZeRO-1" "$d/tp3.st" "$d/tp1.st"
$MPI -np 8 $LOOM train $tf --zero 3 --resume "$d/ctp3/step_00000003" --metrics "$d/tpr.jsonl" \
    --export "$d/r.st" 2> /dev/null
tail -n 3 "$d/tp3.jsonl" > "$d/tail.jsonl"
same2bw "dp 2 x pp 2 x tp 2 2bw ZeRO-3 checkpoint -> itself (bit-identical)" "$d/tpr.jsonl" \
    "$d/tail.jsonl" 0
same_st "dp 2 x pp 2 x tp 2 2bw ZeRO-3 checkpoint -> itself (bit-identical)" "$d/r.st" "$d/tp3.st"

# a middle stage (pp 3: neither the embedding nor the wte replica) and context parallelism
# (dp 2 x cp 2 is the gradient group), with 64-float chunks so the chain spans many collectives
for lay in "6 --pp 3 --grad-accum 4" "8 --pp 2 --cp 2 --grad-accum 2"; do
    read -r np par <<<"$lay"
    for z in 1 3; do
        LOOM_PIPE_CHUNK=64 $MPI -np "$np" $LOOM train $pf $par --dp 2 --schedule 2bw --zero $z \
            --metrics "$d/l$z.jsonl" --export "$d/l$z.st" 2> /dev/null
    done
    grep -v val_loss "$d/l3.jsonl" > "$d/a.jsonl"
    grep -v val_loss "$d/l1.jsonl" > "$d/b.jsonl"
    same2bw "dp 2 ${par% --grad*} 2bw ZeRO-3 vs ZeRO-1" "$d/a.jsonl" "$d/b.jsonl" 1e-5
    same_st --tol 1e-5 "dp 2 ${par% --grad*} 2bw ZeRO-3 vs ZeRO-1" "$d/l3.st" "$d/l1.st"
done

# memory: what stage 0 holds (the summary line)
held() { sed -n "s/.*stage 0 holds weights \([0-9.]*\) MiB, grads \([0-9.]*\) MiB.*/\\$2/p" "$1"; }
awk -v a="$(held "$d/err3" 1)" -v b="$(held "$d/err1" 1)" -v c="$(held "$d/err2" 2)" \
    -v e="$(held "$d/err1" 2)" 'BEGIN { printf "stage 0 weights: ZeRO-3 %s MiB < ZeRO-1 %s MiB; " \
    "grads: ZeRO-2 %s MiB < ZeRO-1 %s MiB\n", a, b, c, e; exit !(a + 0 < b + 0 && c + 0 < e + 0) }' ||
    { echo "FAILED: memory"; exit 1; }

# negative control: 1f1b runs batch t on W(t), not W(t-1): the comparison must catch it
pp --schedule 1f1b --zero 2 --metrics "$d/n.jsonl" 2> /dev/null
grep -v val_loss "$d/n.jsonl" > "$d/nt.jsonl"
if norms "$d/nt.jsonl" "$d/t1.jsonl" 1e-5 > /dev/null ||
    same --tol 1e-5 "1f1b" "$d/nt.jsonl" "$d/t1.jsonl" > /dev/null; then
    echo "FAILED: 1f1b (no weight delay) passed the comparison with 2bw"
    exit 1
fi
echo "negative control: 1f1b ZeRO-2 (no delay) fails the comparison with 2bw ZeRO-1" \
    "($(norms "$d/nt.jsonl" "$d/t1.jsonl" 1e-5 | sed 's/,.*//'))"
