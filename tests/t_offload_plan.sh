#!/usr/bin/env bash
# t_offload_plan.sh — `loom plan --offload disk` on tiny models, in a temporary directory:
#   * its JSON line parses; the units cover every block once, in order; the plan fits the
#     budget; a saved profile read back (--profile) gives the same plan;
#   * with no model flags it plans for `loom train`'s defaults (read from `loom train --help`);
#   * a budget nothing fits is refused with the least it needs, and that least (plus the fixed
#     overhead the JSON reports) is enough;
#   * --offload host, a missing --fast-mem or --offload-dir, a bad size and a missing directory
#     are clear errors naming what is wrong.
set -eu
. "$(dirname "$0")/lib.sh"
unset LOOM_OFFLOAD_COSTS # the start-up measurements are part of what is tested
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkdir "$d/tier"
dim=32
M=(--layers 3 --heads 2 --dim "$dim" --vocab 64 --block-size 16 --batch 2 --seq 16 --grad-accum 2
   --threads 1 --tier-probe 1M)
OFF=(--offload disk --offload-dir "$d/tier")
fm=$(fastmem 40)

$LOOM plan "${OFF[@]}" --fast-mem "$fm" "${M[@]}" --recompute --save-profile "$d/prof.json" \
    > "$d/out.txt"
cat "$d/out.txt"
grep '^{' "$d/out.txt" > "$d/plan.json"
$LOOM plan "${OFF[@]}" --fast-mem "$fm" "${M[@]}" --recompute --profile "$d/prof.json" \
    --json "$d/again.json" > /dev/null
$PY - "$d/plan.json" "$d/again.json" "${fm%M}" <<'PY'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, "want one JSON line, got %d" % len(lines)
j = json.loads(lines[0])
units, nb = j["units"], 3 + 2
assert len(units) >= 2 and units[0][0] == 0 and units[-1][1] == nb - 1, units
assert all(a <= b for a, b in units), units
assert all(n[0] == u[1] + 1 for u, n in zip(units, units[1:])), units
assert 0 < j["peak_fast_bytes"] <= j["budget_bytes"] == int(sys.argv[3]) << 20, j
assert j["predicted_step_ms"] > 0 and j["io_bytes_per_step"] > 0 and 1 <= j["prefetch"] <= 4, j
assert j["read_bps"] > 0 and j["write_bps"] > 0, j
assert j["opt_read_bps"] > 0 and j["opt_write_bps"] > 0, j  # the optimizer's stream, measured
assert j["read_cpu_s_per_gb"] >= 0 and j["write_cpu_s_per_gb"] >= 0 and 0 <= j["io_steal"] <= 1, j
assert j["predicted_step_ms"] >= max(j["compute_ms"], j["io_bound_ms"]) * (1 - 1e-9), j
# the profile read back: the same block costs (the tier is measured again: compare the grouping)
k = json.load(open(sys.argv[2]))
assert abs(k["compute_ms"] - j["compute_ms"]) <= 1e-6 * j["compute_ms"], (j, k)
print("ok: units", units, "prefetch", j["prefetch"])
PY

# no model flags: train's defaults
want=$($LOOM train --help 2>&1 | awk '
    /^ +--(layers|heads|dim|vocab|batch|seq|grad-accum) / { gsub(/[][]/, "", $NF); v[$1] = $NF }
    END { printf "L%s H%s C%s V%s (|micro-batch %s x T %s, grad-accum %s,", v["--layers"],
          v["--heads"], v["--dim"], v["--vocab"], v["--batch"], v["--seq"], v["--grad-accum"] }')
got=$($LOOM plan "${OFF[@]}" --fast-mem 1G --threads 1 --tier-probe 1M 2>/dev/null | head -1)
for w in "${want%%|*}" "${want#*|}"; do
    grep -qF -- "$w" <<<"$got" || { echo "FAILED: defaults: want '$w' in '$got'"; exit 1; }
done
echo "ok: defaults $want"

# too small: the error states the least, and the least is enough. The first budget is below
# anything a plan can need whatever the optimizer's pieces: less than one layer's weights
# (12·dim² floats; a slot holds a unit's parameters and gradients). --fast-mem bounds the whole
# process: the least it takes is the plan's least plus the fixed overhead the planner measures
# (the JSON's overhead_bytes; it varies by a few hundred KiB between runs, hence 1 MiB margins).
P=("${OFF[@]}" "${M[@]}" --recompute --profile "$d/prof.json")
tiny=$((12 * dim * dim * 4 / 1024 - 1))K
expect_fail "needs at least" $LOOM plan "${P[@]}" --fast-mem "$tiny"
least=$($LOOM plan "${P[@]}" --fast-mem "$tiny" 2>&1 |
    sed -n 's/.*needs at least \([0-9.]*\) MiB.*/\1/p')
[ -n "$least" ] || { echo "FAILED: no 'at least N MiB' in the error"; exit 1; }
ovh=$($LOOM plan "${P[@]}" --fast-mem "$fm" | $PY -c '
import json, sys
print([json.loads(l) for l in sys.stdin if l.startswith("{")][0]["overhead_bytes"] / 2**20)')
below=$($PY -c "print('%dK' % int((float('$least') + float('$ovh')) * 1024 - 1024))")
above=$($PY -c "print('%dK' % int((float('$least') + float('$ovh')) * 1024 + 1024))")
[ "${below%K}" -gt "${tiny%K}" ] || { echo "FAILED: the least $least MiB is below $tiny"; exit 1; }
expect_fail "needs at least $least MiB" $LOOM plan "${P[@]}" --fast-mem "$below"
expect_fail "fixed overhead" $LOOM plan "${P[@]}" --fast-mem "$below"
$LOOM plan "${P[@]}" --fast-mem "$above" > /dev/null
echo "ok: the least $least MiB + the fixed overhead $ovh MiB is enough, 2 MiB less is not"

# bad input
expect_fail "plans at start-up on its device" $LOOM plan --offload host --offload-dir "$d/tier" \
    --fast-mem "$fm" "${M[@]}"
expect_fail "--fast-mem" $LOOM plan "${OFF[@]}" "${M[@]}"
expect_fail "--offload-dir" $LOOM plan --offload disk --fast-mem "$fm" "${M[@]}"
expect_fail "--fast-mem: '12Q' is not a size" $LOOM plan "${OFF[@]}" --fast-mem 12Q "${M[@]}"
expect_fail "$d/missing" $LOOM plan --offload disk --offload-dir "$d/missing" --fast-mem "$fm" \
    "${M[@]}"
expect_fail "no row for micro-batch 4" $LOOM plan "${P[@]}" --fast-mem "$fm" --batch 4
# the plain planner is unchanged by the new flags' presence elsewhere
$LOOM plan --profile "$d/prof.json" --workers 1 --global-batch 2 --top 1 > /dev/null
echo "all ok"
