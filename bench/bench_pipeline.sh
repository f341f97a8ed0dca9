#!/usr/bin/env bash
# bench/bench_pipeline.sh — pipeline schedules (gpipe, 1f1b, 2bw) against data parallelism on
# the same ranks, on loopback and on emulated links, in one run.
#
#   bench/bench_pipeline.sh [--rounds R (1)] [--steps S (5)] [--warmup W (2)] [--k 2,4,8] [--d 2,4]
#                           [--net-settings 1gbit,100mbit] [--net-k 4] [--net-steps S (4)]
#                           [--modes gpipe,1f1b,2bw,dp] [--merge DIR] [--model small|bytes|tiny]
#                           [--out DIR] [--loom PATH] [--no-wait]
#
# Model small = L8 H4 C256 V50257 T128 B2 (19.6M params; block 128), bytes = L8 H4 C256 V256
# T128 B2 (6.4M params: byte-level like the bundled corpus, so the stages balance), tiny = L4
# H2 C64 V256 T32 B2; 1 thread per rank.
# Per D (stages = ranks) and K (micro-batches per step):
#   gpipe / 1f1b / 2bw   --pp D --grad-accum K --schedule X        (global batch K*B)
#   dp                   --dp D --grad-accum max(1, K/D)           (global batch D*max(1,K/D)*B)
# (1f1b and 2bw need K >= D in loom, so D=4 K=2 runs gpipe and dp only)
# plus a single-rank, single-thread baseline (--grad-accum 2) giving T1, the compute time of
# one micro-batch through the whole model. D=4 on this 2-core host is oversubscribed.
# The emulated links (D=2 and --net-k only): 1gbit = namespaces lpp0/lpp1 on a bridge shaped
# with tbf (bench/netlab/setup.sh); 100mbit = TAPs joined by wirelay, 100 Mbit/s, 5 ms one way.
# Step time is wall clock: rank 0 writes its metrics into a FIFO that a reader timestamps, and
# step time = (time of the third-to-last line - time of the line of step --warmup) / the steps
# between them (a 2bw run's line for batch t comes when its delayed update is applied, about a
# batch later, so its last two lines come after the final drain). loom's own step_ms (the time
# between consecutive batch ends on rank 0) is shown as "loom-reported", a median over the
# steps after --warmup. tok/s = global tokens per step / step time.
# --merge DIR adds the results of an earlier run (DIR/results.jsonl) for cells this run did not
# measure; --modes limits the pipeline/dp runs.
# Bubble estimate (the formula): the slowest stage's compute per micro-batch is
#   t_stage = T1 * max(f_max, 1/min(D, cores))
# where f_max is that stage's share of the model's cost under loom's own partition cost model
# (embed C, layer 12C^2+2TC, head V*C per token; the same linear partition loom computes), and
# 1/min(D, cores) is the share a core can at best take when D ranks share the cores. The ideal
# step is K * t_stage, so bubble = 1 - K * t_stage / step. It folds in stage imbalance only
# through f_max; everything else (fill/drain, communication, the tied-embedding all-reduce, the
# optimizer) counts as bubble. The textbook flush bubble (D-1)/(K+D-1) is shown beside it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS=1; STEPS=6; MODES="gpipe,1f1b,2bw,dp"; MERGE=""; WARMUP=2; KS="2,4,8"; DS="2,4"; NET="1gbit,100mbit"; NETK="4"; NETSTEPS=4
MODEL=small; OUT=""; LOOM="$ROOT/loom"; WAIT=1; PY=/usr/bin/python3
PEER_DIR="$ROOT/tests"   # the PyTorch peer, tests/torch_gpt.py
RUN_TIMEOUT=600
usage() { sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --steps) STEPS="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --k) KS="$2"; shift 2 ;;
        --d) DS="$2"; shift 2 ;;
        --net-settings) NET="$2"; shift 2 ;;
        --net-k) NETK="$2"; shift 2 ;;
        --net-steps) NETSTEPS="$2"; shift 2 ;;
        --model) MODEL="$2"; shift 2 ;;
        --modes) MODES="$2"; shift 2 ;;
        --merge) MERGE="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --loom) LOOM="$2"; shift 2 ;;
        --no-wait) WAIT=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "bench_pipeline.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ "$STEPS" -gt $((WARMUP + 2)) ] && [ "$NETSTEPS" -gt $((WARMUP + 2)) ] || { echo "bench_pipeline.sh: steps must exceed --warmup + 2" >&2; exit 2; }
