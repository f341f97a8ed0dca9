#!/usr/bin/env bash
# t_cpu_bf16.sh — `--dtype bf16` on the CPU backend (src/backend/cpu_bf16.c). Its products need
# AVX512-BF16 or AMX-BF16, found at run time (cpuid, src/backend/cpu_isa.c); on a CPU without
# either the run stops before any work with an error naming both. LOOM_CPU_NO_BF16=1 (a test
# hook) hides them, so that error is checked on every CPU; without the hook what loom finds
# must agree with the kernel's flags in /proc/cpuinfo. On a CPU with them, bf16 is compared
# with fp32 (relative loss difference per step ≤ 1e-3; the products keep 8 bits, everything
# else is fp32), and > 0 (equal losses would mean the run never took the bf16 products):
#   * one process, the peak line naming bf16, and the first step's gradients (--dump-grads)
#     within 2e-2 of each tensor's largest fp32 value;
#   * dp 2 ZeRO-1, pp 2 (1f1b), tp 2 and --offload disk, each against its own fp32 run;
#   * checkpoints move between precisions: a bf16 checkpoint resumed in fp32 and an fp32 one
#     resumed in bf16 continue their uninterrupted runs (same bound).
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 256 30000 1
base="--data $d/train.bin --batch 2 --seq 16 --layers 1 --heads 2 --dim 32 --vocab 256
      --block-size 16 --steps 2 --progress off"
none="--dtype bf16: this CPU has neither AVX512-BF16 nor AMX-BF16"
# shellcheck disable=SC2086
LOOM_CPU_NO_BF16=1 expect_fail "$none" $LOOM train $base --dtype bf16 --metrics "$d/m.jsonl"
# shellcheck disable=SC2086
LOOM_CPU_NO_BF16=1 expect_fail "$none" $LOOM train $base --device cpu:bf16 --metrics "$d/m.jsonl"
[ ! -e "$d/m.jsonl" ] || { echo "a refused run wrote metrics"; exit 1; }
# shellcheck disable=SC2086
expect_fail "--dtype fp16: the CPU backend computes in fp32 or bf16" $LOOM train $base --dtype fp16
# fp32 is unaffected by the hook
# shellcheck disable=SC2086
LOOM_CPU_NO_BF16=1 $LOOM train $base --dtype fp32 --metrics "$d/f.jsonl"
[ "$(wc -l < "$d/f.jsonl")" -eq 2 ] || { echo "fp32 run did not train 2 steps"; exit 1; }
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has=""
grep -qw avx512_bf16 <<<"$flags" && has="AVX512-BF16"
grep -qw amx_bf16 <<<"$flags" && has="${has:+$has and }AMX-BF16"
echo "cpu bf16 isa: ${has:-none}"
if [ -z "$has" ]; then
    # shellcheck disable=SC2086
    expect_fail "$none" $LOOM train $base --dtype bf16
    echo "no bf16 instructions here: the bf16 runs are not compared"
    exit 0
fi

$PY -c "import numpy" 2>/dev/null || missing_dep "python3-numpy for $PY" # compare-st
REF="$PY $(dirname "$0")/torch_ref.py"
f="--data $d/train.bin --vocab 256 --block-size 32 --seq 32 --layers 2 --heads 4 --dim 64
   --batch 4 --lr 1e-3 --warmup 1 --weight-decay 0.1 --grad-clip 1.0 --progress off --seed 7"
# NAME A B: per-step relative loss difference ≤ 1e-3
close() {
    $PY - "$@" <<'PY'
import json, sys
name, a, b = sys.argv[1:]
la, lb = ([json.loads(l)["loss"] for l in open(p) if '"loss"' in l] for p in (a, b))
assert la and len(la) == len(lb), f"{name}: {len(la)} vs {len(lb)} steps"
worst = max(abs(x - y) / abs(y) for x, y in zip(la, lb))
print(f"{name}: {len(la)} steps, max relative loss difference {worst:.2g} (bound 1e-3; 0 would "
      "mean the bf16 products never ran)")
sys.exit(0 if 0 < worst <= 1e-3 else 1)
PY
}

echo "== one process"
# shellcheck disable=SC2086
$LOOM train $f --steps 8 --metrics "$d/f1.jsonl" --save "$d/cf" --save-every 4 --keep 0
# shellcheck disable=SC2086
$LOOM train $f --steps 8 --dtype bf16 --metrics "$d/b1.jsonl" --save "$d/cb" --save-every 4 \
    --keep 0 2>"$d/b1.err"
grep -q "peak bf16" "$d/b1.err" || { cat "$d/b1.err"; echo "no bf16 peak line"; exit 1; }
close "bf16 vs fp32" "$d/b1.jsonl" "$d/f1.jsonl"
for dt in fp32 bf16; do
    # shellcheck disable=SC2086
    $LOOM train $f --steps 1 --dtype $dt --dump-grads "$d/g_$dt.st" 2>/dev/null
done
$REF compare-st "$d/g_bf16.st" "$d/g_fp32.st" --rel --tol 2e-2

echo "== layouts, each against its own fp32 run"
layout() { # NAME NP ARGS...
    local name=$1 np=$2; shift 2
    for dt in fp32 bf16; do
        # shellcheck disable=SC2086
        $MPI -np "$np" $LOOM train $f --steps 6 --dtype $dt "$@" --metrics "$d/$name.$dt.jsonl" \
            >"$d/run.log" 2>&1 || { cat "$d/run.log"; exit 1; }
    done
    close "$name bf16 vs fp32" "$d/$name.bf16.jsonl" "$d/$name.fp32.jsonl"
}
if command -v mpirun >/dev/null; then
    need_mpi
    layout "dp 2 ZeRO-1" 2 --dp 2 --zero 1
    layout "pp 2 1f1b" 2 --pp 2 --schedule 1f1b --grad-accum 2
    layout "tp 2" 2 --tp 2
else
    echo "no mpirun: the layouts are not compared"
fi
for dt in fp32 bf16; do
    mkdir -p "$d/off_$dt"
    # shellcheck disable=SC2086
    $LOOM train $f --steps 6 --dtype $dt --offload disk --offload-dir "$d/off_$dt" \
        --fast-mem "$(fastmem 64)" --metrics "$d/off.$dt.jsonl" >"$d/run.log" 2>&1 || { cat "$d/run.log"; exit 1; }
done
close "--offload disk bf16 vs fp32" "$d/off.bf16.jsonl" "$d/off.fp32.jsonl"

echo "== checkpoints across precisions (resume at step 4)"
tail -n 4 "$d/b1.jsonl" >"$d/b1.tail"
tail -n 4 "$d/f1.jsonl" >"$d/f1.tail"
# shellcheck disable=SC2086
$LOOM train $f --steps 8 --dtype fp32 --resume "$d/cb/step_00000004" --metrics "$d/bf.jsonl" 2>/dev/null
close "bf16 checkpoint resumed in fp32" "$d/bf.jsonl" "$d/b1.tail"
# shellcheck disable=SC2086
$LOOM train $f --steps 8 --dtype bf16 --resume "$d/cf/step_00000004" --metrics "$d/fb.jsonl" 2>/dev/null
close "fp32 checkpoint resumed in bf16" "$d/fb.jsonl" "$d/f1.tail"
