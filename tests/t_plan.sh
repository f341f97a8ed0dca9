#!/usr/bin/env bash
# t_plan.sh — the planner on a hand-written profile, so every number can be checked by hand:
#   * the cost model, term by term: a DP plan's compute is K x (sum of block costs) plus the CPU
#     its all-reduce traffic costs; the all-reduce is 2(w-1)/w x |W| x 4 bytes / bandwidth (+
#     latency) and, in one bucket, all exposed; a pipeline plan's compute is K x (slowest stage +
#     its boundary transfer) plus its traffic's CPU, its reductions (the tied embedding) run in
#     the background;
#   * CPU sharing: two ranks on two cores run at the profile's busy factor, four ranks on two
#     cores time-share them; ranks on one machine reduce through shared memory, serially;
#   * the search: with a fast network DP wins; on a slow one the pipeline does; a memory budget
#     that nothing fits is a clear error; a profile round-trips through --save-profile/--profile;
#   * the swarm of loom peers it compares with: a round's Δ exchange is (N-1) x |W| x 4 bytes /
#     bandwidth + latency, hidden behind tau steps on a fast link, exposed on a slow one.
set -eu
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cat > "$d/prof.json" <<'JSON'
{"format": "loom-profile-1", "model": {"layers": 4, "heads": 2, "dim": 64, "vocab": 256, "block_size": 32},
 "seq": 32, "threads": 1, "rows": [
  {"micro_batch": 1, "embed_fwd_s": 0.001, "embed_bwd_s": 0.001, "layer_fwd_s": 0.01, "layer_bwd_s": 0.02, "head_fwd_s": 0.005, "head_bwd_s": 0.01, "busy_factor": 1.2},
  {"micro_batch": 2, "embed_fwd_s": 0.002, "embed_bwd_s": 0.002, "layer_fwd_s": 0.02, "layer_bwd_s": 0.04, "head_fwd_s": 0.01, "head_bwd_s": 0.02, "busy_factor": 1.2}]}
JSON
$LOOM plan --profile "$d/prof.json" --workers 2 --global-batch 8 --bandwidth-gbps 1 --top 50 --json "$d/fast.json"
$LOOM plan --profile "$d/prof.json" --workers 2 --global-batch 8 --bandwidth-gbps 1 --top 50 \
    --cores 2 --cpu-group 2 --json "$d/shared.json" > /dev/null
$LOOM plan --profile "$d/prof.json" --workers 4 --global-batch 8 --bandwidth-gbps 1 --top 50 \
    --cores 2 --node-size 4 --intra-bandwidth-gbps 8 --json "$d/four.json" > /dev/null
$PY - "$d/fast.json" "$d/shared.json" "$d/four.json" <<'PY'
import json, sys
fast, shared, four = (json.load(open(p)) for p in sys.argv[1:])
P = (256 + 32) * 64 + 4 * (12 * 64 * 64 + 13 * 64) + 2 * 64   # parameters
bw, lat, cpu = 1.25e8, 1e-4, 1e-9                              # 1 Gbit/s, 0.1 ms, 1 ns/byte
def find(plans, **k):
    return next(p for p in plans if all(p[a] == v for a, v in k.items()))
def close(a, b):
    return abs(a - b) < 1e-9 + 1e-9 * abs(b)
