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
#   * tensor and context parallelism (4 ranks on one machine): a plan's compute is K x (block
#     costs) / (tp x cp) plus tp's all-reduces (4 x (b,T/cp,C) per layer and micro-batch, ring
#     over tp at the shared-memory bandwidth) and the cp ring's 3(cp-1) K/V hops of
#     (b,T/cp,2C/tp) per layer and micro-batch, plus the gradient all-reduce of the tp part over
#     w x cp ranks; without a memory limit data parallelism wins; with a limit a whole model per
#     rank cannot meet, every fitting plan has tp > 1; with a sequence whose activations do not
#     fit (even recomputed), every fitting plan has cp > 1; a plan's memory per rank is the
#     dry-run's for its layout (loom train --dry-run);
#   * the swarm of loom peers it compares with: a round's Δ exchange is (N-1) x |W| x 4 bytes /
#     bandwidth + latency, hidden behind tau steps on a fast link, exposed on a slow one; the
#     bytes a peer sends per round for every --peer-exchange x --outer-compress (and topk's
#     --topk-values fp32|2bit; 4 peers) match
#     bench/bench_peer_exchange.sh's formulas; unless told, the planner keeps the Δs
#     uncompressed where the exchange hides and compresses on a slow link.
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
wire="--peer-exchange all --outer-compress none"
$LOOM plan --profile "$d/prof.json" --workers 2 --global-batch 8 --bandwidth-gbps 1 --tau 4 $wire > "$d/peers.txt"
$LOOM plan --profile "$d/prof.json" --workers 2 --global-batch 8 --bandwidth-gbps 0.0002 --tau 4 $wire >> "$d/peers.txt"
grep "^peers\|^choice" "$d/peers.txt"
$PY - "$d/peers.txt" <<'PY'
import re, sys
lines = [l for l in open(sys.argv[1]) if l.startswith("peers:")]
P = (256 + 32) * 64 + 4 * (12 * 64 * 64 + 13 * 64) + 2 * 64
for line, bw in zip(lines, (1.25e8, 2.5e4)):
    ex = float(re.search(r"([0-9.]+) s per round", line).group(1))
    want = P * 4 / bw + 1e-4
    assert abs(ex - want) <= 1e-3 * want + 1e-3, (line, want)
assert "hidden" in lines[0] and "exposed" in lines[1], lines
print("the swarm's exchange matches (N-1)|W|4/bw + latency; hidden at 1 Gbit/s, exposed at 200 kbit/s")
PY
for ex in all sharded; do
    for c in none int8 topk topk2; do
        v=fp32; [ $c = topk2 ] && c=topk v=2bit
        $LOOM plan --profile "$d/prof.json" --workers 4 --global-batch 8 --tau 4 \
            --peer-exchange $ex --outer-compress $c --topk-frac 0.05 --topk-values $v | grep "^peers:"
    done
done > "$d/wire.txt"
$LOOM plan --profile "$d/prof.json" --workers 4 --global-batch 8 --tau 4 | grep "^peers:" > "$d/auto.txt"
$LOOM plan --profile "$d/prof.json" --workers 4 --global-batch 8 --tau 4 --bandwidth-gbps 0.0002 |
    grep "^peers:" >> "$d/auto.txt"
cat "$d/auto.txt"
$PY - "$d/wire.txt" "$d/auto.txt" <<'PY'
import math, re, sys
P = (256 + 32) * 64 + 4 * (12 * 64 * 64 + 13 * 64) + 2 * 64
N = 4
# topk: a one-byte gap and a float per kept value; topk2 (--topk-values 2bit): a gap and 2 bits,
# plus two fp32 levels per 4096 floats
k = math.ceil(0.05 * P)
delta = {"none": 4 * P, "int8": P + 4 * math.ceil(P / 4096), "topk": 5 * k,
         "topk2": 1.25 * k + 8 * math.ceil(P / 4096)}
