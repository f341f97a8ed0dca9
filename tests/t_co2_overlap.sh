#!/usr/bin/env bash
# t_co2_overlap.sh — CO2's outer all-reduce is overlapped with computation, not waited for: the
# average a round end needs was started at the previous round end and ran in the background
# behind the whole round. Under an emulated slow link (LOOM_COMM_DELAY=S: every collective of
# >= 4096 floats completes no sooner than S seconds after it starts, using no CPU meanwhile),
# from loom's metrics (comm_overlap_ms: how long the communication a step waited for had been in
# flight when the wait began; comm_exposed_ms: how long it blocked):
#   * CO2 (2 workers, tau 4): every round end from the second on waited for an average that had
#     been in flight at least as long as the round's other steps took (the sum of their step_ms),
#     and the steps inside a round wait for nothing;
#   * synchronous DP under the same link (the negative control): the all-reduce each step waits
#     for was started within that step (overlap + wait <= step_ms) and the step waits for the
#     link (wait + overlap >= S: the delay is real); the round-end check above, applied to DP's
#     steps in groups of tau, rejects them (a DP step would have to outlast the tau - 1 steps
#     before it; at least one of its three round ends must be rejected).
# How long the round ends blocked is printed, not asserted: it depends on scheduling (a link
# slower than a round when the load on this machine changes, the other worker's lag), never a
# timed assertion. Both checks compare times measured on one clock in one process.
# asan: skip
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/d.bin" 256 200000 5
flags="--data $d/d.bin --layers 2 --heads 4 --dim 128 --vocab 256 --block-size 64 --batch 4
       --seq 64 --threads 1 --progress off --dp 2 --lr 1e-3"
delay=0.05 tau=4

LOOM_COMM_DELAY=$delay $MPI -np 2 -x LOOM_COMM_DELAY $LOOM train $flags --steps $((5 * tau)) --co2 --tau $tau \
    --metrics "$d/co2.jsonl" > "$d/co2.log" 2>&1 || { echo "FAILED: the CO2 run"; tail -20 "$d/co2.log"; exit 1; }
LOOM_COMM_DELAY=$delay $MPI -np 2 -x LOOM_COMM_DELAY $LOOM train $flags --steps $((4 * tau)) \
    --metrics "$d/dp.jsonl" > "$d/dp.log" 2>&1 || { echo "FAILED: the DP run"; tail -20 "$d/dp.log"; exit 1; }
$PY - "$d/co2.jsonl" "$d/dp.jsonl" "$delay" "$tau" <<'PY'
import json, sys
def rows(p):
    return [json.loads(l) for l in open(p) if "step_ms" in l]
co2, dp, delay, tau = rows(sys.argv[1]), rows(sys.argv[2]), float(sys.argv[3]) * 1000, int(sys.argv[4])
eps = 0.01  # ms: the metrics' rounding (%.3f)

def inside_waits(rs):
    """Steps inside a round (not a round end) that waited for communication."""
    return [f"step {r['step']} (inside a round) waited: {r}" for r in rs
            if r["step"] % tau and ("comm_overlap_ms" in r or r.get("comm_exposed_ms", 0) > 0)]

def short_ends(rs):
    """Round ends (from the second: round 1 has no earlier average to apply) whose average had
    been in flight for less than the round's other steps took."""
    bad = []
    for i, r in enumerate(rs):
        if r["step"] % tau or r["step"] <= tau:
            continue
        others = sum(q["step_ms"] for q in rs[i - tau + 1:i])
        ov = r.get("comm_overlap_ms", 0)
        if ov + eps < others:
            bad.append(f"round end {r['step']}: its average had been in flight {ov:.3f} ms, "
                       f"less than the round's other steps took ({others:.3f} ms)")
    return bad

bad = inside_waits(co2) + short_ends(co2)
ends = [r for r in co2 if r["step"] % tau == 0 and r["step"] > tau]
exposed = sum(r["comm_exposed_ms"] for r in co2)
total = sum(r["step_ms"] for r in co2)
print(f"co2: averages in flight {min(r.get('comm_overlap_ms', 0) for r in ends):.0f} ms or more "
      f"at the round ends (link {delay:.0f} ms); waited {exposed:.0f} ms of {total:.0f} ms "
      f"({100 * exposed / total:.1f}%), worst round end {max(r['comm_exposed_ms'] for r in ends):.0f} ms")
for r in dp:
    ov, ex = r.get("comm_overlap_ms", 0), r["comm_exposed_ms"]
    if not ov or ov + ex > r["step_ms"] + eps:
        bad.append(f"dp step {r['step']}: its all-reduce did not start within the step: {r}")
    if ex + ov + eps < delay:
        bad.append(f"dp step {r['step']}: waited {ex:.3f} ms + in flight {ov:.3f} ms before, "
                   f"less than the link's {delay:.0f} ms: the delay is not in force")
waits = [r["comm_exposed_ms"] for r in dp[1:]]
print(f"sync dp: waited {sum(waits) / len(waits):.0f} ms per step for an all-reduce in flight "
      f"{max(r.get('comm_overlap_ms', 0) for r in dp):.2f} ms or less before")
if not short_ends(dp):
    bad.append("the round-end check accepts synchronous DP's records: it cannot fail")
for b in bad:
    print("FAILED:", b)
sys.exit(1 if bad else 0)
PY