model = 0.004 + 4 * 0.06 + 0.03                               # one micro-batch of 2, all blocks
# data parallelism, 2 ranks on their own machines: one bucket, so the all-reduce is exposed
dp = find(fast, w=2, d=1, micro_batch=2, recompute=False)
ar = 2 * 0.5 * P * 4 / bw + 2 * lat
assert close(dp["compute_s"], 2 * model + 4 * 0.5 * P * 4 * cpu), dp
assert close(dp["allreduce_s"], ar) and close(dp["exposed_s"], ar), dp
rc = find(fast, w=2, d=1, micro_batch=2, recompute=True)
assert close(rc["compute_s"], 2 * (0.004 + 4 * 0.08 + 0.03) + 4 * 0.5 * P * 4 * cpu), rc
# PipeDream-2BW, 2 stages: [embed, 2 layers] [2 layers, head]
pp = find(fast, w=1, d=2, micro_batch=2, recompute=False)
boundary = 2 * 32 * 64 * 4
stage = max(0.004 + 2 * 0.06, 2 * 0.06 + 0.03) + boundary / bw + lat
traffic = 4 * 0.5 * 256 * 64 * 4 + 2 * 4 * boundary           # tied wte all-reduce + activations
tie = 256 * 64 * 4 / bw + 2 * lat
assert pp["stage_layers"] == "2,2", pp
assert close(pp["compute_s"], 4 * stage + traffic * cpu), pp
assert close(pp["allreduce_s"], tie), pp
hol = 4 * min(2 * 1048576 / bw, tie) * min(1, tie / pp["compute_s"])  # messages behind chunks
assert close(pp["exposed_s"], hol), pp
assert fast[0]["d"] == 1, fast[0]  # a fast network: data parallelism wins
# two ranks sharing two cores: every block runs at the busy factor 1.2
dps = find(shared, w=2, d=1, micro_batch=2, recompute=False)
assert close(dps["compute_s"], 1.2 * 2 * model + 4 * 0.5 * P * 4 * cpu), dps
assert close(dps["cpu_slowdown"], 1.2), dps
# four ranks on one 2-core machine: time-shared (2 x 1.2), all-reduce through shared memory
dp4 = find(four, w=4, d=1, micro_batch=2, recompute=False)
shm = 2 * 0.75 * P * 4 / 1e9 + 6 * lat
assert close(dp4["compute_s"], 2 * 1.2 * (1 * model + shm)), dp4
assert close(dp4["exposed_s"], 0), dp4
print("cost model terms match the formulas; best on 1 Gbit/s:", fast[0])
PY
$LOOM plan --profile "$d/prof.json" --workers 2 --global-batch 8 --bandwidth-gbps 1 --tau 4 > "$d/peers.txt"
$LOOM plan --profile "$d/prof.json" --workers 2 --global-batch 8 --bandwidth-gbps 0.0002 --tau 4 >> "$d/peers.txt"
grep "^peers\|^choice" "$d/peers.txt"
$PY - "$d/peers.txt" <<'PY'
import re, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("peers:")]
P = (256 + 32) * 64 + 4 * (12 * 64 * 64 + 13 * 64) + 2 * 64
for line, bw in zip(lines, (1.25e8, 2.5e4)):
    ex = float(re.search(r"exchange ([0-9.]+) s", line).group(1))
    want = P * 4 / bw + 1e-4
    assert abs(ex - want) <= 1e-3 * want + 1e-3, (line, want)
assert "hidden" in lines[0] and "exposed" in lines[1], lines
print("the swarm's exchange matches (N-1)|W|4/bw + latency; hidden at 1 Gbit/s, exposed at 200 kbit/s")
PY
$LOOM plan --profile "$d/prof.json" --workers 2 --global-batch 8 --bandwidth-gbps 0.0002 --json "$d/slow.json"
$PY -c "import json,sys; p=json.load(open('$d/slow.json'))[0]; print('best on 200 kbit/s:', p); sys.exit(0 if p['d'] == 2 else 1)"
if out=$($LOOM plan --profile "$d/prof.json" --workers 2 --mem-gb 0.001 2>&1); then exit 1; fi
grep -q "no plan fits" <<<"$out"
echo '{"format": "other"}' > "$d/bad.json"
if out=$($LOOM plan --profile "$d/bad.json" 2>&1); then exit 1; fi
grep -q "bad.json: not a loom profile" <<<"$out"
# a measured profile survives the round trip (busy factors and core count included)
$LOOM plan --layers 1 --heads 2 --dim 16 --vocab 64 --block-size 16 --seq 16 --max-micro-batch 2 \
    --workers 2 --global-batch 4 --save-profile "$d/m.json" --json "$d/a.json" > /dev/null 2>&1
$LOOM plan --profile "$d/m.json" --workers 2 --global-batch 4 --json "$d/b.json" > /dev/null
cmp "$d/a.json" "$d/b.json"
$PY -c "import json,sys; p=json.load(open('$d/m.json')); sys.exit(0 if p['cores'] >= 1 and all(r['busy_factor'] >= 1 for r in p['rows']) else 1)"