def want(ex, c):
    if ex == "all": return (N - 1) * delta[c]
    # sharded: the parts, then the slice sums (fp32; int8 with compression; topk's sparse sums
    # as gaps and fp32 values when that is smaller, whatever the parts' values)
    sums = (N - 1) / N * (4 * P if c == "none" else delta["int8"])
    return (N - 1) / N * delta[c] + (min((N - 1) * delta["topk"], sums) if c[:4] == "topk" else sums)
seen = set()
for line in open(sys.argv[1]):
    ex = re.search(r"--peer-exchange (\w+)", line).group(1)
    c = re.search(r"--outer-compress (\w+)", line).group(1)
    if "--topk-values 2bit" in line: c = "topk2"
    seen.add((ex, c))
    mib = float(re.search(r"exchange ([0-9.]+) MiB", line).group(1))
    assert abs(mib - want(ex, c) / 2**20) <= 0.0006, (line, want(ex, c) / 2**20)
assert len(seen) == 8, seen
fast, slow = open(sys.argv[2]).read().splitlines()
assert "--outer-compress none" in fast and "hidden" in fast, fast
assert "--outer-compress none" not in slow, slow
print("bytes per peer per round match the formulas for all 8 wires; uncompressed on 1 Gbit/s,",
      re.search(r"--outer-compress \w+", slow).group(0), "on 200 kbit/s")
PY
if $LOOM plan --profile "$d/prof.json" --workers 4 --outer-compress zip 2>"$d/err"; then exit 1; fi
grep -q -- "--outer-compress" "$d/err" || { cat "$d/err"; exit 1; }
if $LOOM plan --profile "$d/prof.json" --workers 4 --outer-compress int8 --topk-values 2bit 2>"$d/err"; then exit 1; fi
grep -q -- "--topk-values 2bit needs --outer-compress topk" "$d/err" || { cat "$d/err"; exit 1; }
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

# ---- tensor and context parallelism: a model whose parameters dominate (V 8192) and one whose
# activations do (T 4096; 2 heads, so tp is at most 2); 4 ranks on one machine
cat > "$d/big.json" <<'JSON'
{"format": "loom-profile-1", "model": {"layers": 4, "heads": 4, "dim": 128, "vocab": 8192, "block_size": 64},
 "seq": 64, "threads": 1, "rows": [
  {"micro_batch": 1, "embed_fwd_s": 0.001, "embed_bwd_s": 0.001, "layer_fwd_s": 0.01, "layer_bwd_s": 0.02, "head_fwd_s": 0.02, "head_bwd_s": 0.04, "busy_factor": 1.2},
  {"micro_batch": 2, "embed_fwd_s": 0.002, "embed_bwd_s": 0.002, "layer_fwd_s": 0.02, "layer_bwd_s": 0.04, "head_fwd_s": 0.04, "head_bwd_s": 0.08, "busy_factor": 1.2}]}
JSON
sed 's/"heads": 4, "dim": 128, "vocab": 8192, "block_size": 64}/"heads": 2, "dim": 64, "vocab": 256, "block_size": 4096}/; s/"seq": 64/"seq": 4096/' \
    "$d/big.json" > "$d/long.json"
four="--workers 4 --node-size 4 --global-batch 8 --top 200"
$LOOM plan --profile "$d/big.json" $four --json "$d/tp_free.json" > /dev/null
$LOOM plan --profile "$d/big.json" $four --mem-gb 0.025 --json "$d/tp_tight.json" | tee "$d/tp_tight.txt" | sed -n '2,4p;/^best/p'
$LOOM plan --profile "$d/long.json" $four --json "$d/cp_free.json" > /dev/null
$LOOM plan --profile "$d/long.json" $four --mem-gb 0.03 --json "$d/cp_tight.json" | sed -n '2,4p;/^best/p'
grep -q "^best: loom train --dp [0-9]* --pp 1 --tp [24] --cp" "$d/tp_tight.txt"
$PY - "$d" <<'PY'
import json, sys
d = sys.argv[1]
free, tight, cfree, ctight = (json.load(open(f"{d}/{n}.json")) for n in ("tp_free", "tp_tight", "cp_free", "cp_tight"))
def close(a, b):
    return abs(a - b) < 1e-9 + 1e-9 * abs(b)
