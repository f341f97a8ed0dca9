#!/usr/bin/env bash
# bench/bench_tp.sh — tensor parallelism (--tp: Megatron 1D, and 2D SUMMA) on one host: per-rank
# memory (parameters, activations, peak RSS) and what the blocks all-reduce per layer against the
# 1D cost table, at tp 1/2/4, and tokens/s of the 4-rank grids dp 4, dp 2 x tp 2, tp 4 and tp 4 in
# 2d (its line: what the SUMMA collectives move per layer against its table).
#   bench/bench_tp.sh [--steps S (8)] [--out DIR]
# Model: L4 H8 C512, GPT-2's vocabulary (50257: padded to 50304 / 50432 under tp 2 / 4), batch 4
# x seq 256, random tokens. Every rank gets one thread; on a host with fewer cores than ranks
# the 4-rank grids share the cores, which the table says.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS=8 OUT=""
while [ $# -gt 0 ]; do
    case $1 in --steps) STEPS=$2; shift 2 ;; --out) OUT=$2; shift 2 ;; *) echo "?? $1"; exit 2 ;; esac
done
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPI="mpirun --oversubscribe --bind-to none --mca btl self,vader,tcp"
/usr/bin/python3 - "$OUT/data.bin" <<'PY'
import random, struct, sys
r = random.Random(1); n = 400000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *[r.randrange(50257) for _ in range(n)]))
PY
flags="--data $OUT/data.bin --layers 4 --heads 8 --dim 512 --vocab 50257 --block-size 256
       --batch 4 --seq 256 --steps $STEPS --progress off --peak-gflops 100"
run() { # NAME NP FLAGS...
    local name=$1 np=$2; shift 2
    $MPI -np "$np" "$ROOT/loom" train $flags "$@" --metrics "$OUT/$name.jsonl" \
        > "$OUT/$name.log" 2>&1
    local tps
    tps=$(/usr/bin/python3 -c "import json,sys,statistics as s; r=[json.loads(l) for l in open(sys.argv[1])][2:]; print('%.0f' % s.median(x['tokens_per_s'] for x in r))" "$OUT/$name.jsonl")
    echo "| $name | $np | $tps | $(grep -o 'per rank:.*' "$OUT/$name.log" | head -1) |"
}
echo "| layout | ranks | tokens/s (median) | per rank |"
echo "|---|---|---|---|"
run "1 process" 1
run "tp 2" 2 --tp 2
run "tp 4" 4 --tp 4
run "dp 4" 4 --dp 4
run "dp 2 x tp 2" 4 --dp 2 --tp 2
run "tp 4 (2d)" 4 --tp 4 --tp-mode 2d
echo "host: $(nproc --all) cores; logs in $OUT"
