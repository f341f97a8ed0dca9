#!/usr/bin/env bash
# bench/bench_peer_outer.sh — a peer's outer state: what its passes cost, and what an offloaded
# peer holds in memory.
#
#   bench/bench_peer_outer.sh [--parts speed,rss] [--before PATH] [--loom PATH] [--rounds R (3)]
#                             [--fast-mem SIZE (768M) | --in-memory] [--out DIR]
#
# speed: one peer alone in memory (30M: L6 H6 C384 V50257 T256, B4 T128), --tau 1 (an outer
#        step after every step: the Δ, topk compression with error feedback, the swarm's copy,
#        the average, the outer update, the anchor's hash), 16 steps, the median step_ms of
#        steps 3–16; --before PATH alternates that build with --loom round by round, and the
#        losses of the two are compared (the arithmetic must be the same).
# rss:   two GPT-2 124M peers on this host (B2 T128, --tau 2, 4 steps, one thread each), both
#        --offload disk --fast-mem SIZE with their own --offload-dir: each process's peak RSS
#        (/usr/bin/time) against the budget, and what each sent and received; --in-memory: the
#        same two peers without --offload (what a 124M peer of a swarm holds in memory).
# Raw logs in --out.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PARTS="speed,rss" BEFORE="" LOOM="$ROOT/loom" ROUNDS=3 FAST=768M OUT="" INMEM=0
PY=${PY:-/usr/bin/python3}
while [ $# -gt 0 ]; do
    case "$1" in
        --parts) PARTS=$2; shift 2 ;;
        --before) BEFORE=$2; shift 2 ;;
        --loom) LOOM=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --fast-mem) FAST=$2; shift 2 ;;
        --in-memory) INMEM=1; shift ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench_peer_outer.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/bench_peer_outer.XXXXXX)
mkdir -p "$OUT"
export OMP_WAIT_POLICY=PASSIVE
echo "host: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) cores; loom $(git -C "$ROOT" rev-parse --short HEAD); out $OUT"
$PY "$ROOT/tests/torch_gpt.py" tokens --vocab 50257 --n 200000 --seed 1 --out "$OUT/d.bin" >/dev/null 2>&1 ||
    $PY - "$OUT/d.bin" <<'PY'
import random, struct, sys
r = random.Random(1)
open(sys.argv[1], "wb").write(struct.pack("<200000H", *[r.randrange(50257) for _ in range(200000)]))
PY
"$LOOM" keygen -o "$OUT/secret" 2>/dev/null

median_ms() { # the median step_ms of steps 3.. of a metrics file
    $PY -c "import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1]) if '\"step_ms\"' in l]
print(f'{statistics.median(x[\"step_ms\"] for x in r[2:]):.1f}')" "$1"
}
losses() { $PY -c "import json, sys
print(' '.join(str(json.loads(l)['loss']) for l in open(sys.argv[1]) if '\"loss\"' in l))" "$1"; }

if [[ ,$PARTS, == *,speed,* ]]; then
    M="--layers 6 --heads 6 --dim 384 --vocab 50257 --block-size 256 --batch 4 --seq 128"
    builds=(after) && [ -z "$BEFORE" ] || builds=(before after)
    for r in $(seq "$ROUNDS"); do
        for b in "${builds[@]}"; do
            L=$LOOM && [ "$b" = after ] || L=$BEFORE
            "$L" peer --data "$OUT/d.bin" $M --lr 1e-4 --tau 1 --steps 16 --secret "$OUT/secret" \
                --progress off --peer-id a --listen 127.0.0.1:0 --outer-compress topk \
                --metrics "$OUT/speed_${b}_$r.jsonl" > "$OUT/speed_${b}_$r.log" 2>&1
            echo "speed: $b, round $r: median step $(median_ms "$OUT/speed_${b}_$r.jsonl") ms"
        done
        if [ -n "$BEFORE" ]; then
            [ "$(losses "$OUT/speed_before_$r.jsonl")" = "$(losses "$OUT/speed_after_$r.jsonl")" ] &&
                echo "speed: round $r: the two builds' losses are identical" ||
                echo "speed: round $r: THE LOSSES DIFFER"
        fi
    done
fi

if [[ ,$PARTS, == *,rss,* ]]; then
    M="--layers 12 --heads 12 --dim 768 --vocab 50257 --block-size 1024 --batch 2 --seq 128"
    C="--data $OUT/d.bin $M --lr 1e-4 --tau 2 --steps 4 --secret $OUT/secret --progress off
       --peer-timeout 60 --min-peers 2"
    mkdir -p "$OUT/off0" "$OUT/off1"
    off() { [ "$INMEM" = 1 ] || echo "--offload disk --fast-mem $FAST --offload-dir $OUT/off$1"; }
    OMP_NUM_THREADS=1 /usr/bin/time -f "maxrss %M KiB" "$LOOM" peer $C --peer-id p0 \
        --listen 127.0.0.1:0 $(off 0) > "$OUT/p0.log" 2>&1 &
    p0=$!
    a=""
    for _ in $(seq 300); do
        a=$(grep -o "others reach it at [0-9.:]*" "$OUT/p0.log" | awk '{print $5}') || true
        [ -n "$a" ] && break
        sleep 1
    done
    OMP_NUM_THREADS=1 /usr/bin/time -f "maxrss %M KiB" "$LOOM" peer $C --peer-id p1 \
        --listen 127.0.0.1:0 --bootstrap "$a" $(off 1) > "$OUT/p1.log" 2>&1
    wait $p0
    for p in p0 p1; do
        kib=$(grep -o 'maxrss [0-9]*' "$OUT/$p.log" | awk '{print $2}')
        echo "rss: $p peaked at $(awk -v k="$kib" 'BEGIN{printf "%.1f", k / 1024}') MiB ($([ "$INMEM" = 1 ] && echo "in memory" || echo "--fast-mem $FAST"));" \
            "$(grep -o 'sent [0-9.]* MiB, received [0-9.]* MiB' "$OUT/$p.log")"
    done
fi
