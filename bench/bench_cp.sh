#!/usr/bin/env bash
# bench/bench_cp.sh — context parallelism (--cp, ring attention) on one host: peak RSS per rank
# (the largest over the ranks, /usr/bin/time's maximum resident set) against the sequence
# length T at cp 1, 2 and 4, and the longest T that fits a fixed memory per rank (a straight
# line through each cp's measurements: the activations grow linearly in T), then measured there.
#   bench/bench_cp.sh [--t "1024 2048 4096 8192"] [--budget-mib 256] [--out DIR]
# Model: L4 H4 C128, vocabulary 4096, batch 1, two training steps of random tokens; every rank
# one thread.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TS="1024 2048 4096 8192" BUDGET=256 OUT=""
while [ $# -gt 0 ]; do
    case $1 in
        --t) TS=$2; shift 2 ;; --budget-mib) BUDGET=$2; shift 2 ;; --out) OUT=$2; shift 2 ;;
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
    f.write(struct.pack(f"<{n}H", *[r.randrange(4096) for _ in range(n)]))
PY
TMAX=$(for t in $TS; do echo "$t"; done | sort -n | tail -1)
flags="--data $OUT/data.bin --layers 4 --heads 4 --dim 128 --vocab 4096 --block-size $TMAX
       --batch 1 --steps 2 --progress off --peak-gflops 100"
echo "| T | cp 1 | cp 2 | cp 4 |  (peak RSS per rank, MiB; s per step)"
echo "|---|---|---|---|"
for t in $TS; do
    row="| $t |"
    for cp in 1 2 4; do
        log="$OUT/T${t}_cp$cp.log"
        if [ "$cp" = 1 ]; then
            /usr/bin/time -a -o "$log.rss" -f "rss_kib %M" "$ROOT/loom" train $flags --seq "$t" \
                --metrics "$OUT/T${t}_cp$cp.jsonl" > "$log" 2>&1
        else
            $MPI -np "$cp" /usr/bin/time -a -o "$log.rss" -f "rss_kib %M" "$ROOT/loom" train $flags --seq "$t" \
                --cp "$cp" --metrics "$OUT/T${t}_cp$cp.jsonl" > "$log" 2>&1
        fi
        rss=$(grep -o 'rss_kib [0-9]*' "$log.rss" | awk '{if ($2 > m) m = $2} END {printf "%.0f", m / 1024}')
        sec=$(/usr/bin/python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if 'step_ms' in l]; print('%.1f' % (r[-1]['step_ms'] / 1000))" "$OUT/T${t}_cp$cp.jsonl")
        echo "$t $cp $rss" >> "$OUT/rss.txt"
        row="$row $rss ($sec s) |"
    done
    echo "$row"
done
/usr/bin/python3 - "$OUT/rss.txt" "$BUDGET" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if len(l.split()) == 3]
budget = float(sys.argv[2])
for cp in (1, 2, 4):
    pts = [(int(t), float(m)) for t, c, m in rows if int(c) == cp]
    n = len(pts); mt = sum(t for t, _ in pts) / n; mm = sum(m for _, m in pts) / n
    b = sum((t - mt) * (m - mm) for t, m in pts) / sum((t - mt) ** 2 for t, _ in pts)
    a = mm - b * mt
    tmax = int((budget - a) / b) // 1024 * 1024 if b > 0 else 0
    print(f"cp {cp}: peak RSS per rank ~ {a:.0f} MiB + {b * 1024:.1f} MiB per 1024 tokens; "
          f"longest T in {budget:.0f} MiB per rank ~ {tmax} (multiples of 1024)")
    with open(sys.argv[1] + ".fit", "a") as f:
        f.write(f"{cp} {tmax}\n")
PY
while read -r cp t; do # the predicted longest T, measured
    [ "$t" -gt 0 ] || continue
    log="$OUT/fit_T${t}_cp$cp.log"
    if [ "$cp" = 1 ]; then
        /usr/bin/time -a -o "$log.rss" -f "rss_kib %M" "$ROOT/loom" train ${flags/--block-size $TMAX/--block-size $t} \
            --seq "$t" > "$log" 2>&1
    else
        $MPI -np "$cp" /usr/bin/time -a -o "$log.rss" -f "rss_kib %M" "$ROOT/loom" train \
            ${flags/--block-size $TMAX/--block-size $t} --seq "$t" --cp "$cp" > "$log" 2>&1 \
            < /dev/null # mpirun would read the rest of the loop's input
    fi
    rss=$(grep -o 'rss_kib [0-9]*' "$log.rss" | awk '{if ($2 > m) m = $2} END {printf "%.0f", m / 1024}')
    echo "cp $cp at T = $t: measured peak RSS per rank $rss MiB (budget $BUDGET MiB)"
done < "$OUT/rss.txt.fit"
echo "host: $(nproc --all) cores; logs in $OUT"
