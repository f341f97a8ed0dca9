#!/usr/bin/env bash
# bench/convergence.sh — does CO2 (and PipeDream-2BW) reach the validation loss of synchronous
# training for the same tokens? Byte-level model on the bundled fortunes corpus, 2 ranks.
#
#   bench/convergence.sh [--steps N (300)] [--val-every N (48)] [--val-windows N (32)]
#                        [--lr X (1e-3)] [--warmup N (20)] [--sweep "TAU:ALPHA:BETA:MODE,..."]
#                        [--seeds S1,S2 (1337)] [--only dp,co2,sweep,pp] [--out DIR]
#                        [--img DIR (docs/img)] [--loom PATH] [--no-wait]
#                        [--pp-accum K (4)] [--extra "FLAGS" (added to every run)]
#
# Model L4 H4 C128 V256 T128 (block 128), cosine schedule to lr/10; every run of one seed has the
# same initial weights and data order. Token budget per optimizer step: 2 x 8 x 128 = 2048:
#   dp             --dp 2, batch 8 per rank (synchronous all-reduce every step)
#   co2_constant   --dp 2 --co2 --gap-mode constant (τ 12, α 1, β 0.5, λ 1, φ 1: the public CO2
#                  code's values), batch 8 per worker
#   co2_adaptive   the same with --gap-mode adaptive (loom's default)
#   co2_tau*_a*_b*_MODE  the --sweep settings (MODE constant or adaptive)
#   pp2_1f1b       --pp 2 --grad-accum 4 --batch 4 --schedule 1f1b (global batch 16 x 128 as dp;
#                  --pp-accum K makes it 4K x 128, which dp does not follow)
#   pp2_2bw        the same with --schedule 2bw
# Validation every --val-every steps (a multiple of every τ, so CO2 is evaluated on its anchor
# right after a round) and at the end (CO2: the final anchor). With several --seeds the table
# gives the mean over seeds (and each seed's value); the plots show the first seed.
# Writes a markdown table (final validation loss, ratio to dp) and loss-curve PNGs via
# `loom plot --smooth 10` into --img. Timing does not affect the numbers, but the script still
# waits for other benchmarks so that it does not disturb them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS=300; VAL_EVERY=48; VAL_WIN=32; LR=1e-3; WARMUP=20; SEEDS=1337
SWEEP="12:1:0.2:constant,12:1:0:constant,12:1:0.2:adaptive,6:1:0.2:adaptive,24:1:0.2:adaptive"
ONLY="dp,co2,sweep,pp"; OUT=""; IMG="$ROOT/docs/img"; LOOM="$ROOT/loom"; WAIT=1; PY=/usr/bin/python3
PP_ACCUM=4; EXTRA=""
usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) STEPS="$2"; shift 2 ;;
        --val-every) VAL_EVERY="$2"; shift 2 ;;
        --val-windows) VAL_WIN="$2"; shift 2 ;;
        --lr) LR="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --sweep) SWEEP="$2"; shift 2 ;;
        --seeds) SEEDS="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --img) IMG="$2"; shift 2 ;;
        --loom) LOOM="$2"; shift 2 ;;
        --no-wait) WAIT=0; shift ;;
        --pp-accum) PP_ACCUM="$2"; shift 2 ;;
        --extra) EXTRA="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "convergence.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ -x "$LOOM" ] || { echo "convergence.sh: no loom binary at $LOOM (run 'make')" >&2; exit 2; }
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/loom-convergence.XXXXXX)"
mkdir -p "$OUT/curves" "$IMG"; OUT="$(cd "$OUT" && pwd)"

if [ "$WAIT" = 1 ]; then
    for ((i = 0; i < 60; i++)); do
        pgrep -f 'bench_dp.sh|bench_train.sh|bench_co2.sh|bench_pipeline.sh' >/dev/null || break
        [ "$i" = 0 ] && echo "waiting for another benchmark to finish (polling every 30 s, at most 30 min)"
        sleep 30
    done