[ -x "$LOOM" ] || { echo "bench_pipeline.sh: no loom binary at $LOOM (run 'make')" >&2; exit 2; }
case "$MODEL" in
    small) read -r L H C V T B <<<"8 4 256 50257 128 2" ;;
    bytes) read -r L H C V T B <<<"8 4 256 256 128 2" ;;
    tiny) read -r L H C V T B <<<"4 2 64 256 32 2" ;;
    *) echo "bench_pipeline.sh: --model small|bytes|tiny" >&2; exit 2 ;;
esac
[ -n "$NET" ] && [ "$(id -u)" -ne 0 ] && { echo "bench_pipeline.sh: emulated links need root; pass --net-settings ''" >&2; exit 2; }
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/loom-bench-pipeline.XXXXXX)"
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"

export NETLAB_NS=lpp WIRELAY_DIR="$OUT/wirelay"
NETLAB="$ROOT/bench/netlab"
cleanup() { [ -z "$NET" ] || "$NETLAB/teardown.sh" >>"$OUT/netlab.log" 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
if [ -n "$NET" ] && ip netns list | awk '{print $1}' | grep -qE '^lpp(sw|[0-9]+)$'; then cleanup; fi

if [ "$WAIT" = 1 ]; then
    for ((i = 0; i < 60; i++)); do
        pgrep -f 'bench_dp.sh|bench_train.sh|bench_co2.sh|convergence.sh' >/dev/null || break
        [ "$i" = 0 ] && echo "waiting for another benchmark to finish (polling every 30 s, at most 30 min)"
        sleep 30
    done
fi

cp "$LOOM" "$OUT/loom"; BIN="$OUT/loom"; NPROC=$(nproc)
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $NPROC cores"
    echo "loadavg_start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "loom_git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    echo "model: L$L H$H C$C V$V T$T B$B (micro-batch), 1 thread per rank"
    echo "invocation: $0 --rounds $ROUNDS --steps $STEPS --warmup $WARMUP --k $KS --d $DS --net-settings '$NET' --net-k $NETK --net-steps $NETSTEPS --modes $MODES${MERGE:+ --merge $MERGE} --model $MODEL"
} | tee "$OUT/machine.txt"

IFS=',' read -r -a KLIST <<<"$KS"; IFS=',' read -r -a DLIST <<<"$DS"; IFS=',' read -r -a NETLIST <<<"$NET"
IFS="," read -r -a NETKLIST <<<"$NETK"
MAXK=1; for k in "${KLIST[@]}" "${NETKLIST[@]}"; do [ "$k" -gt "$MAXK" ] && MAXK=$k; done
MAXD=1; for d in "${DLIST[@]}"; do [ "$d" -gt "$MAXD" ] && MAXD=$d; done
DATA="$OUT/tokens.bin"
$PY "$PEER_DIR/torch_gpt.py" tokens --vocab "$V" --n $(( (STEPS > NETSTEPS ? STEPS : NETSTEPS) * MAXK * MAXD * B * T + 4096 )) --seed 1 --out "$DATA" >/dev/null
MODELF=(--layers "$L" --heads "$H" --dim "$C" --vocab "$V" --block-size "$T" --seq "$T" --batch "$B")
mkdir -p "$OUT/hosts"; printf 'n%d slots=1\n' 0 1 >"$OUT/hosts/hosts.2"
NETNS_MCA=(--hostfile "$OUT/hosts/hosts.2" --mca plm_rsh_agent "$NETLAB/rsh-netns" --mca plm_rsh_no_tree_spawn 1
           --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24)

