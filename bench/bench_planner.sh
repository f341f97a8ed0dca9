#!/usr/bin/env bash
# bench/bench_planner.sh — the planner's predictions against measurements, in one run.
#
#   bench/bench_planner.sh [--steps S (10)] [--warmup W (3)] [--rounds R (2)]
#                          [--settings loopback,1gbit,100mbit] [--model bytes|small]
#                          [--global-batch G (8)] [--out DIR] [--no-wait]
#
# 1. Profiles the model once (`loom plan --save-profile`, 1 thread, alone on the machine).
# 2. Per setting and rank count (loopback: 1, 2 and 4 ranks on this 2-core machine; the
#    emulated links: 2 ranks, one per network namespace, sharing the same 2 cores), asks
#    `loom plan` for every plan. Under mpirun it measures the job's links itself (shared memory
#    on loopback; TCP over the emulated link otherwise); --cpu-group tells it that the
#    namespaces' ranks share this machine's cores.
# 3. Runs, per (setting, ranks): the planner's top 2 plans, the best data-parallel plan and the
#    best pipelined plan (and the best dp x pp at 4 ranks), and measures tokens/s (median of
#    loom's step_ms after --warmup steps: the time between consecutive batch ends on rank 0),
#    --rounds times in alternating order; a plan's measurement is the median over rounds.
# Prints predicted vs measured per plan, and per (setting, ranks) whether the planner's top
# choice is the measured best (or within 10% of it) and whether it picks pipelining exactly
# where pipelining measured best.
# Settings: loopback = scripts/loom-mpirun on this machine; 1gbit = namespaces on a bridge
# shaped with tbf (bench/netlab/setup.sh); 100mbit = TAPs joined by wirelay (100 Mbit/s, 5 ms).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS=10; WARMUP=3; ROUNDS=2; SETTINGS="loopback,1gbit,100mbit"; MODEL=bytes; G=8; OUT=""; WAIT=1
PY=/usr/bin/python3; LOOM="$ROOT/loom"
PEER_DIR="$ROOT/tests"   # the PyTorch peer, tests/torch_gpt.py
usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --steps) STEPS="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --settings) SETTINGS="$2"; shift 2 ;;
        --model) MODEL="$2"; shift 2 ;;
        --global-batch) G="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --no-wait) WAIT=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "bench_planner.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ "$STEPS" -gt "$((WARMUP + 2))" ] || { echo "bench_planner.sh: --steps must exceed --warmup + 2" >&2; exit 2; }
[ -x "$LOOM" ] || { echo "bench_planner.sh: no loom binary at $LOOM (run 'make')" >&2; exit 2; }
case "$MODEL" in
    bytes) read -r L H C V T <<<"8 4 256 256 128" ;;
    small) read -r L H C V T <<<"8 4 256 50257 128" ;;
    *) echo "bench_planner.sh: --model bytes|small" >&2; exit 2 ;;
esac
[[ "$SETTINGS" == loopback ]] || [ "$(id -u)" -eq 0 ] || { echo "bench_planner.sh: emulated links need root" >&2; exit 2; }
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/loom-bench-planner.XXXXXX)"
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"
export NETLAB_NS=lpl WIRELAY_DIR="$OUT/wirelay" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NETLAB="$ROOT/bench/netlab"
cleanup() { "$NETLAB/teardown.sh" >>"$OUT/netlab.log" 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns list | awk '{print $1}' | grep -qE '^lpl(sw|[0-9]+)$' && cleanup
if [ "$WAIT" = 1 ]; then  # never two benchmarks at once on this 2-core host
    for ((i = 0; i < 60; i++)); do
        pgrep -f 'bench_dp.sh|bench_train.sh|bench_co2.sh|bench_pipeline.sh|convergence.sh' >/dev/null || break
        [ "$i" = 0 ] && echo "waiting for another benchmark to finish (polling every 30 s, at most 30 min)"
        sleep 30
    done
fi

cp "$LOOM" "$OUT/loom"; BIN="$OUT/loom"; NPROC=$(getconf _NPROCESSORS_ONLN)
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $NPROC cores"
    echo "loadavg_start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "loom_git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    echo "model: L$L H$H C$C V$V T$T, global batch $G sequences, 1 thread per rank"
    echo "invocation: $0 --steps $STEPS --warmup $WARMUP --rounds $ROUNDS --settings $SETTINGS --model $MODEL --global-batch $G"
} | tee "$OUT/machine.txt"

