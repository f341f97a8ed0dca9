#!/usr/bin/env bash
# bench_offload.sh — issue "ATOM on the GPU"'s benchmark: a GPT of about 2.7B parameters
# (L32 C2560 H32 V50257, 43 GB of fp32 state) on one GPU, three ways, in one run:
#   loom-inmem      loom train --device cuda, everything in GPU memory (the reference)
#   loom-host       loom train --device cuda --offload host --fast-mem $BUDGET: the state in
#                   page-locked host memory, units swapped on the copy stream; also the planner's
#                   predicted step time (its start-up line) against the measured one
#   fsdp-offload    bench/gpu/torch_fsdp_offload.py: PyTorch FSDP with CPU offload on one GPU,
#                   its memory capped at the same budget
#   loom-hostdisk   (not in the default ENGINES) --offload host --offload-dir $DISK_DIR
#                   --host-mem $HOST_MEM --fast-mem $BUDGET: device <- host <- disk, for a host
#                   whose memory does not hold the state (default: half of it in host memory)
# bf16 products with fp32 master weights everywhere, B=$BATCH x K=$ACCUM sequences of $SEQ per
# step, clipping off for loom (AdamW fused into each unit's backward: clipping would need the
# whole gradient first). Medians over the steps after the first $WARM; tokens/s and the ratios
# loom-host / loom-inmem (target >= 0.70) and loom-host / fsdp-offload (target >= 1.5) go to
# $OUT_DIR/offload.md; every log beside it.
#   OUT_DIR=out LAYERS=32 DIM=2560 HEADS=32 BUDGET=24G bench/gpu/bench_offload.sh
# Smaller shapes for a first look: LAYERS=24 DIM=2048 HEADS=16 (1.3B). DEVICE=emu with a tiny
# shape and ENGINES="loom-inmem loom-host" checks the script without a GPU.
set -u
cd "$(dirname "$0")/../.."
LOOM=${LOOM:-$PWD/build-cuda/loom}
PY=${PY:-python3}
OUT_DIR=${OUT_DIR:-$(mktemp -d)}
LAYERS=${LAYERS:-32} DIM=${DIM:-2560} HEADS=${HEADS:-32} V=${VOCAB:-50257}
BATCH=${BATCH:-8} ACCUM=${ACCUM:-8} SEQ=${SEQ:-1024} STEPS=${STEPS:-3} WARM=${WARM:-1}
BUDGET=${BUDGET:-24G} ENGINES=${ENGINES:-"loom-inmem loom-host fsdp-offload"}
DISK_DIR=${DISK_DIR:-$OUT_DIR/scratch}
mkdir -p "$OUT_DIR"
tok="$OUT_DIR/tok.bin"
[ -f "$tok" ] || "$PY" - "$tok" "$V" <<'PY'
import array, random, sys  # llm.c's token file: a 256-int header, then uint16 tokens
n, V = 1 << 22, int(sys.argv[2])
hdr = array.array("i", [20240520, 1, n] + [0] * 253)
rng = random.Random(0)
toks = array.array("H", (rng.randrange(V) for _ in range(n)))
with open(sys.argv[1], "wb") as f:
    hdr.tofile(f); toks.tofile(f)
PY
budget_gib=$(awk -v b="$BUDGET" 'BEGIN { n = b + 0; u = substr(b, length(b));
    print (u == "G" ? n : u == "M" ? n / 1024 : n / 2^30) }')