# Timestamps each line arriving on the FIFO argv[1] into argv[2] ("unix_time json").
TSREADER='import sys, time
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "w") as o:
    for line in iter(f.readline, b""):
        o.write("%.6f %s" % (time.time(), line.decode())); o.flush()'

# run_one SETTING ROUND MODE D K STEPS
run_one() {
    local s=$1 r=$2 mode=$3 D=$4 K=$5 steps=$6 extra=() tpst
    local tag="${s}_${mode}_d${D}_k${K}_r$r"
    case "$mode" in
        single) extra=(--grad-accum "$K"); tpst=$((B * T * K)) ;;
        dp) local a=$((K / D)); [ "$a" -lt 1 ] && a=1
            extra=(--dp "$D" --grad-accum "$a"); tpst=$((B * T * a * D)) ;;
        *) extra=(--pp "$D" --grad-accum "$K" --schedule "$mode"); tpst=$((B * T * K)) ;;
    esac
    local prog=("$BIN" train --data "$DATA" "${MODELF[@]}" --steps "$steps" --threads 1 --progress off
                --comm-timeout 300 "${extra[@]}" --metrics "$OUT/$tag.fifo")
    local envv=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE)
    local xs=(-x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x OMP_WAIT_POLICY) cmd
    if [ "$mode" = single ]; then cmd=(env "${envv[@]}" "${prog[@]}")
    elif [ "$s" = loopback ]; then cmd=(env "${envv[@]}" "$ROOT/scripts/loom-mpirun" --oversubscribe -np "$D" "${xs[@]}" "${prog[@]}")
    else cmd=(ip netns exec lpp0 env "${envv[@]}" "$ROOT/scripts/loom-mpirun" -np "$D" "${NETNS_MCA[@]}" "${xs[@]}" "${prog[@]}"); fi
    echo "\$ ${cmd[*]}" >>"$OUT/commands.txt"
    rm -f "$OUT/$tag.fifo"; mkfifo "$OUT/$tag.fifo"
    $PY -c "$TSREADER" "$OUT/$tag.fifo" "$OUT/$tag.ts" &
    local rp=$! rc=0 t0 t1
    t0=$(date +%s.%N)
    timeout -k 10 "$RUN_TIMEOUT" "${cmd[@]}" >"$OUT/$tag.log" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    timeout 2 sh -c ": > '$OUT/$tag.fifo'" 2>/dev/null || true   # unblocks a reader that never saw a writer
    wait "$rp" 2>/dev/null || true
    rm -f "$OUT/$tag.fifo"
    $PY - "$OUT" "$tag" "$s" "$r" "$mode" "$D" "$K" "$rc" "$tpst" "$WARMUP" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')" <<'PY' | tee -a "$OUT/results.jsonl" | $PY -c 'import json,sys; r=json.loads(sys.stdin.read()); print("   %-8s %-6s D=%d K=%d r%d: " % (r["setting"], r["mode"], r["D"], r["K"], r["round"]) + ("FAILED rc=%d: %s" % (r["rc"], " | ".join(r.get("tail", []))) if r.get("failed") else "%.0f tok/s, wall step %.0f ms (loom-reported median %.0f ms), run %.0f s" % (r["tps"], r["wall_step_ms"], r["median_ms"], r["wall_s"])))'
import json, statistics, sys
out, tag, s, rnd, mode, D, K, rc, tpst, warm, wall = sys.argv[1:]
r = {"tag": tag, "setting": s, "round": int(rnd), "mode": mode, "D": int(D), "K": int(K), "rc": int(rc),
     "wall_s": float(wall), "tokens_per_step": int(tpst)}
