#!/usr/bin/env bash
# t_offload_memory.sh — block swapping keeps its promise on memory: a model whose training
# state (parameters, gradients, AdamW m and v: 16 bytes a parameter) is at least 4× --fast-mem
# trains with a peak RSS of at most --fast-mem, which bounds the whole process (the plan gets
# what the fixed overhead it measures at start-up leaves: the binary and its libraries, the
# matrix engine (oneDNN's JIT kernels on an AVX-512 CPU, ~6 MiB more than OpenBLAS) and OpenMP). Peak RSS is the process's ru_maxrss, read by a Python parent. Once with the block
# timings from a profile saved by `loom plan --offload ... --save-profile` (the run warms its
# backend up instead), once measuring them at start-up (a one-layer copy of the model, within
# the budget too). Negative control: the same model in memory goes over that limit.
# (t_offload_bound.sh: GPT-2 124M with a save, a resume and --export, and CO2 over MPI.)
# asan: skip (the sanitizers' shadow memory is not the program's)
set -eu
. "$(dirname "$0")/lib.sh"
unset LOOM_OFFLOAD_COSTS # the start-up measurements are part of what is tested
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 2048 20000 3
mkdir "$d/off"
shape="--layers 24 --heads 4 --dim 256 --vocab 2048 --block-size 64 --batch 2 --seq 64 --threads 1
       --recompute"
flags="--data $d/train.bin $shape --steps 3 --progress off"
budget_mib=72
peak() { # peak RSS (MiB) of a command, which must succeed
    $PY - "$@" <<'PY'
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stderr=subprocess.PIPE, text=True)
if r.returncode:
    sys.stderr.write(r.stderr); sys.exit(1)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
PY
}
OFF="--offload disk --offload-dir $d/off --fast-mem ${budget_mib}M"
$LOOM plan $OFF $shape --save-profile "$d/prof.json" >/dev/null 2>&1 ||
    { $LOOM plan $OFF $shape --save-profile "$d/prof.json"; exit 1; }
off=$(peak $LOOM train $flags $OFF --profile "$d/prof.json")
prof=$(peak $LOOM train $flags $OFF)
mem=$(peak $LOOM train $flags)
params=$($LOOM train $flags --steps 0 2>&1 | grep -o '[0-9.]*M params' | grep -o '^[0-9.]*')
$PY - "$params" "$budget_mib" "$off" "$prof" "$mem" <<'PY'
import sys
params, budget, off, prof, mem = map(float, sys.argv[1:])
state = 16 * params * 1e6 / 2**20
print(f"training state {state:.0f} MiB = {state / budget:.1f}x --fast-mem {budget:.0f} MiB")
assert state >= 4 * budget, "the model is too small for this test"
for what, peak in (("with a saved profile", off), ("profiled at start-up", prof)):
    print(f"offloaded, {what}: peak RSS {peak:.1f} MiB <= --fast-mem {budget:.0f} MiB")
    assert peak <= budget, f"peak RSS {peak:.1f} MiB over {budget:.0f} MiB"
print(f"negative control: in memory {mem:.1f} MiB > {budget:.0f} MiB")
assert mem > budget, "the in-memory run fits the limit too: the test cannot fail"
PY
