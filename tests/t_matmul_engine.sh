#!/usr/bin/env bash
# t_matmul_engine.sh — the CPU backend's matrix engine, chosen by LOOM_MATMUL (openblas, blis,
# onednn; unset: oneDNN on a CPU with AVX-512, else OpenBLAS, as `loom --version` says; the test
# hook LOOM_CPU_NO_AVX512=1 hides AVX-512, and a run with the default engine is bit-identical to
# one that names the engine the CPU picks). A bad value is a clear error naming the
# variable before any work; every engine trains the same small model to the same losses within
# 1e-4 step for step (the engines sum in different orders, so not bit for bit), and a run repeated
# with the same engine is bit-identical. tests/test_gemm.c checks the products themselves.
set -eu
. "$(dirname "$0")/lib.sh"
unset LOOM_MATMUL # the default engine is what this test checks (make test-asan sets openblas)
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 256 50000 1
base="--data $d/train.bin --batch 4 --seq 32 --layers 2 --heads 2 --dim 64 --vocab 256
      --block-size 32 --steps 5 --progress off --peak-gflops 1"
$LOOM --version | grep -E '^matmul: +(openblas|onednn) \(LOOM_MATMUL; default (openblas|onednn) on this CPU'
LOOM_CPU_NO_AVX512=1 $LOOM --version | grep -E '^matmul: +openblas \(LOOM_MATMUL; default openblas on this CPU, no AVX-512\)'
LOOM_MATMUL=blis LOOM_CPU_NO_AVX512=1 $LOOM --version | grep -E '^matmul: +blis '
if grep -qw avx512f /proc/cpuinfo && grep -qw avx512dq /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo &&
    grep -qw avx512vl /proc/cpuinfo; then def=onednn; else def=openblas; fi
$LOOM --version | grep -E "^matmul: +$def \(LOOM_MATMUL; default $def on this CPU"
# shellcheck disable=SC2086
LOOM_MATMUL=mkl expect_fail "LOOM_MATMUL='mkl': unknown matrix engine (openblas, blis, onednn)" \
    $LOOM train $base --metrics "$d/bad.jsonl"
[ ! -s "$d/bad.jsonl" ] || { echo "a run with a bad LOOM_MATMUL wrote metrics"; exit 1; }
for e in openblas blis onednn; do
    # shellcheck disable=SC2086
    LOOM_MATMUL=$e $LOOM train $base --metrics "$d/$e.jsonl" --export "$d/$e.st"
    LOOM_MATMUL=$e $LOOM --version | grep -E "^matmul: +$e "
done
# shellcheck disable=SC2086
LOOM_MATMUL=onednn $LOOM train $base --metrics "$d/onednn2.jsonl" --export "$d/onednn2.st"
same onednn-repeat "$d/onednn2.jsonl" "$d/onednn.jsonl" "$d/onednn2.st" "$d/onednn.st"
# shellcheck disable=SC2086
$LOOM train $base --metrics "$d/default.jsonl" --export "$d/default.st"
same default-is-$def "$d/default.jsonl" "$d/$def.jsonl" "$d/default.st" "$d/$def.st"
# shellcheck disable=SC2086
LOOM_CPU_NO_AVX512=1 $LOOM train $base --metrics "$d/noavx.jsonl" --export "$d/noavx.st"
same no-avx512-is-openblas "$d/noavx.jsonl" "$d/openblas.jsonl" "$d/noavx.st" "$d/openblas.st"
same --tol 1e-4 blis-vs-openblas "$d/blis.jsonl" "$d/openblas.jsonl"
same --tol 1e-4 onednn-vs-openblas "$d/onednn.jsonl" "$d/openblas.jsonl"