rows = []
try:
    for line in open(f"{out}/{tag}.ts"):
        t, j = line.split(" ", 1)
        j = json.loads(j)
        if "step_ms" in j: rows.append((float(t), j))
except OSError:
    pass
steps = [j for _, j in rows]
timed = steps[int(warm):]
a, b = int(warm) - 1, len(rows) - 3   # lines of step `warm` and of the third-to-last step (the last
# two lines of a 2bw run come after its final drain, a cool-down no steady-state step pays)
if r["rc"] == 0 and timed and b > a >= 0:
    r["median_ms"] = round(statistics.median(j["step_ms"] for j in timed), 1)
    r["wall_step_ms"] = round((rows[b][0] - rows[a][0]) / (b - a) * 1000, 1)
    r["tps"] = round(int(tpst) / r["wall_step_ms"] * 1000, 1)
    r["tps_reported"] = round(int(tpst) / r["median_ms"] * 1000, 1)
    r["step_ms"] = [round(j["step_ms"]) for j in steps]
    r["final_loss"] = steps[-1]["loss"]
else:
    r["failed"] = True
    r["tail"] = open(f"{out}/{tag}.log", errors="replace").read().strip().splitlines()[-6:]
print(json.dumps(r))
PY
    return 0
}

START=$(date +%s)
echo "== loopback"
for ((r = 1; r <= ROUNDS; r++)); do
    run_one loopback "$r" single 1 2 "$STEPS"
    for D in "${DLIST[@]}"; do
        for K in "${KLIST[@]}"; do
            if [ $(((r + K) % 2)) = 0 ]; then order=(gpipe 1f1b 2bw dp); else order=(dp 2bw 1f1b gpipe); fi
            for m in "${order[@]}"; do
                [[ ",$MODES," == *",$m,"* ]] || continue
                # loom: --schedule 1f1b/2bw needs --grad-accum >= --pp
                if [ "$K" -lt "$D" ] && [ "$m" = 1f1b -o "$m" = 2bw ]; then continue; fi
                run_one loopback "$r" "$m" "$D" "$K" "$STEPS"
            done
        done
    done
done
for s in "${NETLIST[@]}"; do
    case "$s" in
        1gbit) "$NETLAB/setup.sh" 2 1gbit >>"$OUT/netlab.log" 2>&1
               echo "\$ NETLAB_NS=lpp bench/netlab/setup.sh 2 1gbit" >>"$OUT/commands.txt" ;;
        100mbit) "$NETLAB/setup-tap.sh" 2 1e8 5000 >>"$OUT/netlab.log" 2>&1
               echo "\$ NETLAB_NS=lpp bench/netlab/setup-tap.sh 2 1e8 5000" >>"$OUT/commands.txt" ;;
        *) echo "bench_pipeline.sh: unknown setting '$s' (1gbit|100mbit)" >&2; exit 2 ;;
    esac
    echo "== $s"
    for K in "${NETKLIST[@]}"; do for m in gpipe 1f1b 2bw dp; do
        [[ ",$MODES," == *",$m,"* ]] && run_one "$s" 1 "$m" 2 "$K" "$NETSTEPS"
    done; done
    cleanup
done
echo "total bench time: $(($(date +%s) - START)) s   loadavg_end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
echo "raw results: $OUT"
$PY - "$OUT" "$NPROC" "$L" "$C" "$V" "$T" "$MERGE" <<'PY' | tee "$OUT/summary.md"
import json, statistics, sys
out, ncores, L, C, V, T, merge = sys.argv[1], *map(int, sys.argv[2:7]), sys.argv[7]
rows = [json.loads(l) for l in open(f"{out}/results.jsonl")]
if merge:
    have = {(r["setting"], r["mode"], r["D"], r["K"]) for r in rows}
    old = [json.loads(l) for l in open(f"{merge}/results.jsonl")]
    for r in old:
        if (r["setting"], r["mode"], r["D"], r["K"]) not in have and not r.get("failed"):
            if "wall_step_ms" not in r and not r.get("failed"):   # an older run: step_ms only
                r["wall_step_ms"] = r["median_ms"]
            r["merged"] = True
            rows.append(r)
