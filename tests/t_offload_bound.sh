#!/usr/bin/env bash
# long: started first (tests/run.sh)
# t_offload_bound.sh — --fast-mem bounds the whole process of a run with block swapping, from
# its start to its end: start-up (the planner's profile and probe, or a warm-up), the fill from
# random weights, from --init or from a checkpoint, the steps, the checkpoint save and --export.
# Each run's peak RSS (ru_maxrss of every process it started, read by a Python parent) must be at
# most --fast-mem, and the fixed overhead it prints (what the plan cannot move: libraries, MPI,
# the backend's threads and BLAS buffers) at most 256 MiB.
#   1. GPT-2 124M (B1 T64 K2, 2 threads, 1.9 GiB of training state) at --fast-mem 768M: a fresh run
#      that profiles at start-up, takes a step, saves and exports; a resume of that checkpoint
#      that takes a step and exports; a run from the export (--init, no step) whose export must
#      be the same bytes (both streamed through the tier).
#   2. CO2 with --offload over MPI (dp 2, tau 1) on a small model: the largest process.
#   3. A --fast-mem that holds the plan but not the fixed overhead besides is refused up front,
#      naming both.
# Negative control: before --fast-mem bounded the whole process, run 1's export alone held the
# model twice (1.5 GiB); the training state here is 2.5x the budget, so any whole-model copy
# fails the test.
# asan: skip (the sanitizers' shadow memory is not the program's; 124M steps are slow there)
set -eu
. "$(dirname "$0")/lib.sh"
unset LOOM_OFFLOAD_COSTS # the start-up measurements are part of what is tested
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkdir "$d/off"
mkshard "$d/train.bin" 50257 20000 1
export OMP_NUM_THREADS=2
M="--layers 12 --heads 12 --dim 768 --vocab 50257 --block-size 1024 --batch 1 --seq 64
   --grad-accum 2 --threads 2 --data $d/train.bin --progress off"
OFF="--offload disk --offload-dir $d/off --fast-mem 768M"
UNITS="[[0,0],[1,1],[2,2],[3,3],[4,4],[5,5],[6,6],[7,7],[8,8],[9,9],[10,10],[11,11],[12,12],[13,13]]"
budget=768
run() { # NAME CMD...: runs CMD (it must succeed), checks its peak RSS and printed overhead
    local name=$1; shift
    $PY - "$name" "$budget" "$d/$name.err" "$@" <<'PY'
import re, resource, subprocess, sys
name, budget, errf, cmd = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4:]
r = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
open(errf, "w").write(r.stderr)
if r.returncode:
    sys.stderr.write(r.stderr); sys.exit(f"FAILED: {name}: exit {r.returncode}")
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
assert peak <= budget, f"FAILED: {name}: peak RSS {peak:.1f} MiB over {budget:.0f} MiB"
ovh = [float(x) for x in re.findall(r"fixed overhead ([0-9.]+) MiB", r.stderr)]
assert ovh, f"FAILED: {name}: no fixed overhead printed:\n{r.stderr}"
assert ovh[0] <= 256, f"FAILED: {name}: fixed overhead {ovh[0]} MiB"
print(f"ok: {name}: peak RSS {peak:.1f} MiB <= --fast-mem {budget:.0f} MiB; "
      f"fixed overhead {ovh[0]:.1f} MiB <= 256 MiB")
PY
}

# 1. 124M: fresh (profiled), resumed (--offload-units: warmed up), from its export (--init)
run fresh $LOOM train $M $OFF --steps 1 --save "$d/ck" --export "$d/a.st"
grep -q "profiling a layer" "$d/fresh.err" || { echo "FAILED: the fresh run did not profile"; exit 1; }
run resume $LOOM train $M $OFF --offload-units "$UNITS" --steps 2 --resume "$d/ck" \
    --export "$d/b.st"
grep -q "resumed from" "$d/resume.err" || { echo "FAILED: no resume"; exit 1; }
run init $LOOM train $M $OFF --offload-units "$UNITS" --steps 0 --init "$d/b.st" --export "$d/c.st"
cmp "$d/b.st" "$d/c.st" || { echo "FAILED: --init then --export changed the weights"; exit 1; }
echo "ok: --init of an export, exported again: the same bytes"
params=$(grep -o '[0-9.]*M params' "$d/fresh.err" | grep -o '^[0-9.]*')
$PY -c "s = 16 * $params * 1e6 / 2**20; print(f'training state {s:.0f} MiB = {s / $budget:.1f}x');
assert s > 2.4 * $budget"
rm -f "$d"/*.st; rm -rf "$d/ck"

# 2. CO2 with --offload, two workers under MPI, a small model
mkshard "$d/small.bin" 2048 20000 3
budget=96
export OMP_NUM_THREADS=1
S="--layers 16 --heads 4 --dim 256 --vocab 2048 --block-size 64 --batch 2 --seq 64 --recompute
   --threads 1 --data $d/small.bin --progress off"
run co2 $MPI -np 2 $LOOM train $S --dp 2 --co2 --tau 1 --steps 2 --offload disk \
    --offload-dir "$d/off" --fast-mem ${budget}M --save "$d/ck2" --export "$d/co2.st"

# 3. the plan fits, the plan and the overhead do not: refused before the model's state is
# allocated. At first the process holds little (the refusal of a budget below the least plan
# names it); the fixed overhead measured once the backend has run is more (a run prints it): a
# budget of the least plan plus a value between the two passes the first check and fails the
# second, naming both numbers.
OFF1="--offload disk --offload-dir $d/off"
early=$($LOOM train $S $OFF1 --fast-mem 1M --steps 1 2>&1 | sed -n 's/.*already holds \([0-9.]*\) MiB.*/\1/p')
least=$($LOOM train $S $OFF1 --fast-mem 1M --steps 1 2>&1 |
    sed -n 's/.*needs at least \([0-9.]*\) MiB.*/\1/p')
ovh=$($LOOM train $S $OFF1 --fast-mem ${budget}M --steps 0 2>&1 |
    sed -n 's/.*fixed overhead \([0-9.]*\) MiB.*/\1/p')
[ -n "$early" ] && [ -n "$least" ] && [ -n "$ovh" ] ||
    { echo "FAILED: no 'already holds', 'needs at least' or 'fixed overhead' in the messages"; exit 1; }
tight=$($PY -c "
e, l, o = float('$early'), float('$least'), float('$ovh')
assert o > e + 2, f'the fixed overhead {o} MiB is not above what the process holds at first ({e})'
print('%dK' % int((l + (e + o) / 2) * 1024))")
echo "least plan $least MiB, held at first $early MiB, fixed overhead $ovh MiB: --fast-mem $tight"
expect_fail "fixed overhead" $LOOM train $S $OFF1 --fast-mem "$tight" --steps 1
expect_fail "--fast-mem must be at least" $LOOM train $S $OFF1 --fast-mem "$tight" --steps 1
echo "all ok"