fi
cp "$LOOM" "$OUT/loom"; BIN="$OUT/loom"

DATA="$OUT/fortunes"
if [ ! -f "$DATA/meta.json" ]; then
    mapfile -t FILES < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
    [ "${#FILES[@]}" -gt 0 ] || { echo "convergence.sh: no fortunes corpus (apt-get install fortunes)" >&2; exit 2; }
    "$BIN" prepare --tokenizer byte --out "$DATA" "${FILES[@]}" >"$OUT/prepare.log" 2>&1
fi
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "loom_git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    echo "corpus: $(cat "$DATA/meta.json" 2>/dev/null | tr -d '\n' | cut -c1-200)"
    echo "invocation: $0 --steps $STEPS --val-every $VAL_EVERY --val-windows $VAL_WIN --lr $LR --warmup $WARMUP --sweep $SWEEP --seeds $SEEDS --only $ONLY --pp-accum $PP_ACCUM --extra '$EXTRA'"
} | tee "$OUT/machine.txt"

COMMON=(--data "$DATA/train_*.bin" --val-data "$DATA/val_*.bin" --layers 4 --heads 4 --dim 128 --vocab 256
        --block-size 128 --seq 128 --steps "$STEPS" --lr "$LR" --warmup "$WARMUP" --lr-schedule cosine
        --min-lr "$(awk -v l="$LR" 'BEGIN{print l/10}')" --threads 1 --progress off --val-windows "$VAL_WIN")
read -r -a EXTRA_ARGS <<<"$EXTRA"
COMMON+=("${EXTRA_ARGS[@]}")
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE

run() {  # NAME FLAGS... (for each seed: curves/NAME.jsonl for the first, NAME@SEED.jsonl after)
    local base=$1; shift
    IFS=',' read -r -a SL <<<"$SEEDS"
    for seed in "${SL[@]}"; do
        local name=$base; [ "$seed" = "${SL[0]}" ] || name="$base@$seed"
        run_one "$name" "$@" --seed "$seed"
    done
}
run_one() {  # NAME FLAGS...
    local name=$1; shift
    local cmd=("$ROOT/scripts/loom-mpirun" -np 2 -x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x OMP_WAIT_POLICY
               "$BIN" train "${COMMON[@]}" "$@" --metrics "$OUT/curves/$name.jsonl")
    echo "\$ ${cmd[*]}" >>"$OUT/commands.txt"
    local t0=$SECONDS rc=0
    timeout -k 10 900 "${cmd[@]}" >"$OUT/$name.log" 2>&1 || rc=$?
    local vl; vl=$(grep -o '"val_loss":[0-9.eE+-]*' "$OUT/curves/$name.jsonl" 2>/dev/null | tail -1 | cut -d: -f2)
    echo "$name rc=$rc val_loss=${vl:-?} ($((SECONDS - t0)) s)" | tee -a "$OUT/runs.txt"
    [ "$rc" = 0 ] || tail -5 "$OUT/$name.log"
}

has() { [[ ",$ONLY," == *",$1,"* ]]; }
START=$SECONDS
has dp && run dp --dp 2 --batch 8 --val-every "$VAL_EVERY"
if has co2; then
    run co2_constant --dp 2 --batch 8 --val-every "$VAL_EVERY" --co2 --gap-mode constant
    run co2_adaptive --dp 2 --batch 8 --val-every "$VAL_EVERY" --co2 --gap-mode adaptive
fi
SW=()
if has sweep; then
    IFS=',' read -r -a SWL <<<"$SWEEP"
    for sw in "${SWL[@]}"; do
        IFS=':' read -r tau al be gm <<<"$sw"
        [ $((VAL_EVERY % tau)) = 0 ] || echo "convergence.sh: note: --val-every $VAL_EVERY is not a multiple of tau $tau" >&2
        gm=${gm:-constant}; n="co2_tau${tau}_a${al}_b${be}_$gm"; SW+=("$n")
        run "$n" --dp 2 --batch 8 --val-every "$VAL_EVERY" --co2 --tau "$tau" --outer-lr "$al" --outer-momentum "$be" \
            --gap-mode "$gm"
    done
