#!/usr/bin/env bash
# bench/bench_sp.sh — sequence parallelism (--sp with --tp N) on bench_tp.sh's model: per-rank
# activation memory and what the blocks communicate over tp per layer and micro-batch (from the
# run's summary line), tp 2 and tp 4, with and without --sp.
#   bench/bench_sp.sh [--steps S (1)] [--out DIR]
# Model: L4 H8 C512, GPT-2's vocabulary (50257), batch 4 x seq 256, random tokens (as
# bench_tp.sh). The volumes count whole (B,T,C) tensors (an all-reduce of n floats moves what a
# reduce-scatter of n plus an all-gather of n move); embedding and loss are spread over layers.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS=1 OUT=""
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
num() { grep -o "$2" "$1" | head -1 | grep -o "[0-9][0-9.]*" | head -1 || true; }
run() { # NAME NP FLAGS...
    local name=$1 np=$2; shift 2
    local log="$OUT/${name// /_}.log"
    $MPI -np "$np" "$ROOT/loom" train $flags "$@" > "$log" 2>&1
    local ag rs
    ag=$(num "$log" 'all-gathered [0-9.]*') rs=$(num "$log" 'reduce-scattered [0-9.]*')
    echo "| $name | $(num "$log" 'activations [0-9.]*') | $(num "$log" 'micro-batch [0-9.]*') |" \
        "${ag:-0} | ${rs:-0} | $(num "$log" 'peak RSS [0-9.]*') |"
}
echo "| layout | activations per rank (MiB) | all-reduced per layer (MiB) |" \
    "all-gathered per layer (MiB) | reduce-scattered per layer (MiB) | peak RSS (MiB) |"
echo "|---|---|---|---|---|---|"
run "tp 2" 2 --tp 2
run "tp 2 + sp" 2 --tp 2 --sp
run "tp 4" 4 --tp 4
run "tp 4 + sp" 4 --tp 4 --sp
echo "(B,T,C) = $(/usr/bin/python3 -c 'print(4*256*512*4/1048576)') MiB; logs in $OUT"
