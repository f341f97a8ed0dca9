#!/usr/bin/env bash
# bench/peer_2bw_rule.sh — is a convergence gap between 2BW and 1F1B loom's, or the delayed-update
# rule's? Runs the PyTorch peer (tests/torch_gpt.py train) on the bundled corpus with
# and without PipeDream-2BW's rule W(t+1) = W(t) − opt(∇f(W(t−1))), at each learning rate, and
# prints the mean training loss per 100 steps. No loom code is involved.
#
#   bench/peer_2bw_rule.sh [--lrs 1e-3,3e-4] [--steps 400] [--threads 2] [--out DIR]
#
# Model L4 H4 C128 V256 T128 (the convergence.sh model), batch 16 x 128 tokens per step (the
# convergence.sh token budget per step), AdamW (weight decay 0.1, clip 1.0), constant lr.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LRS=1e-3,3e-4; STEPS=400; THREADS=2; OUT=""; PY=/usr/bin/python3
while [ $# -gt 0 ]; do
    case "$1" in
        --lrs) LRS="$2"; shift 2 ;;
        --steps) STEPS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "peer_2bw_rule.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
PEER="$ROOT/tests/torch_gpt.py"
[ -f "$PEER" ] || { echo "peer_2bw_rule.sh: no PyTorch peer at $PEER" >&2; exit 2; }
OUT=${OUT:-$(mktemp -d /tmp/peer2bw.XXXXXX)}
mkdir -p "$OUT"
[ -x "$ROOT/loom" ] || { echo "peer_2bw_rule.sh: run 'make' first (loom prepares the corpus)" >&2; exit 2; }
mapfile -t FILES < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
[ "${#FILES[@]}" -gt 0 ] || { echo "peer_2bw_rule.sh: no fortunes corpus (apt-get install fortunes)" >&2; exit 2; }
"$ROOT/loom" prepare --tokenizer byte --out "$OUT/fortunes" "${FILES[@]}" >/dev/null 2>&1 ||
    { echo "peer_2bw_rule.sh: loom prepare failed" >&2; exit 1; }
"$PY" "$PEER" gen --layers 4 --heads 4 --dim 128 --vocab 256 --block-size 128 --seed 1 --out "$OUT/w.safetensors" >/dev/null
echo "date: $(date -u +%FT%TZ); cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1); torch threads $THREADS"
IFS=',' read -r -a LRL <<<"$LRS"
for lr in "${LRL[@]}"; do
    for mode in plain 2bw; do
        OMP_NUM_THREADS=$THREADS "$PY" "$PEER" train --init "$OUT/w.safetensors" --heads 4 \
            --data "$OUT"/fortunes/train_*.bin --batch 16 --seq 128 --steps "$STEPS" --lr "$lr" \
            --weight-decay 0.1 --grad-clip 1.0 --mode "$mode" --threads "$THREADS" \
            --metrics "$OUT/${mode}_$lr.jsonl" >/dev/null
    done
done
"$PY" - "$OUT" "$LRS" <<'PY'
import json, sys
out, lrs = sys.argv[1], sys.argv[2].split(",")
print("| lr | rule | mean training loss per 100 steps | last 100: 2bw ÷ plain |")
print("|---|---|---|---|")
for lr in lrs:
    last = {}
    for mode in ("plain", "2bw"):
        l = [json.loads(x)["loss"] for x in open(f"{out}/{mode}_{lr}.jsonl")]
        means = [sum(l[i:i + 100]) / len(l[i:i + 100]) for i in range(0, len(l), 100)]
        last[mode] = means[-1]
        ratio = f"{last['2bw'] / last['plain']:.3f}" if mode == "2bw" else ""
        print(f"| {lr} | {mode} | " + ", ".join(f"{m:.3f}" for m in means) + f" | {ratio} |")
PY
