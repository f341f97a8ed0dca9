#!/usr/bin/env bash
# bench/convergence_rows.sh — do loom's micro-batches learn as much per token as independently
# sampled rows? Trains the same byte-level model on the bundled fortunes corpus, from the same
# initial weights per seed, with one recipe, three ways, and scores every final model with the
# same code (tests/torch_gpt.py eval) on the same validation windows:
#   loom          this loom, --shuffle on: every row of a micro-batch its own sequence of T+1
#                 tokens from a seeded per-epoch permutation of the sequences
#   loom_before   another loom build (LOOM_BEFORE=path or --before PATH; e.g. one built from
#                 5d64e99), --shuffle on: there a micro-batch was one contiguous stretch of
#                 B·T+1 tokens, and shuffling permuted those blocks
#   torch         the PyTorch reference (tests/torch_gpt.py train --rows random): every row an
#                 independent uniformly random offset, as nanoGPT's get_batch draws them
#
#   bench/convergence_rows.sh [--steps N (2000)] [--seeds S1,S2 (1,2)] [--batch B (12)]
#       [--seq T (64)] [--lr X (1e-3)] [--min-lr X (1e-4)] [--warmup N (100)] [--beta2 X (0.99)]
#       [--val-windows N (all)] [--only loom,loom_before,torch] [--loom PATH] [--before PATH]
#       [--shuffle on|off (on: loom and loom_before)] [--out DIR]
#
# Recipe: L4 H4 C128 V256, block = --seq, AdamW (β1 0.9, β2 --beta2, wd 0.1 on matrices), clip
# 1, lr --lr with --warmup linear steps then cosine to --min-lr (loom's schedule in both), one
# process each, 1 thread, run one after another. Reports per run the validation loss of the
# final model (the mean over the contiguous validation windows of B·T+1 tokens), and the
# training-loss noise: the standard deviation of the per-step training loss over the last 200
# steps. Everything is seeded; the table gives the mean over seeds, each seed's value and the
# ratio to PyTorch's mean.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS=2000; SEEDS=1,2; B=12; T=64; LR=1e-3; MIN_LR=1e-4; WARMUP=100; BETA2=0.99; VAL_WIN=1000000
ONLY=loom,loom_before,torch; LOOM="$ROOT/loom"; BEFORE="${LOOM_BEFORE:-}"; SHUFFLE=on; OUT=""
PY=/usr/bin/python3
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) STEPS="$2"; shift 2 ;;
        --seeds) SEEDS="$2"; shift 2 ;;
        --batch) B="$2"; shift 2 ;;
        --seq) T="$2"; shift 2 ;;
        --lr) LR="$2"; shift 2 ;;
        --min-lr) MIN_LR="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --beta2) BETA2="$2"; shift 2 ;;
        --val-windows) VAL_WIN="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --loom) LOOM="$2"; shift 2 ;;
        --before) BEFORE="$2"; shift 2 ;;
        --shuffle) SHUFFLE="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "convergence_rows.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
has() { [[ ",$ONLY," == *",$1,"* ]]; }
[ -x "$LOOM" ] || { echo "convergence_rows.sh: no loom binary at $LOOM (run 'make')" >&2; exit 2; }
if has loom_before && [ ! -x "${BEFORE:-/nonexistent}" ]; then
    echo "convergence_rows.sh: no loom_before binary (LOOM_BEFORE=path or --before PATH; or leave" \
         "loom_before out of --only)" >&2
    exit 2
fi
$PY -c "import torch, numpy" 2>/dev/null || { echo "convergence_rows.sh: needs python3-torch and python3-numpy" >&2; exit 2; }
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/loom-convergence-rows.XXXXXX)"
mkdir -p "$OUT/runs"; OUT="$(cd "$OUT" && pwd)"
PEER="$ROOT/tests/torch_gpt.py"

DATA="$OUT/fortunes"
if [ ! -f "$DATA/meta.json" ]; then
    mapfile -t FILES < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
    [ "${#FILES[@]}" -gt 0 ] || { echo "convergence_rows.sh: no fortunes corpus (apt-get install fortunes)" >&2; exit 2; }
    "$LOOM" prepare --tokenizer byte --out "$DATA" --val-fraction 0.05 "${FILES[@]}" >"$OUT/prepare.log" 2>&1
fi
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
    echo "loom_git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    echo "loom_before: ${BEFORE:-none}"
    echo "corpus: $(tr -d '\n' < "$DATA/meta.json")"
    echo "invocation: $0 --steps $STEPS --seeds $SEEDS --batch $B --seq $T --lr $LR --min-lr $MIN_LR --warmup $WARMUP --beta2 $BETA2 --val-windows $VAL_WIN --only $ONLY --shuffle $SHUFFLE"
} | tee "$OUT/machine.txt"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE

TRAIN="$DATA/train_000000.bin" VAL="$DATA/val_000000.bin"
OPT=(--lr "$LR" --min-lr "$MIN_LR" --warmup "$WARMUP" --lr-schedule cosine --beta2 "$BETA2"
     --weight-decay 0.1 --grad-clip 1 --batch "$B" --seq "$T" --steps "$STEPS" --heads 4)
run_cmd() {  # NAME CMD...: logs the command, runs it, scores NAME.safetensors
    local name=$1; shift
    echo "\$ $*" >>"$OUT/commands.txt"
    local t0=$SECONDS rc=0
    "$@" >"$OUT/runs/$name.log" 2>&1 || rc=$?
    [ "$rc" = 0 ] || { echo "$name: exit $rc"; tail -5 "$OUT/runs/$name.log"; return 0; }
    $PY "$PEER" eval --init "$OUT/runs/$name.safetensors" --heads 4 --data "$VAL" --batch "$B" \
        --seq "$T" --windows "$VAL_WIN" --threads 1 | sed -n 's/^RESULT //p' >"$OUT/runs/$name.val.json"
    echo "$name: $(cat "$OUT/runs/$name.val.json") ($((SECONDS - t0)) s)" | tee -a "$OUT/runs.txt"
}
loom_run() {  # NAME BINARY SEED
    run_cmd "$1" "$2" train --init "$OUT/init_$3.safetensors" --data "$TRAIN" "${OPT[@]}" \
        --shuffle "$SHUFFLE" --seed "$3" --threads 1 --progress off --metrics "$OUT/runs/$1.jsonl" \
        --export "$OUT/runs/$1.safetensors"
}
START=$SECONDS
IFS=',' read -r -a SL <<<"$SEEDS"
for seed in "${SL[@]}"; do
    $PY "$PEER" gen --layers 4 --heads 4 --dim 128 --vocab 256 --block-size "$T" --seed "$seed" \
        --out "$OUT/init_$seed.safetensors"
    has loom && loom_run "loom@$seed" "$LOOM" "$seed"
    has loom_before && loom_run "loom_before@$seed" "$BEFORE" "$seed"
    has torch && run_cmd "torch@$seed" $PY "$PEER" train --init "$OUT/init_$seed.safetensors" \
        --data "$TRAIN" "${OPT[@]}" --rows random --data-seed "$seed" --threads 1 \
        --metrics "$OUT/runs/torch@$seed.jsonl" --export "$OUT/runs/torch@$seed.safetensors"
done
echo "total: $((SECONDS - START)) s" | tee -a "$OUT/machine.txt"

$PY - "$OUT/runs" "$B" "$T" "$STEPS" <<'PY' | tee "$OUT/summary.md"
import json, os, statistics as st, sys
d, B, T, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs = {}
for f in sorted(os.listdir(d)):
    if not f.endswith(".val.json"):
        continue
    name = f[: -len(".val.json")]
    kind, seed = name.split("@")
    losses = [json.loads(l)["loss"] for l in open(f"{d}/{name}.jsonl") if '"loss"' in l]
    val = json.load(open(f"{d}/{f}"))["val_loss"]
    runs.setdefault(kind, []).append((seed, val, st.pstdev(losses[-200:])))
ref = st.mean(v for _, v, _ in runs["torch"]) if "torch" in runs else None
print(f"validation loss of the final models after {steps} steps ({steps * B * T:,} tokens), and the"
      " training-loss noise (std over the last 200 steps)\n")
print("| run | val loss (mean) | per seed | ÷ torch | train-loss std (mean) | per seed |")
print("|---|---|---|---|---|---|")
for kind in ("loom", "loom_before", "torch"):
    if kind not in runs:
        continue
    r = runs[kind]
    vm, nm = st.mean(v for _, v, _ in r), st.mean(n for _, _, n in r)
    print(f"| {kind} | {vm:.4f} | " + " / ".join(f"{v:.4f} (s{s})" for s, v, _ in r) + " | "
          + (f"{vm / ref:.3f}" if ref else "—") + f" | {nm:.4f} | "
          + " / ".join(f"{n:.4f}" for _, _, n in r) + " |")
if "torch" in runs:
    vs = [v for _, v, _ in runs["torch"]]
    print(f"\ntorch seed spread: {min(vs):.4f} .. {max(vs):.4f}")
PY