fi
if has pp; then
    run pp2_1f1b --pp 2 --grad-accum "$PP_ACCUM" --batch 4 --schedule 1f1b --val-every "$VAL_EVERY"
    run pp2_2bw --pp 2 --grad-accum "$PP_ACCUM" --batch 4 --schedule 2bw --val-every "$VAL_EVERY"
fi
echo "total: $((SECONDS - START)) s" | tee -a "$OUT/machine.txt"

C="$OUT/curves"
plot() {  # OUT.png TITLE FILES...
    local o=$1 t=$2; shift 2
    local fs=(); for f in "$@"; do [ -s "$C/$f.jsonl" ] && fs+=("$C/$f.jsonl"); done
    [ "${#fs[@]}" -gt 1 ] && "$BIN" plot "${fs[@]}" -o "$IMG/$o" --smooth 10 --title "$t" && echo "wrote $IMG/$o"
    return 0
}
plot co2_convergence.png "DP vs CO2, 2 workers (dashed: validation)" dp co2_constant co2_adaptive
# the sweep plot leaves out the beta 0.5 runs (they diverge like co2_constant, which the first
# plot shows, and would hide the rest); the table lists every run
SWALL=(); for f in "$C"/co2_tau*.jsonl; do [ -e "$f" ] && [[ "$f" != *_b0.5* && "$f" != *@* ]] && SWALL+=("$(basename "$f" .jsonl)"); done
plot co2_sweep.png "CO2 settings that converge, vs DP" dp "${SWALL[@]}"
plot pipeline_convergence.png "--pp 2, K 4: 1F1B vs 2BW (DP: same curve as 1F1B)" dp pp2_1f1b pp2_2bw

$PY - "$C" <<'PY' | tee "$OUT/summary.md"
import json, os, sys
c = sys.argv[1]
def load(p):
    rows = [json.loads(l) for l in open(p)]
    val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    tr = [r["loss"] for r in rows if "loss" in r]
    return {"val": val, "train_last20": sum(tr[-20:]) / max(1, len(tr[-20:]))}
runs = {}   # name -> [per-seed results]
for f in sorted(os.listdir(c)):
    if f.endswith(".jsonl"):
        runs.setdefault(f[:-6].split("@")[0], []).append(load(f"{c}/{f}"))
order = ["dp", "co2_constant", "co2_adaptive"] + sorted(n for n in runs if n.startswith("co2_tau")) + ["pp2_1f1b", "pp2_2bw"]
def final(n):
    r = [x["val"][-1][1] for x in runs.get(n, []) if x["val"]]
    return sum(r) / len(r) if r else None, r
base, ref_pp = final("dp")[0], final("pp2_1f1b")[0]
steps_val = sorted({s for n in order for x in runs.get(n, [])[:1] for s, _ in x["val"]})
print("| run | final val loss (mean over seeds) | per seed | ÷ dp | ÷ 1f1b | train loss (last 20 steps) | val loss at steps " + ", ".join(map(str, steps_val[:-1])) + " (first seed) |")
print("|---|---|---|---|---|---|---|")
for n in order:
    f, per = final(n)
    if f is None: continue
    mid = {s: v for s, v in runs[n][0]["val"][:-1]}
    tr = sum(x["train_last20"] for x in runs[n]) / len(runs[n])
    print(f"| {n} | {f:.4f} | " + " / ".join(f"{v:.4f}" for v in per) + " | " + (f"{f / base:.3f}" if base else "—") + " | "
          + (f"{f / ref_pp:.3f}" if n.startswith("pp") and ref_pp else "—")
          + f" | {tr:.4f} | " + ", ".join(f"{mid[s]:.3f}" if s in mid else "—" for s in steps_val[:-1]) + " |")
PY
