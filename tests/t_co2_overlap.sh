#!/usr/bin/env bash
# t_co2_overlap.sh — CO2's outer all-reduce is overlapped with computation, not waited for.
# An emulated slow link (LOOM_COMM_DELAY=S: every collective of >= 4096 floats completes no
# sooner than S seconds after it starts, using no CPU meanwhile) with S = two local steps (at
# least 50 ms), and rounds of tau >= 4 steps lasting at least 2 S (both measured here first, so
# the test does not depend on this machine's speed):
#   * CO2 (2 workers) must spend < 10% of its step time waiting for averages, and no round end
#     may wait more than a third of S (each average has a whole round to arrive);
#   * synchronous DP under the same link must wait for at least half of S per step (the
#     negative control: it shows the delay is real, so the first check could fail).
# No wall-clock assertion: only the time spent blocked in waits, which loom records per step.
# asan: skip
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/d.bin" 256 200000 5
flags="--data $d/d.bin --layers 2 --heads 4 --dim 128 --vocab 256 --block-size 64 --batch 4
       --seq 64 --threads 1 --progress off --dp 2 --lr 1e-3"

# 1. local steps only (no outer average during the run): the compute time of one step
$MPI -np 2 $LOOM train $flags --steps 10 --co2 --tau 1000 --metrics "$d/local.jsonl" 2>/dev/null
read -r delay tau <<<"$($PY - "$d/local.jsonl" <<'PY'
import json, math, statistics, sys
s = statistics.median(json.loads(l)["step_ms"] for l in open(sys.argv[1]) if "step_ms" in l) / 1000
delay = max(0.05, 2 * s)
print(f"{delay:.3f} {max(4, math.ceil(2 * delay / s))}")
PY
)"
echo "emulated all-reduce time: $delay s; rounds of tau $tau local steps"

# 2. CO2 tau 4 and synchronous DP under that delay
LOOM_COMM_DELAY=$delay $MPI -np 2 -x LOOM_COMM_DELAY $LOOM train $flags --steps $((4 * tau)) --co2 --tau $tau \
    --metrics "$d/co2.jsonl" 2>/dev/null
LOOM_COMM_DELAY=$delay $MPI -np 2 -x LOOM_COMM_DELAY $LOOM train $flags --steps 6 \
    --metrics "$d/dp.jsonl" 2>/dev/null
$PY - "$d/co2.jsonl" "$d/dp.jsonl" "$delay" <<'PY'
import json, sys
def rows(p):
    return [json.loads(l) for l in open(p) if "step_ms" in l]
co2, dp, delay = rows(sys.argv[1]), rows(sys.argv[2]), float(sys.argv[3]) * 1000
exposed = sum(r["comm_exposed_ms"] for r in co2)
total = sum(r["step_ms"] for r in co2)
worst = max(r["comm_exposed_ms"] for r in co2)
dp_wait = sum(r["comm_exposed_ms"] for r in dp[1:]) / len(dp[1:])
print(f"co2: waited {exposed:.0f} ms of {total:.0f} ms ({100 * exposed / total:.1f}%), "
      f"worst round end {worst:.0f} ms; sync dp: {dp_wait:.0f} ms per step (delay {delay:.0f} ms)")
ok = exposed < 0.10 * total and worst < delay / 3 and dp_wait > delay / 2
sys.exit(0 if ok else 1)
PY