# the terms of a dp 1 x tp 2 x cp 2 plan, micro-batch 2 (K = 4) on the V 8192 model
L, C, T, V, maxT, lat, shm, tp, cp, b, K = 4, 128, 64, 8192, 64, 1e-4, 40e9 / 8, 2, 2, 2, 4
p = next(x for x in free if (x["w"], x["d"], x["tp"], x["cp"], x["micro_batch"], x["recompute"]) == (1, 1, tp, cp, b, False))
tok = b * T / cp
tp_s = K * L * 4 * (2 * (tp - 1) / tp * tok * C * 4 / shm + 2 * (tp - 1) * lat)
cp_s = K * L * 3 * (cp - 1) * (tok * 2 * C / tp * 4 / shm + lat)
vrows = -(-V // (64 * tp)) * 64 * tp // tp
P = vrows * C + maxT * C + L * (12 * C * C // tp + 7 * C // tp + 6 * C) + 2 * C   # the tp part
grads = 2 * (cp - 1) / cp * P * 4 / shm + 2 * (cp - 1) * lat      # over w x cp = 2 ranks
model = 0.004 + 4 * 0.06 + 0.12
assert close(p["tp_s"], tp_s) and close(p["cp_s"], cp_s), (p, tp_s, cp_s)
assert close(p["compute_s"], K * model / (tp * cp) + grads + tp_s + cp_s), p
print("tp/cp terms match: compute", p["compute_s"], "tp", tp_s, "cp", cp_s)
for name, plans in (("V 8192", free), ("T 4096", cfree)):
    best = plans[0]
    assert (best["w"], best["tp"], best["cp"]) == (4, 1, 1), (name, best)
    print(f"{name}, no memory limit: data parallelism: {best}")
# 25 MiB per rank: a whole model per rank needs more, whatever the micro-batch or recompute
assert tight and all(x["tp"] > 1 and x["mem_bytes"] <= 0.025 * 2**30 for x in tight), tight
assert not any(x["tp"] == 1 for x in tight)
print("25 MiB per rank: every fitting plan has tp > 1; best:", tight[0])
# 30 MiB per rank with T 4096: only splitting the sequence fits
assert ctight and all(x["cp"] > 1 and x["mem_bytes"] <= 0.03 * 2**30 for x in ctight), ctight
print("30 MiB per rank at T 4096: every fitting plan has cp > 1; best:", ctight[0])
PY
# the planner's memory is the dry-run's for the chosen layouts
for pj in tp_tight cp_tight; do
    read -r w dd tp cp b rc sl mem < <($PY -c "import json; p=json.load(open('$d/$pj.json'))[0]; print(p['w'], p['d'], p['tp'], p['cp'], p['micro_batch'], int(p['recompute']), p['stage_layers'], p['mem_bytes'])")
    src=big; [ $pj = cp_tight ] && src=long
    shape=$($PY -c "import json; m=json.load(open('$d/$src.json')); c=m['model']; print(f\"--layers {c['layers']} --heads {c['heads']} --dim {c['dim']} --vocab {c['vocab']} --block-size {c['block_size']} --seq {m['seq']}\")")
    flags="$shape --batch $b --dp $w --tp $tp --cp $cp"; [ "$rc" = 1 ] && flags="$flags --recompute"
    [ "$dd" -gt 1 ] && flags="$flags --pp $dd --schedule 2bw --stage-layers $sl"
    total=$($LOOM train --data none $flags --dry-run | sed -n 's/.*total \([0-9.]*\) MiB.*/\1/p')
    awk -v t="$total" -v m="$mem" -v f="$flags" 'BEGIN { printf "%s: plan %.3f MiB, dry-run %s MiB\n", f, m / 1048576, t
        d = m / 1048576 - t; exit !(t != "" && d < 0.006 && d > -0.006) }'
done
