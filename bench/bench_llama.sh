#!/usr/bin/env bash
# bench/bench_llama.sh — `loom train --arch llama` against the project's PyTorch LLaMA reference
# (bench/torch_llama_bench.py over tests/torch_llama.py) on this CPU: same shapes, same threads,
# fp32, tied embeddings, AdamW; the engines alternate within each round (the order rotates every
# round).
#
#   bench/bench_llama.sh [--model smollm|tiny] [--rounds R (3)] [--steps S (6)] [--threads N (2)]
#                        [--batch B] [--loom PATH] [--out DIR] [--bf16]
#
# --bf16: also loom --dtype bf16 against the peer under torch.autocast("cpu", bfloat16) (a CPU
# with AVX512-BF16 or AMX), all four rotating within each round; bf16 MFU is against loom's
# bf16 peak (its metrics), each engine compared with the peer in the same precision.
#
# smollm: SmolLM-135M's shape (L30 C576 H9 kv-heads 3 ffn 1536 V49152 T512, tied: 134.5M
# parameters), batch 1; tiny: L2 C64 H4 kv 2 ffn 128 V512 T64 (a smoke test of the script).
# Per run: the median step time after 2 warm-up steps (loom: its --metrics step_ms; the peer: its
# RESULT line), peak RSS (/usr/bin/time -f %M), and the CPU share other processes took meanwhile
# ("foreign": busy jiffies minus the run's own, over wall x nproc). loom's MFU is its own metric
# (FLOPs of its block over the probe's measured fp32 peak); the peer's MFU is loom's scaled by the
# step-time ratio (same FLOPs per step). Prints a markdown table; raw files stay in --out.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL=smollm; ROUNDS=3; STEPS=6; THREADS=2; BATCH=""; LOOM="$ROOT/loom"; OUT=""; PY=/usr/bin/python3
BF16=0
usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --model) MODEL="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --steps) STEPS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --batch) BATCH="$2"; shift 2 ;;
        --loom) LOOM="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --bf16) BF16=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "bench_llama.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$MODEL" in
    smollm) read -r L C H KV F V T B <<<"30 576 9 3 1536 49152 512 1" ;;
    tiny) read -r L C H KV F V T B <<<"2 64 4 2 128 512 64 2" ;;
    *) echo "bench_llama.sh: --model smollm|tiny" >&2; exit 2 ;;
esac
[ -n "$BATCH" ] && B=$BATCH
[ "$STEPS" -ge 4 ] || { echo "bench_llama.sh: --steps must be >= 4 (2 warm-up + >= 2 timed)" >&2; exit 2; }
[ -x "$LOOM" ] || { echo "bench_llama.sh: no loom binary at $LOOM (run 'make')" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench_llama.sh: /usr/bin/time missing (apt-get install time)" >&2; exit 2; }
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/loom-bench-llama.XXXXXX)"
mkdir -p "$OUT"
cp "$LOOM" "$OUT/loom"; BIN="$OUT/loom"
ENVV=(OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS")
HZ=$(getconf CLK_TCK); NPROC=$(nproc)
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $NPROC cores, avx512f: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no)"
    echo "loadavg_start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "loom_git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    echo "torch: $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')"
    echo "model: $MODEL = L$L C$C H$H kv-heads $KV ffn $F V$V T$T B$B, tied; threads $THREADS; rounds $ROUNDS x $STEPS steps"
} | tee "$OUT/machine.txt"

DATA="$OUT/tokens.bin"
$PY "$ROOT/tests/torch_gpt.py" tokens --vocab "$V" --n $((STEPS * B * T + 4096)) --seed 1 --out "$DATA" >/dev/null
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9; exit}' /proc/stat; }