ok = [r for r in rows if not r.get("failed")]
cost = [C] + [12 * C * C + 2 * T * C] * L + [V * C]   # loom's block_cost (pipeline.c)
def fmax(D):   # the linear partition minimising the most expensive stage, as loom computes it
    import functools
    pre = [0]
    for c in cost: pre.append(pre[-1] + c)
    nb = len(cost)
    @functools.lru_cache(None)
    def best(k, i):
        if k == 1: return pre[i]
        return min(max(best(k - 1, j), pre[i] - pre[j]) for j in range(k - 1, i))
    return best(D, nb) / pre[nb]
def cell(s, m, D, K, key="tps"):
    v = [r[key] for r in ok if r["setting"] == s and r["mode"] == m and r["D"] == D and r["K"] == K]
    return (statistics.median(v), v) if v else (None, [])
t1, _ = cell("loopback", "single", 1, 2, "median_ms")
if t1: t1 /= 2
print(f"T1 (one micro-batch through the whole model, 1 rank x 1 thread): {t1:.0f} ms" if t1 else "T1: missing")
print()
names = {"loopback": "loopback", "1gbit": "1 Gbit/s", "100mbit": "100 Mbit/s + 5 ms"}
print("| link | D | K | gpipe tok/s | 1f1b tok/s | 2bw tok/s | DP tok/s (accum) | 2bw ÷ 1f1b | bubble gpipe / 1f1b / 2bw | textbook (D−1)/(K+D−1) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for s in dict.fromkeys(r["setting"] for r in rows if r["mode"] != "single"):
    for D in sorted({r["D"] for r in rows if r["setting"] == s and r["mode"] != "single"}):
        for K in sorted({r["K"] for r in rows if r["setting"] == s and r["D"] == D and r["mode"] != "single"}):
            tp = {m: cell(s, m, D, K)[0] for m in ("gpipe", "1f1b", "2bw", "dp")}
            ms = {m: cell(s, m, D, K, "wall_step_ms")[0] for m in ("gpipe", "1f1b", "2bw")}
            f = max(fmax(D), 1 / min(D, ncores))
            bub = [f"{100 * (1 - K * t1 * f / ms[m]):.0f}%" if (ms[m] and t1) else "—" for m in ("gpipe", "1f1b", "2bw")]
            ratio = f"{tp['2bw'] / tp['1f1b']:.2f}×" if tp["2bw"] and tp["1f1b"] else "—"
            fm = lambda x: f"{x:,.0f}" if x else "—"
            acc = max(1, K // D)
            print(f"| {names.get(s, s)} | {D} | {K} | {fm(tp['gpipe'])} | {fm(tp['1f1b'])} | {fm(tp['2bw'])} | {fm(tp['dp'])} ({acc}) | {ratio} | {' / '.join(bub)} | {100 * (D - 1) / (K + D - 1):.0f}% |")
print()
for D in sorted({r["D"] for r in rows if r["mode"] != "single"}):
    print(f"stage cost share of the slowest stage at D={D}: f_max = {fmax(D):.3f}")
print()
print("Median step ms per run (all steps):")
for r in ok: print(f"  {r['tag']}{' (merged)' if r.get('merged') else ''}: wall {r.get('wall_step_ms')} ms/step, loom-reported median {r['median_ms']} ms  steps {r['step_ms']}")
bad = [r for r in rows if r.get("failed")]
if bad:
    print("\nFAILED runs:")
    for r in bad: print(f"  {r['tag']} rc={r['rc']}: " + " | ".join(r.get("tail", [])))
PY
