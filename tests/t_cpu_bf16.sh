#!/usr/bin/env bash
# t_cpu_bf16.sh — `--dtype bf16` on the CPU backend. Its products need AVX512-BF16 or AMX-BF16,
# found at run time (cpuid, src/backend/cpu_isa.c); on a CPU without either the run stops before
# any work with an error naming both. LOOM_CPU_NO_BF16=1 (a test hook) hides them, so that error
# is checked on every CPU. Without the hook, what loom finds must agree with the kernel's flags
# in /proc/cpuinfo (avx512_bf16, amx_bf16): the refusal on a CPU without them, and on one with
# them the message naming what it found (the CPU's bf16 kernels are not written yet).
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 256 5000 1
base="--data $d/train.bin --batch 2 --seq 16 --layers 1 --heads 2 --dim 32 --vocab 256
      --block-size 16 --steps 2 --progress off"
none="--dtype bf16: this CPU has neither AVX512-BF16 nor AMX-BF16"
# shellcheck disable=SC2086
LOOM_CPU_NO_BF16=1 expect_fail "$none" $LOOM train $base --dtype bf16 --metrics "$d/m.jsonl"
# shellcheck disable=SC2086
LOOM_CPU_NO_BF16=1 expect_fail "$none" $LOOM train $base --device cpu:bf16 --metrics "$d/m.jsonl"
[ ! -e "$d/m.jsonl" ] || { echo "a refused run wrote metrics"; exit 1; }
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has=""
grep -qw avx512_bf16 <<<"$flags" && has="AVX512-BF16"
grep -qw amx_bf16 <<<"$flags" && has="${has:+$has and }AMX-BF16"
if [ -z "$has" ]; then
    # shellcheck disable=SC2086
    expect_fail "$none" $LOOM train $base --dtype bf16
else
    # shellcheck disable=SC2086
    expect_fail "although this CPU has $has" $LOOM train $base --dtype bf16
fi
# fp32 is unaffected by the hook
# shellcheck disable=SC2086
LOOM_CPU_NO_BF16=1 $LOOM train $base --dtype fp32 --metrics "$d/f.jsonl"
[ "$(wc -l < "$d/f.jsonl")" -eq 2 ] || { echo "fp32 run did not train 2 steps"; exit 1; }
echo "cpu bf16 isa: ${has:-none}"
