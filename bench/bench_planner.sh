#!/usr/bin/env bash
# bench_planner.sh — the planner's predictions against measurements on this machine.
# Profiles a model once (1 thread per rank), asks `loom plan` for every plan at 1, 2 and 4
# ranks (global batch 8, this machine's 2 cores shared by the ranks, loopback), runs a spread of
# them with mpirun and compares predicted and measured tokens/s (median step, first 2 dropped).
# Usage: bench/bench_planner.sh [--steps N] [--bandwidth-gbps B]  (prints a markdown table)
set -eu
cd "$(dirname "$0")/.."
steps=8 bw=20
while [ $# -gt 0 ]; do case $1 in --steps) steps=$2; shift 2;; --bandwidth-gbps) bw=$2; shift 2;; *) echo "unknown $1"; exit 2;; esac; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cp ./loom "$d/loom"
model="--layers 4 --heads 4 --dim 128 --vocab 50257 --block-size 128"
/usr/bin/python3 ../shared/peer/torch_gpt.py tokens --vocab 50257 --n 400000 --out "$d/tok.bin"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(getconf _NPROCESSORS_ONLN) cores; $(date -u +%F); loom $(git rev-parse --short HEAD)"
echo "model: L4 H4 C128 V50257 T128; global batch 8 sequences; planner: --cores $(getconf _NPROCESSORS_ONLN) --bandwidth-gbps $bw"
"$d/loom" plan $model --seq 128 --threads 1 --max-micro-batch 8 --workers 1 --global-batch 8 \
    --save-profile "$d/prof.json" > /dev/null 2>&1
for w in 1 2 4; do
    "$d/loom" plan --profile "$d/prof.json" --workers $w --global-batch 8 --cores "$(getconf _NPROCESSORS_ONLN)" \
        --bandwidth-gbps "$bw" --top 100 --json "$d/plans$w.json" > /dev/null
done
# a spread of plans: per worker count the predicted best, plus other shapes
/usr/bin/python3 - "$d" > "$d/pick.txt" <<'PY'
import json, sys
d = sys.argv[1]
picked = []
for w in (1, 2, 4):
    plans = json.load(open(f"{d}/plans{w}.json"))
    seen = set()
    for p in plans:
        key = (p["w"], p["d"])
        if key in seen and len(picked) >= 2 * w:
            continue
        seen.add(key)
        picked.append((w, p))
        if sum(1 for x in picked if x[0] == w) >= (2 if w == 1 else 3):
            break
for w, p in picked:
    print(w, p["w"], p["d"], p["micro_batch"], p["grad_accum"], int(p["recompute"]), p["stage_layers"], p["tokens_per_s"])
PY
echo
echo "| ranks | dp | pp | micro-batch | K | recompute | predicted tok/s | measured tok/s | error |"
echo "|---|---|---|---|---|---|---|---|---|"
best_pred="" best_meas=""
while read -r n w dd b k rc sl pred; do
    flags="--dp $w --pp $dd --batch $b --grad-accum $k --steps $steps --progress off --threads 1"
    [ "$dd" -gt 1 ] && flags="$flags --schedule 2bw --stage-layers $sl"
    [ "$rc" = 1 ] && flags="$flags --recompute"
    mpirun -np "$n" --oversubscribe --bind-to none "$d/loom" train $model --seq 128 --data "$d/tok.bin" \
        $flags --metrics "$d/m.jsonl" < /dev/null > /dev/null 2>&1
    meas=$(/usr/bin/python3 -c "
import json, statistics
r = [json.loads(l) for l in open('$d/m.jsonl') if 'step_ms' in l][2:]
print(round(statistics.median(x['tokens_per_s'] for x in r), 1))")
    err=$(/usr/bin/python3 -c "print(f'{100 * ($pred - $meas) / $meas:+.0f}%')")
    echo "| $n | $w | $dd | $b | $k | $rc | $pred | $meas | $err |"
done < "$d/pick.txt"
