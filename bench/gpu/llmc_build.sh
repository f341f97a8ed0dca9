#!/usr/bin/env bash
# llmc_build.sh — build llm.c's single-GPU trainer (train_gpt2cu) for bench/gpu/bench_gpu.sh.
#
#   bench/gpu/llmc_build.sh SRC_DIR [ARCH]
#
# SRC_DIR is an unpacked llm.c source tree (github.com/karpathy/llm.c; it is never committed
# here). ARCH is the CUDA compute capability without the dot (default 90 = H100). No GPU is
# needed to build: the target is given explicitly, so the binary can be carried to a GPU host.
# SRC_DIR is left untouched: it is copied to a temporary folder, patched there, and built
# without NCCL, MPI, cuDNN or NVML (cuBLAS/cuBLASLt and the CUDA runtime only). The path of
# the binary is printed last, on a line of its own (it lives in a mktemp folder; copy it).
#
# Edits applied to the copy, for CUDA 13:
#   1. llmc/cuda_utils.cuh, cudaMallocConditionallyManaged(): the out-of-memory fallback to
#      managed memory calls cudaMemAdvise(ptr, bytes, advice, int device), whose last argument
#      became a cudaMemLocation in CUDA 13. The fallback is replaced by an error message and
#      exit(EXIT_FAILURE): a benchmark that spills to managed memory is not a fair number anyway.
# Make variables: NO_MULTI_GPU=1 (no NCCL), NO_USE_MPI=1 (otherwise the Makefile turns on
# -DUSE_MPI whenever OpenMPI is installed, which does not compile without NCCL), USE_CUDNN=0,
# NVCC_LDFLAGS overridden to drop -lnvidia-ml (llm.c only uses NVML when <nvml.h> is found).
set -eu

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 SRC_DIR [ARCH]" >&2
    exit 2
fi
SRC=$1
ARCH=${2:-90}
case $ARCH in *[!0-9]*|'') echo "$0: ARCH must be digits, e.g. 90" >&2; exit 2;; esac
if [ ! -f "$SRC/train_gpt2.cu" ] || [ ! -f "$SRC/Makefile" ]; then
    echo "$0: $SRC does not look like an llm.c source tree" >&2; exit 2
fi

if ! command -v nvcc >/dev/null 2>&1; then
    PATH=/usr/local/cuda/bin:$PATH
fi
NVCC=$(command -v nvcc) || { echo "$0: nvcc not found (also looked in /usr/local/cuda/bin)" >&2; exit 1; }
PY=$(command -v python3) || { echo "$0: python3 is needed to patch the source" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/llmc_build.XXXXXX")
cp -a "$SRC/." "$WORK/"
rm -rf "$WORK/build" "$WORK/train_gpt2cu"

# Edit 1: replace the managed-memory fallback (see the header).
"$PY" - "$WORK/llmc/cuda_utils.cuh" <<'EOF'
import re, sys
path = sys.argv[1]
text = open(path).read()
pat = re.compile(r"[ \t]*cudaCheck_\(cudaMallocManaged\(out, bytes\), file, line\);\n"
                 r"[ \t]*cudaCheck_\(cudaMemAdvise\([^\n]*\n")
new = ('        fprintf(stderr, "[CUDA ERROR] out of device memory allocating %zu bytes at %s:%d '
       '(managed-memory fallback disabled in this build)\\n", bytes, file, line);\n'
       '        exit(EXIT_FAILURE);\n')
text, n = pat.subn(lambda m: new, text)
if n != 1:
    sys.exit("llmc_build.sh: expected one cudaMemAdvise fallback in %s, found %d" % (path, n))
open(path, "w").write(text)
EOF
if grep -rn cudaMemAdvise "$WORK"/llmc "$WORK"/train_gpt2.cu >/dev/null; then
    echo "$0: cudaMemAdvise still present after patching" >&2; exit 1
fi

echo "building llm.c train_gpt2cu for sm_$ARCH with $NVCC in $WORK" >&2
make -C "$WORK" train_gpt2cu NVCC="$NVCC" NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=0 \
    GPU_COMPUTE_CAPABILITY="$ARCH" NVCC_LDFLAGS="-lcublas -lcublasLt" >&2

[ -x "$WORK/train_gpt2cu" ] || { echo "$0: build produced no binary" >&2; exit 1; }
echo "$WORK/train_gpt2cu"
