#!/usr/bin/env bash
# bench_gpu.sh — training throughput on one GPU, bf16, the same batch and sequence for every
# engine, one after another in one run, of GPT-2 (124m, 350m) or LLaMA-style models (smol135m:
# SmolLM-135M's shape; llama1b: Llama-3.2-1B's; loom --arch llama, no llm.c):
#   loom     $LOOM train --device cuda (bf16; LOOM_DTYPES="bf16 fp32" adds an fp32 row;
#            LOOM_VARIANTS="- LOOM_CUDA_FLASH=0 --recompute-gelu" adds rows with that environment
#            or those loom flags (several: comma-separated, A=1,B=2), - = none;
#            LOOM_BEFORE=path/to/an/older/loom adds its rows, tagged "before", for an A/B in
#            the same run)
#   llm.c    $LLMC (train_gpt2cu built on the same machine: bench/gpu/llmc_build.sh), -e dN
#            random init, its default recompute (GELU), no cuDNN
#   PyTorch  bench/gpu/torch_gpt2.py, eager and torch.compile
# on random tokens in the llm.c/loom shard format (uint32 tokens past a vocabulary of 65536).
#   MODELS="124m 350m" BATCH=16 SEQ=1024 STEPS=30 WARM=10 bench/gpu/bench_gpu.sh
# For each engine: the median step time over the steps after the first WARM, tokens/s, MFU
# against PEAK_TFLOPS (default 989.4: H100 SXM dense bf16, as llm.c counts it) with loom's
# FLOP count for every engine, and the peak GPU memory nvidia-smi saw while it ran (the whole
# device: CUDA context included), and for loom also its own allocator's high-water mark (the
# metrics' device_mem_mib). Raw output goes to $OUT_DIR; the table is printed last.
set -u
cd "$(dirname "$0")/../.."
LOOM=${LOOM:-build-cuda/loom}
LLMC=${LLMC:-}
PY=${PY:-python3}
MODELS=${MODELS:-124m}
BATCH=${BATCH:-16} SEQ=${SEQ:-1024} STEPS=${STEPS:-30} WARM=${WARM:-10}
PEAK_TFLOPS=${PEAK_TFLOPS:-989.4}
ENGINES=${ENGINES:-"loom llmc eager compile"}
LOOM_DTYPES=${LOOM_DTYPES:-bf16}
LOOM_VARIANTS=${LOOM_VARIANTS:--}
LOOM_BEFORE=${LOOM_BEFORE:-}
OUT_DIR=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$OUT_DIR"
results="$OUT_DIR/results.jsonl"
: >"$results"

# 4 Mi random tokens below V (the windows wrap, the content does not matter for speed) in
# llm.c's shard format: uint16 (magic 20240520), or uint32 (20240801, version 7) past 65536
tokens_for() {
    local V=$1 f="$OUT_DIR/tok.bin"
    [ "$V" = 50257 ] || f="$OUT_DIR/tok_$V.bin"
    [ -f "$f" ] || "$PY" - "$f" "$V" <<'PY'
import sys, numpy as np
n, V = 1 << 22, int(sys.argv[2])
wide = V > 65536
hdr = np.zeros(256, np.int32); hdr[:3] = (20240801, 7, n) if wide else (20240520, 1, n)
toks = np.random.default_rng(0).integers(0, V, n).astype(np.uint32 if wide else np.uint16)
with open(sys.argv[1], "wb") as f:
    f.write(hdr.tobytes()); f.write(toks.tobytes())
PY
    echo "$f"
}
tokens_for 50257 >/dev/null # tok.bin: check.sh profiles GPT-2 on it

# peak device memory while "$@" runs (MiB, nvidia-smi polled every 200 ms)
with_mem() {
    local log=$1; shift
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$log.mem" 2>/dev/null &
    local mon=$!
    "$@" >"$log" 2>&1
    local rc=$?
    kill "$mon" 2>/dev/null; wait "$mon" 2>/dev/null
    echo "exit $rc" >>"$log"
    sort -n "$log.mem" | tail -1
}

# L H C, llm.c's depth (0: llm.c has no such model), kv-heads and ffn (0: GPT-2), V
shape_of() {
    case $1 in
    124m) echo "12 12 768 12 0 0 50257" ;;
    350m) echo "24 16 1024 24 0 0 50257" ;;
    smol135m) echo "30 9 576 0 3 1536 49152" ;; # SmolLM-135M's shape (tied embeddings)
    llama1b) echo "16 32 2048 0 8 8192 128256" ;; # Llama-3.2-1B's shape (tied embeddings)
    *) echo "bench_gpu.sh: unknown model $1 (124m 350m smol135m llama1b)" >&2; exit 2 ;;
    esac
}