results="$OUT_DIR/results.jsonl"
: >"$results"
loom_row() { # NAME ARGS...: a loom run and its row
    local name=$1; shift
    timeout "${TIMEOUT:-900}" "$LOOM" train --data "$tok" --layers "$LAYERS" --heads "$HEADS" \
        --dim "$DIM" --vocab "$V" --block-size "$SEQ" --batch "$BATCH" --grad-accum "$ACCUM" \
        --seq "$SEQ" --steps $((STEPS + WARM)) --lr 3e-4 --weight-decay 0.1 --grad-clip 0 \
        --device "${DEVICE:-cuda}" --progress off --metrics "$OUT_DIR/$name.jsonl" "$@" \
        >"$OUT_DIR/$name.log" 2>&1
    echo "exit $?" >>"$OUT_DIR/$name.log"
    "$PY" - "$OUT_DIR/$name.jsonl" "$OUT_DIR/$name.log" "$name" "$WARM" >>"$results" <<'PY'
import json, os, re, statistics, sys
path, log, name, warm = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rows = [json.loads(l) for l in open(path) if '"step_ms"' in l][warm:] if os.path.exists(path) else []
if not rows:
    sys.exit(print(json.dumps({"engine": name, "error": "no step lines (see its .log)"})))
text = open(log).read()
pred = re.search(r"predicted ([0-9.]+) s per step", text)
mem = re.findall(r"peak device memory ([0-9.]+) MiB", text)
ms = statistics.median(r["step_ms"] for r in rows)
print(json.dumps({"engine": name, "step_s": round(ms / 1e3, 3),
                  "tok_s": round(statistics.median(r["tokens_per_s"] for r in rows)),
                  "predicted_s": float(pred.group(1)) if pred else None,
                  "device_mib": float(mem[-1]) if mem else None}))
PY
}
for e in $ENGINES; do
    echo "[$(date +%T)] $e"
    case $e in
    loom-inmem) loom_row loom-inmem ;;
    loom-host) loom_row loom-host --offload host --fast-mem "$BUDGET" ;;
    loom-hostdisk) # HOST_MEM default: half the fp32 state (16 bytes a parameter)
        mkdir -p "$DISK_DIR"
        half=$(awk -v L="$LAYERS" -v C="$DIM" -v V="$V" 'BEGIN {
            printf "%dM", (L * 12 * C * C + V * C) * 16 / 2 / 1048576 }')
        loom_row loom-hostdisk --offload host --offload-dir "$DISK_DIR" \
            --host-mem "${HOST_MEM:-$half}" --fast-mem "$BUDGET"
        ;;
    fsdp-offload)
        timeout "${TIMEOUT:-900}" "$PY" bench/gpu/torch_fsdp_offload.py --layers "$LAYERS" \
            --heads "$HEADS" --dim "$DIM" --vocab "$V" --batch "$BATCH" --grad-accum "$ACCUM" \
            --seq "$SEQ" --steps "$STEPS" --warmup "$WARM" --budget-gib "$budget_gib" \
            >"$OUT_DIR/fsdp-offload.log" 2>&1
        grep '^{' "$OUT_DIR/fsdp-offload.log" | tail -1 | "$PY" -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l); r["engine"] = "fsdp-offload"; print(json.dumps(r))' >>"$results" ||
            echo '{"engine": "fsdp-offload", "error": "no result (see its .log)"}' >>"$results"
        ;;
    *) echo "unknown engine $e" >&2 ;;
    esac
done
"$PY" - "$results" "$LAYERS" "$DIM" "$BATCH" "$ACCUM" "$SEQ" "$BUDGET" "$V" >"$OUT_DIR/offload.md" <<'PY'
import json, sys
rows = {r["engine"]: r for r in map(json.loads, open(sys.argv[1]))}
L, C, B, K, T, budget, V = sys.argv[2:9]
P = int(L) * 12 * int(C) ** 2 + int(V) * int(C) + int(T) * int(C)
print(f"GPT L{L} C{C} ({P / 1e9:.2f}B parameters), B{B} x K{K} x T{T} per step, budget {budget}\n")
print("| engine | s/step | tokens/s | planner's prediction | device MiB (loom's own) |")
print("|---|---|---|---|---|")
for name, r in rows.items():
    if "error" in r:
        print(f"| {name} | {r['error']} | | | |")
        continue
    print(f"| {name} | {r.get('step_s')} | {r.get('tok_s'):,} | {r.get('predicted_s') or ''} | "
          f"{r.get('device_mib') or ''} |")
h, m, f = (rows.get(k, {}) for k in ("loom-host", "loom-inmem", "fsdp-offload"))
d = rows.get("loom-hostdisk", {})
if d.get("tok_s") and m.get("tok_s"):
    print(f"\nloom-hostdisk / loom-inmem: {d['tok_s'] / m['tok_s']:.2f}")
if h.get("tok_s") and m.get("tok_s"):
    print(f"\nloom-host / loom-inmem: {h['tok_s'] / m['tok_s']:.2f} (target >= 0.70)")
if h.get("tok_s") and f.get("tok_s"):
    print(f"loom-host / fsdp-offload: {h['tok_s'] / f['tok_s']:.2f} (target >= 1.5)")
if h.get("predicted_s") and h.get("step_s"):
    print(f"planner: predicted {h['predicted_s']} s, measured {h['step_s']} s "
          f"({100 * (h['step_s'] / h['predicted_s'] - 1):+.0f}%; target within 15%)")
PY
cat "$OUT_DIR/offload.md"