run() { # TAG CMD... — one timed run; appends {tag, ms, rss, foreign, mfu} to results.jsonl
    local tag=$1; shift
    echo "\$ ${ENVV[*]} $*" >>"$OUT/commands.txt"
    local b0 t0 b1 t1
    b0=$(busy); t0=$(date +%s.%N)
    env "${ENVV[@]}" /usr/bin/time -f "%M %U %S" -o "$OUT/$tag.time" "$@" >"$OUT/$tag.log" 2>&1 ||
        { echo "FAILED: $tag (see $OUT/$tag.log)"; tail -5 "$OUT/$tag.log"; exit 1; }
    b1=$(busy); t1=$(date +%s.%N)
    $PY - "$OUT" "$tag" "$b0" "$b1" "$t0" "$t1" "$HZ" "$NPROC" <<'PY' | tee -a "$OUT/results.jsonl"
import json, statistics, sys
out, tag, b0, b1, t0, t1, hz, n = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
rss_kib, u, s = open(f"{out}/{tag}.time").read().split()[-3:]
foreign = max(0.0, ((b1 - b0) / hz - float(u) - float(s)) / ((t1 - t0) * n))
r = {"tag": tag, "rss_mib": round(int(rss_kib) / 1024, 1), "foreign": round(foreign, 3)}
if tag.startswith("loom"):
    rows = [json.loads(x) for x in open(f"{out}/{tag}.jsonl") if '"step_ms"' in x]
    r["ms"] = statistics.median(j["step_ms"] for j in rows[2:])
    r["mfu"] = statistics.median(j["mfu"] for j in rows[2:] if "mfu" in j)
else:
    res = [json.loads(x[7:]) for x in open(f"{out}/{tag}.log") if x.startswith("RESULT ")][-1]
    r["ms"], r["params"] = res["median_ms"], res["params"]
print(json.dumps(r))
PY
}

ENGINES=(loom torch); [ "$BF16" = 1 ] && ENGINES+=(loom_bf16 torch_bf16)
NE=${#ENGINES[@]}
for ((r = 1; r <= ROUNDS; r++)); do
    for ((k = 0; k < NE; k++)); do # the order rotates every round
        e=${ENGINES[$(((k + r - 1) % NE))]}
        echo "== round $r/$ROUNDS $e"
        case "$e" in
        loom*)
            extra=(); [ "$e" = loom_bf16 ] && extra=(--dtype bf16)
            run "${e}_r$r" "$BIN" train --arch llama --data "$DATA" --vocab "$V" --layers "$L" --heads "$H" \
                --kv-heads "$KV" --dim "$C" --ffn-dim "$F" --tie-embeddings on --block-size "$T" --seq "$T" \
                --batch "$B" --steps "$STEPS" --threads "$THREADS" --progress off --metrics "$OUT/${e}_r$r.jsonl" \
                "${extra[@]}" ;;
        *)
            ac=none; [ "$e" = torch_bf16 ] && ac=bf16
            run "${e}_r$r" "$PY" "$ROOT/bench/torch_llama_bench.py" --layers "$L" --heads "$H" --kv-heads "$KV" \
                --dim "$C" --ffn-dim "$F" --vocab "$V" --seq "$T" --batch "$B" --steps "$STEPS" \
                --threads "$THREADS" --tie-embeddings --autocast "$ac" ;;
        esac
    done
done
echo "loadavg_end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
$PY - "$OUT" "$B" "$T" <<'PY' | tee "$OUT/summary.md"
import json, statistics, sys
out, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rs = [json.loads(x) for x in open(f"{out}/results.jsonl")]
med = statistics.median
print("| engine | ms/step (median of rounds; each round's) | tokens/s | peak RSS MiB | MFU | foreign CPU |")
print("|---|---|---|---|---|---|")
lines = []
for prec, lname, tname in (("", "loom", "PyTorch reference"),
                           ("_bf16", "loom --dtype bf16", "PyTorch reference, autocast bf16")):
    lo = [r for r in rs if r["tag"].rsplit("_r", 1)[0] == "loom" + prec]
    to = [r for r in rs if r["tag"].rsplit("_r", 1)[0] == "torch" + prec]
    if not lo or not to:
        continue
    lms, tms = med(r["ms"] for r in lo), med(r["ms"] for r in to)
    mfu = med(r["mfu"] for r in lo)
    for name, runs, ms, m in ((lname, lo, lms, mfu), (tname, to, tms, mfu * lms / tms)):
        each = ", ".join(f"{r['ms']:.0f}" for r in runs)
        print(f"| {name} | **{ms:,.0f}** ({each}) | {B * T / ms * 1000:,.0f} | {med(r['rss_mib'] for r in runs):,.0f} "
              f"| {100 * m:.1f}%{' of bf16' if prec else ''} | {max(r['foreign'] for r in runs):.2f} max |")
    lines.append(f"{lname} / {tname}: **{tms / lms:.2f}x**")
print()
params = next((r["params"] for r in rs if "params" in r), 0)
print("; ".join(lines) + f"; parameters {params:,}")
PY
echo "raw results: $OUT"
