#!/usr/bin/env bash
# t_offload_memory.sh — block swapping keeps its promise on memory: a model whose training
# state (parameters, gradients, AdamW m and v: 16 bytes a parameter) is at least 4× --fast-mem
# trains with a peak RSS of at most --fast-mem + 24 MiB (the stated overhead: the binary and
# its libraries, OpenBLAS and OpenMP, the data shard's pages, the allocator). Peak RSS is the
# process's ru_maxrss, read by a Python parent. The block timings come from a profile saved by
# `loom plan --offload ... --save-profile` (measuring them at start-up runs a one-layer copy of
# the model, outside the budget); the run still plans its units and probes its disk. Negative
# control: the same model in memory goes over that limit.
# asan: skip (the sanitizers' shadow memory is not the program's)
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 2048 20000 3
mkdir "$d/off"
shape="--layers 16 --heads 4 --dim 256 --vocab 2048 --block-size 64 --batch 2 --seq 64 --threads 1
       --recompute"
flags="--data $d/train.bin $shape --steps 3 --progress off"
budget_mib=40 overhead_mib=24
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
mem=$(peak $LOOM train $flags)
params=$($LOOM train $flags --steps 0 2>&1 | grep -o '[0-9.]*M params' | grep -o '^[0-9.]*')
$PY - "$params" "$budget_mib" "$overhead_mib" "$off" "$mem" <<'PY'
import sys
params, budget, overhead, off, mem = map(float, sys.argv[1:])
state = 16 * params * 1e6 / 2**20
limit = budget + overhead
print(f"training state {state:.0f} MiB = {state / budget:.1f}x --fast-mem {budget:.0f} MiB")
assert state >= 4 * budget, "the model is too small for this test"
print(f"offloaded peak RSS {off:.1f} MiB <= {limit:.0f} MiB (budget + {overhead:.0f} MiB overhead)")
assert off <= limit, f"peak RSS {off:.1f} MiB over {limit:.0f} MiB"
print(f"negative control: in memory {mem:.1f} MiB > {limit:.0f} MiB")
assert mem > limit, "the in-memory run fits the limit too: the test cannot fail"
PY
