#!/usr/bin/env bash
# bench/bench_grid.sh — tokens/s of the 4-rank process grids (dp, tp 1d/2d, sp, cp, pp x tp) at
# one global batch, against one process, and `loom plan`'s choice for the same job against the
# measured best. Model: L4 H8 C512, GPT-2's vocabulary, T 256, global batch 16 sequences (4096
# tokens per optimizer step), micro-batch 4 (grad-accum makes up the rest), random tokens.
# Every rank gets one thread; on a host with fewer cores than ranks the grids share the cores
# (the table says how many), so the ratios measure communication and redundancy, not scaling.
#   bench/bench_grid.sh [--steps S (4)] [--out DIR] [--loom PATH (./loom)]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS=4 OUT="" LOOM="$ROOT/loom"
while [ $# -gt 0 ]; do
    case $1 in --steps) STEPS=$2; shift 2 ;; --out) OUT=$2; shift 2 ;; --loom) LOOM=$2; shift 2 ;; *) echo "?? $1"; exit 2 ;; esac
done
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"
cp "$LOOM" "$OUT/loom" # a private copy: a rebuild during the run cannot change what is timed
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPI="mpirun --oversubscribe --bind-to none --mca btl self,vader,tcp"
/usr/bin/python3 - "$OUT/data.bin" <<'PY'
import random, struct, sys
r = random.Random(1); n = 400000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *[r.randrange(50257) for _ in range(n)]))
PY
model="--layers 4 --heads 8 --dim 512 --vocab 50257 --block-size 256 --seq 256"
flags="--data $OUT/data.bin $model --steps $STEPS --progress off --peak-gflops 100"
declare -A TPS
run() { # NAME NP FLAGS...: the median tokens/s of steps 2..S
    local name=$1 np=$2; shift 2
    $MPI -np "$np" "$OUT/loom" train $flags "$@" --metrics "$OUT/$name.jsonl" \
        > "$OUT/$name.log" 2>&1 || { echo "| $name | $np | failed: see $OUT/$name.log | |"; return; }
    local tps
    tps=$(/usr/bin/python3 -c "import json,sys,statistics as s; r=[json.loads(l) for l in open(sys.argv[1]) if 'tokens_per_s' in l][1:]; print('%.0f' % s.median(x['tokens_per_s'] for x in r))" "$OUT/$name.jsonl")
    TPS[$name]=$tps
    echo "| $name | $np | $tps | $* |"
}
echo "| layout | ranks | tokens/s (median) | flags |"
echo "|---|---|---|---|"
run "1 process" 1 --batch 4 --grad-accum 4
run "dp 4" 4 --dp 4 --batch 4
run "tp 4" 4 --tp 4 --batch 4 --grad-accum 4
run "tp 4 (2d)" 4 --tp 4 --tp-mode 2d --batch 4 --grad-accum 4
run "dp 2 x tp 2" 4 --dp 2 --tp 2 --batch 4 --grad-accum 2
run "dp 2 x tp 2 + sp" 4 --dp 2 --tp 2 --sp --batch 4 --grad-accum 2
run "cp 4" 4 --cp 4 --batch 4 --grad-accum 4
run "dp 2 x cp 2" 4 --dp 2 --cp 2 --batch 4 --grad-accum 2
run "cp 2 x tp 2" 4 --cp 2 --tp 2 --batch 4 --grad-accum 4
run "pp 2 x tp 2" 4 --pp 2 --tp 2 --batch 4 --grad-accum 4
# the planner's choice for the same job (4 ranks on this machine, 8 GiB each)
"$OUT/loom" plan $model --workers 4 --node-size 4 --global-batch 16 --mem-gb 8 \
    --max-micro-batch 4 --top 5 > "$OUT/plan.txt" 2>&1
best=$(grep '^best: loom train' "$OUT/plan.txt" | sed 's/^best: loom train //')
run "planner's choice" 4 $best
echo
sed -n '/^rank/,/^best/p' "$OUT/plan.txt"
top=$(for k in "${!TPS[@]}"; do [ "$k" = "planner's choice" ] || echo "${TPS[$k]} $k"; done | sort -rn | head -1)
echo "measured best of the grids: ${top#* } (${top%% *} tokens/s); planner's choice: $best" \
     "(${TPS["planner's choice"]:-?} tokens/s)"
echo "host: $(nproc --all) cores; logs in $OUT"
