#!/usr/bin/env bash
# bench/bench_peer_exchange.sh — bytes a `loom peer` sends per round with --peer-exchange all
# against sharded (and each --outer-compress), N peers on loopback, a small model.
#
#   bench/bench_peer_exchange.sh [--peers "3 8"] [--compress "none int8"] [--rounds R (8)]
#                                [--tau T (2)] [--loom PATH] [--out DIR]
#
# Model L4 H4 C128 V256 T64, batch 2 x seq 32 (P = 0.83M floats, a 3.2 MiB fp32 Δ), random
# tokens, R rounds of T steps, --min-peers N, one thread per peer. For each N, compression and
# exchange: every peer's summary line gives the bytes it sent over the whole run (Δs, parts,
# sums, gossip, reports, the final lingering); the table prints the median over the peers of
# that / R, against the formulas
# all: (N−1)·Δ, sharded: (N−1)/N·(Δ + 4P) (Δ: the bytes of one Δ as --outer-compress sends it:
# 4P, int8 P + 4⌈P/4096⌉, topk at the default --topk-frac 0.02 about 5⌈0.02·P⌉; with topk the sums
# travel as gaps and values, at most (N−1)·Δ when the members' supports do not overlap).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PEERS="3 8"; COMPRESS="none"; ROUNDS=8; TAU=2; LOOM="$ROOT/loom"; OUT=$(mktemp -d)
while [ $# -gt 0 ]; do
    case $1 in
        --peers) PEERS=$2; shift 2 ;;
        --compress) COMPRESS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --tau) TAU=$2; shift 2 ;;
        --loom) LOOM=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
mkdir -p "$OUT"
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done' EXIT
python3 - "$OUT/d.bin" <<'PY'
import random, struct, sys
n, r = 400000, random.Random(1)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *[r.randrange(256) for _ in range(n)]))
PY
[ -f "$OUT/secret" ] || "$LOOM" keygen -o "$OUT/secret" 2>/dev/null
model="--layers 4 --heads 4 --dim 128 --vocab 256 --block-size 64 --batch 2 --seq 32"
export OMP_NUM_THREADS=1
echo "| peers | --outer-compress | --peer-exchange | MiB sent per peer per round (median) | formula | host |"
echo "|---|---|---|---|---|---|"
for n in $PEERS; do
    for cq in $COMPRESS; do
        for ex in all sharded; do
            tag=$n-$cq-$ex boot= started=()
            for i in $(seq 0 $((n - 1))); do
                log="$OUT/$tag-$i.log"
                "$LOOM" peer --data "$OUT/d.bin" $model --tau $TAU --steps $((ROUNDS * TAU)) \
                    --peer-id "p$i" --listen 127.0.0.1:0 ${boot:+--bootstrap $boot} \
                    --secret "$OUT/secret" --min-peers $n --progress off --outer-compress $cq \
                    --peer-exchange $ex --metrics "$OUT/$tag-$i.jsonl" > "$log" 2>&1 &
                pids+=($!) started+=($!)
                if [ $i = 0 ]; then
                    for _ in $(seq 600); do
                        boot=$(sed -n 's/^loom peer .*: others reach it at //p' "$log" 2>/dev/null || true)
                        [ -n "$boot" ] && break
                        sleep 0.1
                    done
                fi
            done
            for p in "${started[@]}"; do wait "$p"; done
            python3 - "$OUT" "$tag" "$n" "$cq" "$ex" "$ROUNDS" <<'PY'
import socket, statistics, sys
out, tag, n, cq, ex, R = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
import re
per = []
for i in range(n):
    m = re.search(r"\| sent ([0-9.]+) MiB", open(f"{out}/{tag}-{i}.log").read())
    per.append(float(m.group(1)) / R)
P = 4 * (12 * 128 * 128 + 13 * 128) + 256 * 128 + 64 * 128 + 2 * 128
import math
delta = {"none": 4 * P, "int8": P + 4 * ((P + 4095) // 4096), "topk": 5 * math.ceil(0.02 * P)}[cq]
f = (n - 1) * delta if ex == "all" else (n - 1) / n * (delta + 4 * P)
le = ""
if cq == "topk" and ex == "sharded":  # sums sent as pairs: at most the union of the supports
    f, le = (n - 1) / n * delta + (n - 1) * delta, "≤ "
print(f"| {n} | {cq} | {ex} | {statistics.median(per):.2f} | {le}{f / 2**20:.2f} | {socket.gethostname()} |")
PY
        done
    done
done
