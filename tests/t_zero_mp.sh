#!/usr/bin/env bash
# long: started first (tests/run.sh)
# t_zero_mp.sh — ZeRO stages with model parallelism under mpirun, each against the same layout at
# a lower stage and the single process (losses within 1e-5 per step, exported weights within
# 1e-5; bit-identical where the reduction order is the same), with weight decay, clipping and
# --grad-accum > 1:
#   * dp 2 x tp 2 ZeRO-3 = dp 2 x tp 2 ZeRO-2 bit for bit (the same reduce-scatters), and the
#     single process within 1e-5; dp 2 x cp 2 ZeRO-3 likewise against ZeRO-1 and one process;
#     its checkpoint resumes bit-identically on its own layout and onto one process;
#   * dp 2 x pp 2 under 1f1b and gpipe at ZeRO-2 and ZeRO-3 = one process within 1e-5 (weights,
#     losses, --val-every's losses), ZeRO-1 within 1e-5 (ZeRO-2 reduce-scatters every
#     micro-batch: another summation order), ZeRO-3 = ZeRO-2 bit for bit (and with --recompute
#     = one process); their checkpoints resume bit-identically on their own layout and onto one
#     process, and a one-process checkpoint onto ZeRO-3; dp 2 x pp 2 x tp 2 and dp 2 x pp 2 x cp 2 (8 ranks) at ZeRO-3 = one
#     process and ZeRO-1 within 1e-5 (2bw with ZeRO 2 and 3: t_2bw_zero.sh);
#   * memory: the dry-run's per-rank parameters and the runs' summaries drop from ZeRO-1 to
#     ZeRO-3 (dp 2 x tp 2; dp 2 x pp 2's stage 0 weights), and ZeRO-2's gradients (pp); the
#     dry-run's stage 0 weights and gradients at ZeRO 2 and 3 equal the run's summary;
#   * negative control: a run on other data fails the same comparison.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
$PY -c "import numpy" 2>/dev/null || missing_dep "python3-numpy for $PY"   # compare-st
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/v300.bin" 300 60000 3
common="--layers 2 --heads 4 --dim 32 --lr 3e-3 --warmup 2 --weight-decay 0.1 --grad-clip 0.5
        --progress off --seed 5 --batch 2 --steps 6"
f="--data $d/v300.bin --vocab 300 --block-size 128 --seq 96 $common"
$LOOM train $f --grad-accum 4 --metrics "$d/ref.jsonl" --export "$d/ref.st" 2>/dev/null
tail -n 3 "$d/ref.jsonl" > "$d/tail.jsonl"

# ---- tensor parallelism (and context parallelism, which runs in the same strategy)
tp() { $MPI -np 4 $LOOM train $f --grad-accum 2 --dp 2 "$@" 2>/dev/null; }
tp --tp 2 --zero 2 --metrics "$d/tz2.jsonl" --export "$d/tz2.st"
tp --tp 2 --zero 3 --metrics "$d/tz3.jsonl" --export "$d/tz3.st" --save "$d/ctz3" \
    --save-every 3 --keep 0
same --tol 1e-5 "dp 2 x tp 2 ZeRO-3 vs one process" "$d/tz3.jsonl" "$d/ref.jsonl" \
    "$d/tz3.st" "$d/ref.st"
same "dp 2 x tp 2 ZeRO-3 vs ZeRO-2 (bit-identical)" "$d/tz3.jsonl" "$d/tz2.jsonl" \
    "$d/tz3.st" "$d/tz2.st"
tp --tp 2 --zero 3 --resume "$d/ctz3/step_00000003" --metrics "$d/tr.jsonl" --export "$d/tr.st"
tail -n 3 "$d/tz3.jsonl" > "$d/tz3tail.jsonl"
same "dp 2 x tp 2 ZeRO-3 checkpoint -> itself (bit-identical)" "$d/tr.jsonl" "$d/tz3tail.jsonl" \
    "$d/tr.st" "$d/tz3.st"
$LOOM train $f --grad-accum 4 --resume "$d/ctz3/step_00000003" --metrics "$d/tr1.jsonl" 2>/dev/null
same --tol 1e-5 "dp 2 x tp 2 ZeRO-3 checkpoint -> one process" "$d/tr1.jsonl" "$d/tail.jsonl"
tp --cp 2 --zero 1 --metrics "$d/cz1.jsonl" --export "$d/cz1.st"
tp --cp 2 --zero 3 --metrics "$d/cz3.jsonl" --export "$d/cz3.st"
same --tol 1e-5 "dp 2 x cp 2 ZeRO-3 vs one process" "$d/cz3.jsonl" "$d/ref.jsonl"
same --tol 1e-5 "dp 2 x cp 2 ZeRO-3 vs ZeRO-1" "$d/cz3.jsonl" "$d/cz1.jsonl" \
    "$d/cz3.st" "$d/cz1.st"
