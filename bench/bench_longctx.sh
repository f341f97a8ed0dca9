#!/usr/bin/env bash
# bench/bench_longctx.sh — long context: peak RSS per rank against the sequence length T for a
# small model (L2 H4 C128, byte vocabulary, batch 1, one training step), with context
# parallelism cp 1/2/4 (ring attention: a rank holds T/cp tokens), and the longest T that
# trains within a fixed memory per rank (--budget-mib). Attention is blockwise (no (T,T)
# matrix), so memory should grow linearly in T; the (B,NH,T,T) softmax the old kernel stored
# is printed beside it for scale (computed, not run).
#   bench/bench_longctx.sh [--cps "1 2 4"] [--ts "1024 2048 ..."] [--budget-mib 256] [--out DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CPS="1 2 4" TS="1024 2048 4096 8192 16384" BUDGET=256 OUT=""
while [ $# -gt 0 ]; do
    case $1 in
    --cps) CPS=$2; shift 2 ;; --ts) TS=$2; shift 2 ;;
    --budget-mib) BUDGET=$2; shift 2 ;; --out) OUT=$2; shift 2 ;;
    *) echo "?? $1"; exit 2 ;;
    esac
done
OUT=${OUT:-$(mktemp -d)}; mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPI="mpirun --oversubscribe --bind-to none --mca btl self,vader,tcp"
/usr/bin/python3 - "$OUT/data.bin" <<'PY'
import random, struct, sys
r = random.Random(1); n = 200000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *[r.randrange(256) for _ in range(n)]))
PY
L=2 H=4 C=128
echo "| T | cp | peak RSS per rank (MiB, max over ranks) | s/step | old kernel's (T,T) softmax, MiB |"
echo "|---|---|---|---|---|"
declare -A best
for T in $TS; do
    for cp in $CPS; do
        log="$OUT/T${T}_cp$cp.log"
        cmd=("$ROOT/loom" train --data "$OUT/data.bin" --layers $L --heads $H --dim $C --vocab 256
             --block-size "$T" --seq "$T" --batch 1 --steps 2 --progress off --peak-gflops 100
             --metrics "$OUT/T${T}_cp$cp.jsonl")
        [ "$cp" -gt 1 ] && cmd+=(--cp "$cp")
        if ! $MPI -np "$cp" /usr/bin/time -f "rss_kib %M" "${cmd[@]}" > "$log" 2>&1; then
            echo "| $T | $cp | failed (see $log) | | |"; continue
        fi
        rss=$(awk '/^rss_kib/ { if ($2 > m) m = $2 } END { printf "%.0f", m / 1024 }' "$log")
        sps=$(/usr/bin/python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print('%.2f' % (r[-1]['step_ms'] / 1000))" "$OUT/T${T}_cp$cp.jsonl" 2>/dev/null || echo "?")
        old=$(( L * H * T * T * 4 / 1048576 ))
        echo "| $T | $cp | $rss | $sps | $old |"
        [ "$rss" -le "$BUDGET" ] && best[$cp]=$T
    done
done
echo
for cp in $CPS; do echo "cp $cp: longest T within $BUDGET MiB per rank: ${best[$cp]:-none of the tried}"; done
echo "host: $(nproc --all) cores; logs in $OUT"
