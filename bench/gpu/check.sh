#!/usr/bin/env bash
# check.sh — one GPU window's checks and measurements in one command, sized to a few minutes:
#   1. the GPU suite (tests/gpu/run.sh) on the CUDA build in $LOOM_BUILD (default build-cuda,
#      built beforehand with `make CUDA=1 CUDA_ARCHS=90 BUILD=build-cuda ... gpu-tests`), NCCL
#      found for it where the loader does not (LOOM_NCCL: PyTorch's copy);
#   2. bench_gpu.sh: loom (and LOOM_VARIANTS, and LOOM_BEFORE's older binary when given),
#      llm.c's train_gpt2cu (LLMC, when given) and PyTorch (ENGINES) on MODELS;
#   3. LOOM_CUDA_PROFILE=1 on the first model when it is GPT-2: device time per op kind;
#   4. with OFFLOAD=1, bench_offload.sh (--offload host against in memory and FSDP offload).
# Everything goes to $RESULTS (default: a new temporary folder), and into one archive when
# ARCHIVE=path.tgz is given; each part's summary is printed, the benchmark's table last.
#   RESULTS=out MODELS=124m LLMC=path/train_gpt2cu LOOM_BEFORE=path/loom bench/gpu/check.sh
# LOOM_VARIANTS=prepared: the plain build and each path docs/CUDA.md lists as prepared, not yet
# measured ("Prepared, not yet run on a GPU"), as a variant of its own.
set -u
cd "$(dirname "$0")/../.."
RESULTS=${RESULTS:-$(mktemp -d)}
mkdir -p "$RESULTS"
export LOOM_BUILD=${LOOM_BUILD:-build-cuda}
export LOOM=${LOOM:-$PWD/$LOOM_BUILD/loom}
MODELS=${MODELS:-124m}
start=$(date +%s)
stamp() { echo "[$(($(date +%s) - start)) s] $*"; }

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv \
    >"$RESULTS/gpu.txt" 2>&1
cat "$RESULTS/gpu.txt"
[ -n "${LLMC:-}" ] && [ -d /usr/local/cuda/lib64 ] &&
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# NCCL for --device-comm (tests/gpu/test_cuda_nccl.c): the toolkit's, else PyTorch's own copy
if [ -z "${LOOM_NCCL:-}" ] && ! ldconfig -p 2>/dev/null | grep -q libnccl.so.2 &&
    [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ]; then
    LOOM_NCCL=$(python3 - 2>/dev/null <<'PY'
import glob, os
try:
    import nvidia.nccl as n
    roots = list(n.__path__)
except Exception:
    roots = []
try:
    import torch
    roots.append(os.path.join(os.path.dirname(torch.__file__), "lib"))
except Exception:
    pass
for r in roots:
    for f in glob.glob(os.path.join(r, "**", "libnccl.so*"), recursive=True):
        print(f); raise SystemExit
PY
)
    [ -n "$LOOM_NCCL" ] && export LOOM_NCCL && echo "NCCL: $LOOM_NCCL"
fi

if [ "${SKIP_TESTS:-0}" != 1 ]; then
    stamp "GPU suite"
    bash tests/gpu/run.sh >"$RESULTS/test-gpu.log" 2>&1
    grep -E '^(ok|FAIL|skip) - |passed, |failed:' "$RESULTS/test-gpu.log"
fi

if [ "${LOOM_VARIANTS:-}" = prepared ]; then
    p=LOOM_CUDA_FLASH_FWD=pipe,LOOM_CUDA_FLASH_BWD=pipe
    LOOM_VARIANTS="- LOOM_CUDA_FUSE=all LOOM_CUDA_FUSE=gelu LOOM_CUDA_FUSE=bgrad LOOM_CUDA_ACT16=qkv"
    LOOM_VARIANTS+=" LOOM_CUDA_ACT16=all LOOM_CUDA_ACT16=qkv,$p LOOM_CUDA_FUSE=all,LOOM_CUDA_ACT16=all"
    LOOM_VARIANTS+=" LOOM_CUDA_FUSE=all,LOOM_CUDA_ACT16=all,$p LOOM_CUDA_ADAMW_MULTI=0"
fi
stamp "benchmark: $MODELS"
OUT_DIR="$RESULTS/bench" MODELS=$MODELS BATCH=${BATCH:-16} SEQ=${SEQ:-1024} \
    STEPS=${STEPS:-20} WARM=${WARM:-5} ENGINES=${ENGINES:-"loom llmc compile"} \
    LOOM_VARIANTS=${LOOM_VARIANTS:--} LOOM_BEFORE=${LOOM_BEFORE:-} LLMC=${LLMC:-} \
    bash bench/gpu/bench_gpu.sh >"$RESULTS/bench.log" 2>&1

m=${MODELS%% *}
case $m in
124m | 350m)
    stamp "profile: $m"
    read -r L H C <<<"$(case $m in 350m) echo 24 16 1024 ;; *) echo 12 12 768 ;; esac)"
    LOOM_CUDA_PROFILE=1 timeout 120 "$LOOM" train --data "$RESULTS/bench/tok.bin" --layers "$L" \
        --heads "$H" --dim "$C" --vocab 50257 --block-size 1024 --batch "${BATCH:-16}" --seq 1024 \
        --steps 8 --device cuda --progress off >"$RESULTS/profile.log" 2>&1
    tail -25 "$RESULTS/profile.log"
    ;;
*) stamp "profile: GPT-2 models only (the first of MODELS is $m)" ;;
esac
if [ -n "${OFFLOAD:-}" ]; then # OFFLOAD=1: issue "ATOM on the GPU"'s benchmark (bench_offload.sh;
    # LAYERS/DIM/HEADS/BUDGET/ENGINES pass through: a 1.3B first look is LAYERS=24 DIM=2048 HEADS=16)
    stamp "offload benchmark"
    OUT_DIR="$RESULTS/offload" bash bench/gpu/bench_offload.sh >"$RESULTS/offload.log" 2>&1
    tail -12 "$RESULTS/offload.log"
fi
stamp "done"
sed -n '/^| model/,$p' "$RESULTS/bench.log"
# the whole folder as one file where the caller asks for it (ARCHIVE=path.tgz)
[ -n "${ARCHIVE:-}" ] && tar -czf "$ARCHIVE" -C "$RESULTS" .