same_st --tol 1e-5 "dp 2 x cp 2 ZeRO-3 vs one process" "$d/cz3.st" "$d/ref.st"

# ---- memory: parameters per rank at ZeRO-1 and ZeRO-3 (a model whose layers outweigh the
# gathered embedding and two gathered blocks)
big="--data $d/v300.bin --vocab 300 --block-size 128 --seq 32 --layers 8 --heads 4 --dim 64
     --batch 1 --steps 1 --progress off"
mem() { # NAME LOWER HIGHER: LOWER < HIGHER
    awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%s: %s MiB < %s MiB\n",
        n, a, b; exit !(a != "" && b != "" && a + 0 < b + 0) }' || { echo "FAILED: $1"; exit 1; }
}
dryp() { $LOOM train $big "$@" --dry-run | sed -n 's/^per rank.*params \([0-9.]*\) MiB.*/\1/p'; }
runp() { $MPI -np 4 $LOOM train $big "$@" 2>&1 >/dev/null |
         sed -n 's/.*holding params \([0-9.]*\) MiB.*/\1/p'; }
mem "dp 2 x tp 2 dry-run params per rank" "$(dryp --dp 2 --tp 2 --zero 3)" \
    "$(dryp --dp 2 --tp 2 --zero 1)"
mem "dp 2 x tp 2 run's params per rank" "$(runp --dp 2 --tp 2 --zero 3)" \
    "$(runp --dp 2 --tp 2 --zero 1)"

# ---- pipeline stages (gpipe/1f1b; 2bw: t_2bw_zero.sh): dp 2 x pp 2, 5 layers split unevenly
pf="--data $d/v64.bin --layers 5 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2 --seq 16
    --steps 5 --lr 3e-3 --warmup 1 --weight-decay 0.1 --grad-clip 0.5 --progress off"
val="--val-data $d/v64.bin --val-every 2"
mkshard "$d/v64.bin" 64 60000 3
$LOOM train $pf $val --grad-accum 6 --metrics "$d/pref.jsonl" --export "$d/pref.st" \
    --save "$d/pone" --save-every 2 --keep 0 2>/dev/null
grep -v val_loss "$d/pref.jsonl" | tail -n 3 > "$d/ptail.jsonl"
pp() { $MPI -np 4 $LOOM train $pf --grad-accum 3 --dp 2 --pp 2 "$@" 2>/dev/null; }
pp --schedule 1f1b --zero 1 --metrics "$d/p1.jsonl" --export "$d/p1.st"
for sched in 1f1b gpipe; do
    for z in 2 3; do
        pp $val --schedule $sched --zero $z --metrics "$d/p$z.jsonl" --export "$d/p$z$sched.st" \
            --save "$d/cp$z$sched" --save-every 2 --keep 0
        same --tol 1e-5 "dp 2 x pp 2 $sched ZeRO-$z vs one process" "$d/p$z.jsonl" "$d/pref.jsonl" \
            "$d/p$z$sched.st" "$d/pref.st"
        diff <(grep val_loss "$d/p$z.jsonl") <(grep val_loss "$d/pref.jsonl") > /dev/null ||
            { echo "FAILED: ZeRO-$z validation losses differ from one process'"; exit 1; }
    done
    same_st "dp 2 x pp 2 $sched ZeRO-3 vs ZeRO-2 (bit-identical)" "$d/p3$sched.st" "$d/p2$sched.st"
    same_st --tol 1e-5 "dp 2 x pp 2 $sched ZeRO-2 vs ZeRO-1" "$d/p2$sched.st" "$d/p1.st"
done
echo "validation through the stages at ZeRO 2 and 3 equals one process'"
pp --schedule 1f1b --zero 3 --recompute --metrics "$d/prc.jsonl" --export "$d/prc.st"
same --tol 1e-5 "dp 2 x pp 2 1f1b ZeRO-3 --recompute vs one process" "$d/prc.jsonl" "$d/pref.jsonl" \
    "$d/prc.st" "$d/pref.st"
for z in 2 3; do # checkpoints: on their own layout bit for bit, onto one process, and back
    pp --schedule gpipe --zero $z --resume "$d/cp${z}gpipe/step_00000002" \
        --metrics "$d/pr$z.jsonl" --export "$d/pr.st"
    grep -v val_loss "$d/p$z.jsonl" | tail -n 3 > "$d/pztail.jsonl"
    same "dp 2 x pp 2 ZeRO-$z checkpoint -> itself (bit-identical)" "$d/pr$z.jsonl" \
        "$d/pztail.jsonl" "$d/pr.st" "$d/p${z}gpipe.st"
    $LOOM train $pf --grad-accum 6 --resume "$d/cp${z}gpipe/step_00000002" \
        --metrics "$d/pr1$z.jsonl" 2>/dev/null
    same --tol 1e-5 "dp 2 x pp 2 ZeRO-$z checkpoint -> one process" "$d/pr1$z.jsonl" "$d/ptail.jsonl"