MODELF=(--layers "$L" --heads "$H" --dim "$C" --vocab "$V" --block-size "$T" --seq "$T")
DATA="$OUT/tokens.bin"
$PY "$PEER_DIR/torch_gpt.py" tokens --vocab "$V" --n $((STEPS * G * T + 4096)) --seed 1 --out "$DATA" >/dev/null
envv=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE)
xs=(-x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x OMP_WAIT_POLICY)
mkdir -p "$OUT/hosts"; printf 'n%d slots=1\n' 0 1 >"$OUT/hosts/hosts.2"
NETNS_MCA=(--hostfile "$OUT/hosts/hosts.2" --mca plm_rsh_agent "$NETLAB/rsh-netns" --mca plm_rsh_no_tree_spawn 1
           --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24)
# launch SETTING NP CMD...: the command on NP ranks of that setting
launch() {
    local s=$1 np=$2; shift 2
    if [ "$np" = 1 ]; then env "${envv[@]}" "$@"
    elif [ "$s" = loopback ]; then env "${envv[@]}" "$ROOT/scripts/loom-mpirun" --oversubscribe -np "$np" "${xs[@]}" "$@"
    else ip netns exec lpl0 env "${envv[@]}" "$ROOT/scripts/loom-mpirun" -np "$np" "${NETNS_MCA[@]}" "${xs[@]}" "$@"; fi
}

echo "== profile"
env "${envv[@]}" "$BIN" plan "${MODELF[@]}" --threads 1 --max-micro-batch 8 --workers 1 --global-batch "$G" \
    --save-profile "$OUT/profile.json" >/dev/null 2>"$OUT/profile.log"
: > "$OUT/results.jsonl"
START=$(date +%s)
IFS=',' read -r -a SETLIST <<<"$SETTINGS"
for s in "${SETLIST[@]}"; do
    case "$s" in
        loopback) NPS="1 2 4"; GROUP=() ;;
        1gbit) NPS="2"; GROUP=(--cpu-group 2); "$NETLAB/setup.sh" 2 1gbit >>"$OUT/netlab.log" 2>&1 ;;
        100mbit) NPS="2"; GROUP=(--cpu-group 2); "$NETLAB/setup-tap.sh" 2 1e8 5000 >>"$OUT/netlab.log" 2>&1 ;;
        *) echo "bench_planner.sh: unknown setting '$s'" >&2; exit 2 ;;
    esac
    echo "== $s"
    for np in $NPS; do
        tag="${s}_n$np"
        launch "$s" "$np" "$BIN" plan --profile "$OUT/profile.json" --workers "$np" --global-batch "$G" "${GROUP[@]}" \
            --top 200 --json "$OUT/$tag.plans.json" </dev/null >"$OUT/$tag.plan.txt" 2>"$OUT/$tag.plan.log"
        grep -h "measured" "$OUT/$tag.plan.log" | sed 's/^/   /' || true
        # candidates: the top 2, the best d = 1, the best d = np, the best mixed shape
        $PY - "$OUT/$tag.plans.json" >"$OUT/$tag.pick" <<'PY'
import json, sys
plans = json.load(open(sys.argv[1]))
pick = plans[:2]
for shape in (lambda p: p["d"] == 1, lambda p: p["w"] == 1 and p["d"] > 1, lambda p: p["w"] > 1 and p["d"] > 1):
    best = next((p for p in plans if shape(p)), None)
    if best and best not in pick:
        pick.append(best)
for i, p in enumerate(pick):
    print(json.dumps(dict(p, rank_in_plan=plans.index(p) + 1)))
PY
        for ((rd = 1; rd <= ROUNDS; rd++)); do
        if [ $((rd % 2)) = 1 ]; then cat "$OUT/$tag.pick"; else tac "$OUT/$tag.pick"; fi >"$OUT/$tag.order"
        while read -r pj; do
            read -r w d b k rc sl pred rk < <($PY -c 'import json,sys; p=json.loads(sys.argv[1]); print(p["w"], p["d"], p["micro_batch"], p["grad_accum"], int(p["recompute"]), p["stage_layers"] or "-", p["tokens_per_s"], p["rank_in_plan"])' "$pj")
            flags=(--dp "$w" --pp "$d" --batch "$b" --grad-accum "$k")
            [ "$d" -gt 1 ] && flags+=(--schedule 2bw --stage-layers "$sl")
            [ "$rc" = 1 ] && flags+=(--recompute)
            run="${tag}_w${w}_d${d}_b${b}_rc${rc}_r$rd"
            echo "\$ ${flags[*]}" >>"$OUT/commands.txt"
            rcode=0
            launch "$s" "$((w * d))" timeout -k 10 600 "$BIN" train --data "$DATA" "${MODELF[@]}" "${flags[@]}" \
                --steps "$STEPS" --threads 1 --progress off --metrics "$OUT/$run.jsonl" </dev/null >"$OUT/$run.log" 2>&1 || rcode=$?
            $PY - "$OUT/$run.jsonl" "$pj" "$s" "$np" "$WARMUP" "$rcode" "$rd" <<'PY' | tee -a "$OUT/results.jsonl" | $PY -c 'import json,sys; r=json.loads(sys.stdin.read()); print("   %-8s n=%d w%d d%d b%d rc%d r%d: predicted %.0f, measured %s tok/s" % (r["setting"], r["ranks"], r["w"], r["d"], r["b"], r["recompute"], r["round"], r["predicted"], r.get("measured", "FAILED")))'
