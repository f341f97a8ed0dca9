#!/usr/bin/env bash
# t_plan.sh — the planner on a hand-written profile, so every number can be checked by hand:
#   * the cost model: a DP plan's compute term is K x (sum of block costs), a pipeline plan's is
#     K x (slowest stage + its two boundary transfers); the all-reduce term is 2(w-1)/w x |W| x 4
#     bytes / bandwidth; the step time is the larger of the two;
#   * the search: with a fast network DP wins; on a slow one the pipeline does; a memory budget
#     that nothing fits is a clear error; a profile round-trips through --save-profile/--profile.
set -eu
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
cat > "$d/prof.json" <<'JSON'
{"format": "loom-profile-1", "model": {"layers": 4, "heads": 2, "dim": 64, "vocab": 256, "block_size": 32},
 "seq": 32, "threads": 1, "rows": [
  {"micro_batch": 1, "embed_fwd_s": 0.001, "embed_bwd_s": 0.001, "layer_fwd_s": 0.01, "layer_bwd_s": 0.02, "head_fwd_s": 0.005, "head_bwd_s": 0.01},
  {"micro_batch": 2, "embed_fwd_s": 0.002, "embed_bwd_s": 0.002, "layer_fwd_s": 0.02, "layer_bwd_s": 0.04, "head_fwd_s": 0.01, "head_bwd_s": 0.02}]}
JSON
$LOOM plan --profile "$d/prof.json" --workers 2 --global-batch 8 --bandwidth-gbps 1 --top 50 --json "$d/fast.json"
$PY - "$d/fast.json" <<'PY'
import json, sys
plans = json.load(open(sys.argv[1]))
P = (256 + 32) * 64 + 4 * (12 * 64 * 64 + 13 * 64) + 2 * 64
def find(**k):
    return next(p for p in plans if all(p[a] == v for a, v in k.items()))
dp = find(w=2, d=1, micro_batch=2, recompute=False)
assert abs(dp["compute_s"] - 2 * (0.004 + 4 * 0.06 + 0.03)) < 1e-9, dp
assert abs(dp["allreduce_s"] - 2 * 0.5 * P * 4 / 1.25e8) < 1e-9, dp
rc = find(w=2, d=1, micro_batch=2, recompute=True)
assert abs(rc["compute_s"] - 2 * (0.004 + 4 * 0.08 + 0.03)) < 1e-9, rc
pp = find(w=1, d=2, micro_batch=2, recompute=False)
p2p = 2 * (2 * 32 * 64 * 4 / 1.25e8 + 1e-4)
stage = max(0.004 + 2 * 0.06, 2 * 0.06 + 0.03)  # balanced split: [embed, 2 layers] [2 layers, head]
assert pp["stage_layers"] == "2,2", pp
assert abs(pp["compute_s"] - 4 * (stage + p2p)) < 1e-9, pp
assert plans[0]["d"] == 1, plans[0]  # a fast network: data parallelism wins
print("cost model terms match the formulas; best on 1 Gbit/s:", plans[0])
PY
$LOOM plan --profile "$d/prof.json" --workers 2 --global-batch 8 --bandwidth-gbps 0.0002 --json "$d/slow.json"
$PY -c "import json,sys; p=json.load(open('$d/slow.json'))[0]; print('best on 200 kbit/s:', p); sys.exit(0 if p['d'] == 2 else 1)"
if out=$($LOOM plan --profile "$d/prof.json" --workers 2 --mem-gb 0.001 2>&1); then exit 1; fi
grep -q "no plan fits" <<<"$out"
echo '{"format": "other"}' > "$d/bad.json"
if out=$($LOOM plan --profile "$d/bad.json" 2>&1); then exit 1; fi
grep -q "bad.json: not a loom profile" <<<"$out"
# a measured profile survives the round trip
$LOOM plan --layers 1 --heads 2 --dim 16 --vocab 64 --block-size 16 --seq 16 --max-micro-batch 2 \
    --workers 2 --global-batch 4 --save-profile "$d/m.json" --json "$d/a.json" > /dev/null 2>&1
$LOOM plan --profile "$d/m.json" --workers 2 --global-batch 4 --json "$d/b.json" > /dev/null
cmp "$d/a.json" "$d/b.json"
