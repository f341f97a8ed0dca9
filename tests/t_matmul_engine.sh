#!/usr/bin/env bash
# t_matmul_engine.sh — the CPU backend's matrix engine, chosen by LOOM_MATMUL (openblas, blis,
# onednn; unset: the default `loom --version` names). A bad value is a clear error naming the
# variable before any work; every engine trains the same small model to the same losses within
# 1e-4 step for step (the engines sum in different orders, so not bit for bit), and a run repeated
# with the same engine is bit-identical. tests/test_gemm.c checks the products themselves.
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 256 50000 1
base="--data $d/train.bin --batch 4 --seq 32 --layers 2 --heads 2 --dim 64 --vocab 256
      --block-size 32 --steps 5 --progress off --peak-gflops 1"
$LOOM --version | grep -E '^matmul: +(openblas|blis|onednn) \(LOOM_MATMUL; default (openblas|blis|onednn)\)'
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
same --tol 1e-4 blis-vs-openblas "$d/blis.jsonl" "$d/openblas.jsonl"
same --tol 1e-4 onednn-vs-openblas "$d/onednn.jsonl" "$d/openblas.jsonl"