import json, statistics, sys
path, pj, s, np, warm, rc, rd = sys.argv[1:]
p = json.loads(pj)
r = {"setting": s, "ranks": int(np), "round": int(rd), "w": p["w"], "d": p["d"], "b": p["micro_batch"], "K": p["grad_accum"],
     "recompute": int(p["recompute"]), "stages": p["stage_layers"], "predicted": p["tokens_per_s"],
     "rank_in_plan": p["rank_in_plan"]}
try:
    rows = [json.loads(l) for l in open(path) if "step_ms" in l][int(warm):]
    if int(rc) == 0 and rows:
        ms = statistics.median(x["step_ms"] for x in rows)
        tokens = rows[0]["tokens_per_s"] * rows[0]["step_ms"] / 1000
        r["measured"] = round(tokens / ms * 1000, 1)
        r["error_pct"] = round(100 * (r["predicted"] - r["measured"]) / r["measured"], 1)
except OSError:
    pass
print(json.dumps(r))
PY
        done <"$OUT/$tag.order"
        done
    done
    [ "$s" = loopback ] || cleanup
done
echo "total bench time: $(($(date +%s) - START)) s   loadavg_end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
echo "raw results: $OUT"
$PY - "$OUT" <<'PY' | tee "$OUT/summary.md"
import json, statistics, sys
out = sys.argv[1]
raw = [json.loads(l) for l in open(f"{out}/results.jsonl")]
names = {"loopback": "loopback (shared memory)", "1gbit": "1 Gbit/s (tbf)", "100mbit": "100 Mbit/s + 5 ms"}
rows = {}   # one per plan: measured = median over rounds
for r in raw:
    k = (r["setting"], r["ranks"], r["w"], r["d"], r["b"], r["recompute"])
    rows.setdefault(k, dict(r, runs=[]))
    if "measured" in r:
        rows[k]["runs"].append(r["measured"])
rows = list(rows.values())
for r in rows:
    if r["runs"]:
        r["measured"] = statistics.median(r["runs"])
        r["error_pct"] = 100 * (r["predicted"] - r["measured"]) / r["measured"]
    else:
        r.pop("measured", None), r.pop("error_pct", None)
print("| link | ranks | dp | pp | micro-batch | K | recompute | planner rank | predicted tok/s | measured tok/s (runs) | error |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    m = f"{r['measured']:,.0f} (" + " / ".join(f"{x:,.0f}" for x in r["runs"]) + ")" if "measured" in r else "failed"
    e = f"{r['error_pct']:+.0f}%" if "error_pct" in r else "—"
    print(f"| {names.get(r['setting'], r['setting'])} | {r['ranks']} | {r['w']} | {r['d']} | {r['b']} | {r['K']} | {r['recompute']} | {r['rank_in_plan']} | {r['predicted']:,.0f} | {m} | {e} |")
ok = [r for r in rows if "error_pct" in r]
within = sum(1 for r in ok if abs(r["error_pct"]) <= 25)
print(f"\n{within} of {len(ok)} plans predicted within 25%.\n")
print("| link | ranks | planner's choice | measured best | choice ÷ best | pipelining: planner / measured |")
print("|---|---|---|---|---|---|")
for key in dict.fromkeys((r["setting"], r["ranks"]) for r in ok):
    grp = [r for r in ok if (r["setting"], r["ranks"]) == key]
    top = min(grp, key=lambda r: r["rank_in_plan"])
    best = max(grp, key=lambda r: r["measured"])
    shape = lambda r: f"dp {r['w']} x pp {r['d']}, b {r['b']}{' rc' if r['recompute'] else ''}"
    pp = lambda r: "yes" if r["d"] > 1 else "no"
    print(f"| {names.get(key[0], key[0])} | {key[1]} | {shape(top)} | {shape(best)} | {top['measured'] / best['measured']:.2f} | {pp(top)} / {pp(best)} |")
PY