for model in $MODELS; do
    read -r L H C D KV FF V <<<"$(shape_of "$model")"
    [ -n "${V:-}" ] || exit 2
    tok=$(tokens_for "$V")
    arch= # loom's flags for a LLaMA-style model, as bench/gpu/torch_gpt2.py builds it
    [ "$KV" != 0 ] && arch="--arch llama --kv-heads $KV --ffn-dim $FF --tie-embeddings on --norm-eps 1e-5"
    for e in $ENGINES; do
        case $e in
        loom)
            for bin in "$LOOM" ${LOOM_BEFORE:+"$LOOM_BEFORE"}; do
            for dt in $LOOM_DTYPES; do
                for var in $LOOM_VARIANTS; do
                    [ "$bin" != "$LOOM" ] && [ "$var" != - ] && continue # the older binary: plain
                    tag=$dt$([ "$var" = - ] || echo "+$var")$([ "$bin" = "$LOOM" ] || echo "-before")
                    envv= args= # a variant: VAR=value[,VAR=value] (environment) or --flag[,--flag]
                    case $var in -) ;; --*) args=${var//,/ } ;; *) envv=${var//,/ } ;; esac
                    log="$OUT_DIR/loom_${model}_$tag.log"
                    mem=$(with_mem "$log" env $envv "$bin" train $arch $args --data "$tok" \
                        --layers "$L" --heads "$H" --dim "$C" --vocab "$V" --block-size "$SEQ" \
                        --batch "$BATCH" --seq "$SEQ" --steps $((STEPS + WARM)) --lr 3e-4 \
                        --weight-decay 0.1 --grad-clip 1.0 --device "cuda:$dt" \
                        --peak-gflops "${PEAK_TFLOPS}e3" --progress off \
                        --metrics "$OUT_DIR/loom_${model}_$tag.jsonl")
                    "$PY" - "$OUT_DIR/loom_${model}_$tag.jsonl" "$model" "$tag" "$mem" "$WARM" \
                        >>"$results" <<'PY'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step_ms"' in l][int(sys.argv[5]):] \
    if os.path.exists(sys.argv[1]) else []
if not rows:
    sys.exit(print(json.dumps({"engine": "loom-" + sys.argv[3], "model": sys.argv[2],
                               "error": "no step lines (see its .log)"})))
ms = statistics.median(r["step_ms"] for r in rows)
print(json.dumps({"engine": "loom-" + sys.argv[3], "model": sys.argv[2], "step_ms": round(ms, 2),
                  "tok_s": round(statistics.median(r["tokens_per_s"] for r in rows)),
                  "mfu": statistics.median(r["mfu"] for r in rows), "loss": rows[-1]["loss"],
                  "mem_mib": int(sys.argv[4] or 0),
                  "own_mib": round(rows[-1].get("device_mem_mib", 0))}))
PY
                done
            done
            done
            ;;
        llmc)
            [ -x "$LLMC" ] || { echo "no llm.c binary (LLMC=$LLMC): skipped"; continue; }
            [ "$D" != 0 ] || { echo "llm.c has no $model: skipped"; continue; }
            log="$OUT_DIR/llmc_$model.log"
            mem=$(with_mem "$log" "$LLMC" -i "$OUT_DIR/tok.bin" -j "$OUT_DIR/tok.bin" -e "d$D" \
                -b "$BATCH" -t "$SEQ" -x $((STEPS + WARM)) -v 100000 -s 100000 -m 1 -n 0 -l 3e-4)
            "$PY" - "$log" "$model" "$mem" "$WARM" "$BATCH" "$SEQ" "$PEAK_TFLOPS" "$L" "$C" \
                >>"$results" <<'PY'
import json, re, statistics, sys
log, model, mem, warm, B, T, peak, L, C = sys.argv[1:]
steps = [(float(m.group(1)), float(m.group(2))) for m in
         re.finditer(r"\| ([0-9.]+) ms \| (-?[0-9.]+)% bf16 MFU", open(log).read())][int(warm):]
if not steps:
    sys.exit(print(json.dumps({"engine": "llm.c", "model": model, "error": "no step lines"})))
ms = statistics.median(s[0] for s in steps)
B, T, L, C = int(B), int(T), int(L), int(C)
fl = 6.0 * (L * 12.0 * C * C + 50257 * C) * B * T + 3.0 * (L * 4.0 * T * C) * B * T
print(json.dumps({"engine": "llm.c", "model": model, "step_ms": round(ms, 2),
                  "tok_s": round(B * T / (ms / 1e3)), "mfu": fl / (ms / 1e3) / (float(peak) * 1e12),
                  # llm.c prints -100% where it does not know the GPU's peak
                  "llmc_own_mfu": max(statistics.median(s[1] for s in steps) / 100, 0) or None,
                  "mem_mib": int(mem or 0)}))
PY
            ;;
        eager | compile)
            log="$OUT_DIR/torch_${e}_$model.log"
            mem=$(with_mem "$log" "$PY" bench/gpu/torch_gpt2.py --model "$model" --batch "$BATCH" \
                --seq "$SEQ" --steps "$STEPS" --warmup "$WARM" --mode "$e" \
                --peak-tflops "$PEAK_TFLOPS")
            line=$(grep '^{' "$log" | tail -1)
            if [ -n "$line" ]; then
                "$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); d["mem_mib"]=int(sys.argv[2] or 0); print(json.dumps(d))' \
                    "$line" "$mem" >>"$results"
            else
                echo "{\"engine\": \"pytorch-$e\", \"model\": \"$model\", \"error\": \"see $log\"}" >>"$results"
            fi
            ;;
        esac
        tail -1 "$results"
    done
done

echo
"$PY" - "$results" "$BATCH" "$SEQ" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"| model | engine | B×T | step ms | tokens/s | MFU | peak GPU MiB | loom's own MiB |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    if "error" in r:
        print(f"| {r['model']} | {r['engine']} | | error: {r['error']} | | | | |"); continue
    own = f"{r['own_mib']:,}" if r.get("own_mib") else ""
    print(f"| {r['model']} | {r['engine']} | {sys.argv[2]}×{sys.argv[3]} | {r['step_ms']:.1f} | "
          f"{r['tok_s']:,} | {100 * r['mfu']:.1f}% | {r.get('mem_mib', 0):,} | {own} |")
PY