done
pp --schedule 1f1b --zero 3 --resume "$d/pone/step_00000002" --metrics "$d/p1to3.jsonl"
same --tol 1e-5 "one-process checkpoint -> dp 2 x pp 2 ZeRO-3" "$d/p1to3.jsonl" "$d/ptail.jsonl"
# with 1D tensor parallelism in every stage (8 ranks) and with context parallelism
tf="--data $d/v300.bin --vocab 300 --block-size 64 --seq 32 --layers 2 --heads 4 --dim 32
    --lr 3e-3 --warmup 2 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5 --batch 2
    --steps 6"
$LOOM train $tf --grad-accum 4 --metrics "$d/tref.jsonl" --export "$d/tref.st" 2>/dev/null
for par in "--tp 2" "--cp 2"; do
    for z in 1 3; do
        $MPI -np 8 $LOOM train $tf --grad-accum 2 --dp 2 --pp 2 $par --zero $z \
            --metrics "$d/t$z.jsonl" --export "$d/t$z.st" 2>/dev/null
    done
    same --tol 1e-5 "dp 2 x pp 2 x ${par#--} ZeRO-3 vs one process" "$d/t3.jsonl" "$d/tref.jsonl" \
        "$d/t3.st" "$d/tref.st"
    same_st --tol 1e-5 "dp 2 x pp 2 x ${par#--} ZeRO-3 vs ZeRO-1" "$d/t3.st" "$d/t1.st"
done
mf="${big/--layers 8/--layers 16} --grad-accum 2"
dryg() { $LOOM train $mf "$@" --dry-run | sed -n 's/^per rank.*grads \([0-9.]*\) MiB.*/\1/p'; }
runw() { local what=$1; shift; $MPI -np 4 $LOOM train $mf "$@" 2>&1 >/dev/null |
         sed -n "s/.*stage 0 holds $what \([0-9.]*\) MiB.*/\1/p"; }
dryp() { $LOOM train $mf "$@" --dry-run | sed -n 's/^per rank.*params \([0-9.]*\) MiB.*/\1/p'; }
mem "dp 2 x pp 2 dry-run params per rank (ZeRO-3 vs 1)" "$(dryp --dp 2 --pp 2 --zero 3)" \
    "$(dryp --dp 2 --pp 2 --zero 1)"
mem "dp 2 x pp 2 dry-run grads per rank (ZeRO-2 vs 1)" "$(dryg --dp 2 --pp 2 --zero 2)" \
    "$(dryg --dp 2 --pp 2 --zero 1)"
mem "dp 2 x pp 2 run's stage 0 weights (ZeRO-3 vs 1)" "$(runw weights --dp 2 --pp 2 --zero 3)" \
    "$(runw weights --dp 2 --pp 2 --zero 1)"
for z in 2 3; do # the dry-run predicts what the run's stage 0 holds
    a="$(dryp --dp 2 --pp 2 --zero $z) $(dryg --dp 2 --pp 2 --zero $z)"
    b="$(runw weights --dp 2 --pp 2 --zero $z)"
    b="$b $(runw "weights [0-9.]* MiB, grads" --dp 2 --pp 2 --zero $z)"
    echo "dp 2 x pp 2 ZeRO-$z weights, grads per rank: dry-run $a MiB, run $b MiB"
    [ "$a" = "$b" ] || { echo "FAILED: the dry-run's memory differs from the run's"; exit 1; }
done
mem "dp 2 x pp 2 run's stage 0 grads (ZeRO-2 vs 1)" \
    "$(runw "weights [0-9.]* MiB, grads" --dp 2 --pp 2 --zero 2)" \
    "$(runw "weights [0-9.]* MiB, grads" --dp 2 --pp 2 --zero 1)"

# negative control: other data must not pass the same comparison
mkshard "$d/other.bin" 300 60000 9
$MPI -np 4 $LOOM train ${f/v300.bin/other.bin} --grad-accum 2 --dp 2 --tp 2 --zero 3 \
    --metrics "$d/neg.jsonl" 2>/dev/null
if same --tol 1e-5 "other data" "$d/neg.jsonl" "$d/ref.jsonl" > /dev/null; then
    echo "FAILED: the comparison passed on other data"; exit 1
fi
echo "negative control: other data fails the comparison"
