#!/usr/bin/env bash
# bench/bench_co2.sh — CO2 against synchronous data parallelism on emulated links, in one run.
#
#   bench/bench_co2.sh [--rounds R (2)] [--slow-rounds R (1)] [--tau N (12)] [--co2-rounds N (4)]
#                      [--warm-rounds N (2)]
#                      [--dp-steps S (6)] [--accum-steps S (4)] [--accum K (4)]
#                      [--settings loopback,1gbit,100mbit-tbf,100mbit] [--modes co2,dp,dp-accum]
#                      [--model small|30m] [--out DIR]
#                      [--loom PATH] [--no-wait]
#
# 2 ranks x 1 thread, model small = L4 H4 C256 V50257 T128 B4 (16.1M params, a 64 MB
# all-reduce) or 30m = L6 H6 C384 V50257 T256 B4 (30.0M, 120 MB). Per setting and round (order alternates):
#   co2      --co2 --tau N, N*co2-rounds steps; the first warm-rounds rounds are not timed (the
#            first outer all-reduce starts at the end of round 1 and is waited for at the end of
#            round 2; on the slow link that first one was not hidden, see BENCHMARKS.md)
#   dp       synchronous DP (bucketed all-reduce overlapped with backward), dp-steps steps
#   dp-accum synchronous DP with --grad-accum K (one all-reduce per K micro-batches)
# Settings:
#   loopback  scripts/loom-mpirun -np 2 on this machine (shared memory)
#   1gbit     namespaces lco0/lco1 on a bridge, each link 1 Gbit/s each way (tbf; bench/netlab/setup.sh)
#   100mbit-tbf  the bridge of 1gbit shaped to 100 Mbit/s (tbf, in the kernel; no added delay)
#   100mbit   TAP devices joined by wirelay at 100 Mbit/s and 5 ms one-way delay (setup-tap.sh;
#             wirelay is a user-space process on the same 2 cores: it costs the ranks CPU)
# DP throughput is wall clock: rank 0 writes its metrics into a FIFO that a reader timestamps
# line by line, and tok/s = tokens of the steps between two lines / time between them (the
# first step skipped). CO2 writes its lines a round at a time (a round's losses are averaged by
# one all-reduce), so its tok/s comes from loom's step_ms over whole rounds after
# --warm-rounds; a round's last step_ms includes the round-end work (Δ, applying the stale
# average, any wait for it).
# A cell is the median over rounds. Everything (namespaces, wirelay) is removed on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS=2; SLOW_ROUNDS=1; TAU=12; CO2_ROUNDS=4; WARM_ROUNDS=2; DP_STEPS=6; ACC_STEPS=4; ACC=4
SETTINGS="loopback,1gbit,100mbit"; MODESARG="co2,dp,dp-accum"; MODEL=small; OUT=""; LOOM="$ROOT/loom"; WAIT=1
PY=/usr/bin/python3
PEER_DIR="$ROOT/tests"   # the PyTorch peer, tests/torch_gpt.py
RUN_TIMEOUT=600

usage() { sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --slow-rounds) SLOW_ROUNDS="$2"; shift 2 ;;
        --tau) TAU="$2"; shift 2 ;;
        --co2-rounds) CO2_ROUNDS="$2"; shift 2 ;;
        --warm-rounds) WARM_ROUNDS="$2"; shift 2 ;;
        --dp-steps) DP_STEPS="$2"; shift 2 ;;
        --accum-steps) ACC_STEPS="$2"; shift 2 ;;
        --accum) ACC="$2"; shift 2 ;;
        --settings) SETTINGS="$2"; shift 2 ;;
        --modes) MODESARG="$2"; shift 2 ;;
        --model) MODEL="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --loom) LOOM="$2"; shift 2 ;;
        --no-wait) WAIT=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "bench_co2.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ "$CO2_ROUNDS" -gt "$WARM_ROUNDS" ] && [ "$WARM_ROUNDS" -ge 1 ] || { echo "bench_co2.sh: need --co2-rounds > --warm-rounds >= 1" >&2; exit 2; }
[ "$DP_STEPS" -ge 3 ] && [ "$ACC_STEPS" -ge 3 ] || { echo "bench_co2.sh: step counts must be >= 3" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "bench_co2.sh: needs root (network namespaces)" >&2; exit 2; }
[ -x "$LOOM" ] || { echo "bench_co2.sh: no loom binary at $LOOM (run 'make')" >&2; exit 2; }
case "$MODEL" in
    small) read -r L H C V T B <<<"4 4 256 50257 128 4" ;;
    30m) read -r L H C V T B <<<"6 6 384 50257 256 4" ;;
    *) echo "bench_co2.sh: --model small|30m" >&2; exit 2 ;;
esac
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/loom-bench-co2.XXXXXX)"
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"

export NETLAB_NS=lco WIRELAY_DIR="$OUT/wirelay"
NETLAB="$ROOT/bench/netlab"
cleanup() { "$NETLAB/teardown.sh" >>"$OUT/netlab.log" 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns list | awk '{print $1}' | grep -qE '^lco(sw|[0-9]+)$' && cleanup

if [ "$WAIT" = 1 ]; then  # never two benchmarks at once on this 2-core host
    for ((i = 0; i < 60; i++)); do
        pgrep -f 'bench_dp.sh|bench_train.sh|bench_pipeline.sh|convergence.sh' >/dev/null || break
        [ "$i" = 0 ] && echo "waiting for another benchmark to finish (polling every 30 s, at most 30 min)"
        sleep 30
    done
fi

cp "$LOOM" "$OUT/loom"; BIN="$OUT/loom"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) cores"
    echo "loadavg_start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "loom_git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    echo "model: L$L H$H C$C V$V T$T B$B per rank, 2 ranks x 1 thread"
    echo "invocation: $0 --rounds $ROUNDS --slow-rounds $SLOW_ROUNDS --tau $TAU --co2-rounds $CO2_ROUNDS --warm-rounds $WARM_ROUNDS --dp-steps $DP_STEPS --accum-steps $ACC_STEPS --accum $ACC --settings $SETTINGS --modes $MODESARG --model $MODEL"
} | tee "$OUT/machine.txt"

DATA="$OUT/tokens.bin"
CO2_STEPS=$((TAU * CO2_ROUNDS))
NTOK=$(( (CO2_STEPS > ACC_STEPS * ACC ? CO2_STEPS : ACC_STEPS * ACC) * 2 * B * T + 4096 ))
[ $((DP_STEPS * 2 * B * T + 4096)) -gt "$NTOK" ] && NTOK=$((DP_STEPS * 2 * B * T + 4096))
$PY "$PEER_DIR/torch_gpt.py" tokens --vocab "$V" --n "$NTOK" --seed 1 --out "$DATA" >/dev/null
MODELF=(--layers "$L" --heads "$H" --dim "$C" --vocab "$V" --block-size "$T" --seq "$T" --batch "$B")

mkdir -p "$OUT/hosts"; printf 'n%d slots=1\n' 0 1 >"$OUT/hosts/hosts.2"
NETNS_MCA=(--hostfile "$OUT/hosts/hosts.2" --mca plm_rsh_agent "$NETLAB/rsh-netns" --mca plm_rsh_no_tree_spawn 1
           --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24)

# Timestamps each line arriving on the FIFO argv[1] into argv[2] ("unix_time json").
TSREADER='import sys, time
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "w") as o:
    for line in iter(f.readline, b""):
        o.write("%.6f %s" % (time.time(), line.decode())); o.flush()'

# run_one SETTING ROUND MODE
run_one() {
    local s=$1 r=$2 mode=$3 steps extra=() k=1 win0 tag
    case "$mode" in
        co2) steps=$CO2_STEPS; extra=(--co2 --tau "$TAU") ;;
        dp) steps=$DP_STEPS ;;
        dp-accum) steps=$ACC_STEPS; extra=(--grad-accum "$ACC"); k=$ACC ;;
    esac
    tag="${s}_${mode}_r$r"
    local prog=("$BIN" train --data "$DATA" "${MODELF[@]}" --steps "$steps" --threads 1 --progress off
                --dp 2 --comm-timeout 300 "${extra[@]}" --metrics "$OUT/$tag.fifo")
    local envv=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE)
    local xs=(-x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x OMP_WAIT_POLICY) cmd
    if [ "$s" = loopback ]; then cmd=(env "${envv[@]}" "$ROOT/scripts/loom-mpirun" -np 2 "${xs[@]}" "${prog[@]}")
    else cmd=(ip netns exec lco0 env "${envv[@]}" "$ROOT/scripts/loom-mpirun" -np 2 "${NETNS_MCA[@]}" "${xs[@]}" "${prog[@]}"); fi
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
    $PY - "$OUT" "$tag" "$s" "$r" "$mode" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')" \
        "$((2 * B * T * k))" "$TAU" "$WARM_ROUNDS" <<'PY' | tee -a "$OUT/results.jsonl" | $PY -c 'import json,sys; r=json.loads(sys.stdin.read()); print("   %-9s %-8s r%d: " % (r["setting"], r["mode"], r["round"]) + ("FAILED rc=%d: %s" % (r["rc"], " | ".join(r.get("tail", []))) if r.get("failed") else "%.0f tok/s wall (loom-reported %.0f), exposed comm %.1f%%, wall %.0f s" % (r["tps"], r["tps_reported"], r["exposed_pct"], r["wall_s"])))'
import json, statistics, sys
out, tag, s, rnd, mode, rc, wall, tokens_per_step, tau, warm = sys.argv[1:]
tokens_per_step, tau, warm = int(tokens_per_step), int(tau), int(warm)
r = {"tag": tag, "setting": s, "round": int(rnd), "mode": mode, "rc": int(rc), "wall_s": float(wall)}
rows = []
try:
    for line in open(f"{out}/{tag}.ts"):
        t, j = line.split(" ", 1)
        j = json.loads(j)
        if "step_ms" in j: rows.append((float(t), j))
except OSError:
    pass
rows.sort(key=lambda x: x[1]["step"])
if mode == "co2":
    # CO2's lines arrive a round at a time (a round's losses are averaged by one all-reduce), so
    # its time comes from loom's step_ms, which includes the round-end work and any wait
    r["exposed_ms_per_round"] = [round(j["comm_exposed_ms"]) for _, j in rows if j["step"] % tau == 0 and "comm_exposed_ms" in j]
    M = len(rows) // tau
    timed = [j for _, j in rows if warm * tau < j["step"] <= M * tau]
    if int(rc) == 0 and timed:
        total = sum(j["step_ms"] for j in timed)
        r["window"] = [timed[0]["step"], timed[-1]["step"]]
        r["tps"] = r["tps_reported"] = round(tokens_per_step * len(timed) / total * 1000, 1)
        r["median_step_ms"] = round(statistics.median(j["step_ms"] for j in timed), 1)
        r["wall_step_ms"] = round(total / len(timed), 1)
        r["exposed_pct"] = round(100 * sum(j.get("comm_exposed_ms", 0) for j in timed) / total, 1)
    else:
        r["failed"] = True
        r["tail"] = open(f"{out}/{tag}.log", errors="replace").read().strip().splitlines()[-6:]
    print(json.dumps(r))
    sys.exit(0)
# DP logs step S at its end: the window spans iterations 2 .. last by wall clock
lo, hi, shift = 0, len(rows) - 1, 1
if int(rc) == 0 and len(rows) >= 2 and hi > lo >= 0:
    steps = rows[hi][1]["step"] - rows[lo][1]["step"]
    dt = rows[hi][0] - rows[lo][0]
    r["window"] = [rows[lo][1]["step"], rows[hi][1]["step"]]
    r["tps"] = round(tokens_per_step * steps / dt, 1)
    timed = [j for _, j in rows[lo + shift:hi + shift]]   # the iterations inside the window
    r["tps_reported"] = round(tokens_per_step * len(timed) / sum(j["step_ms"] for j in timed) * 1000, 1)
    r["median_step_ms"] = round(statistics.median(j["step_ms"] for j in timed), 1)
    r["wall_step_ms"] = round(dt / steps * 1000, 1)
    r["exposed_pct"] = round(100 * sum(j.get("comm_exposed_ms", 0) for j in timed) / (dt * 1000), 1)
else:
    r["failed"] = True
    r["tail"] = open(f"{out}/{tag}.log", errors="replace").read().strip().splitlines()[-6:]
print(json.dumps(r))
PY
    return 0
}

START=$(date +%s)
IFS=',' read -r -a SETLIST <<<"$SETTINGS"
IFS=',' read -r -a MODES <<<"$MODESARG"
for s in "${SETLIST[@]}"; do
    case "$s" in
        loopback) R=$ROUNDS ;;
        1gbit) R=$ROUNDS; "$NETLAB/setup.sh" 2 1gbit >>"$OUT/netlab.log" 2>&1
               echo "\$ NETLAB_NS=lco bench/netlab/setup.sh 2 1gbit" >>"$OUT/commands.txt" ;;
        100mbit-tbf) R=$SLOW_ROUNDS; "$NETLAB/setup.sh" 2 100mbit >>"$OUT/netlab.log" 2>&1
               echo "\$ NETLAB_NS=lco bench/netlab/setup.sh 2 100mbit" >>"$OUT/commands.txt" ;;
        100mbit) R=$SLOW_ROUNDS; "$NETLAB/setup-tap.sh" 2 1e8 5000 >>"$OUT/netlab.log" 2>&1
               echo "\$ NETLAB_NS=lco bench/netlab/setup-tap.sh 2 1e8 5000" >>"$OUT/commands.txt" ;;
        *) echo "bench_co2.sh: unknown setting '$s' (loopback|1gbit|100mbit-tbf|100mbit)" >&2; exit 2 ;;
    esac
    echo "== $s"
    for ((r = 1; r <= R; r++)); do
        order=$(seq 0 $((${#MODES[@]} - 1))); [ $((r % 2)) = 1 ] || order=$(seq $((${#MODES[@]} - 1)) -1 0)
        for i in $order; do run_one "$s" "$r" "${MODES[$i]}"; done
    done
    [ "$s" = loopback ] || cleanup
done
echo "total bench time: $(($(date +%s) - START)) s   loadavg_end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
echo "raw results: $OUT"
$PY - "$OUT" "$TAU" "$ACC" <<'PY' | tee "$OUT/summary.md"
import json, statistics, sys
out, tau, acc = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [json.loads(l) for l in open(f"{out}/results.jsonl")]
ok = [r for r in rows if not r.get("failed")]
def med(s, m, key="tps"):
    v = [r[key] for r in ok if r["setting"] == s and r["mode"] == m]
    return (statistics.median(v), v) if v else (None, [])
names = {"loopback": "loopback (shared memory)", "1gbit": "1 Gbit/s (tbf)", "100mbit-tbf": "100 Mbit/s (tbf)", "100mbit": "100 Mbit/s + 5 ms (wirelay)"}
label = {"co2": f"CO2 τ={tau}", "dp": "sync DP", "dp-accum": f"sync DP, grad-accum {acc}"}
settings = list(dict.fromkeys(r["setting"] for r in rows))
print("| link | run | tok/s (runs) | ms/step | exposed comm | tok/s loom-reported | CO2 tok/s ÷ this |")
print("|---|---|---|---|---|---|---|")
for s in settings:
    co2, _ = med(s, "co2")
    for m in ("co2", "dp", "dp-accum"):
        t, v = med(s, m)
        if t is None: continue
        ms, _ = med(s, m, "wall_step_ms"); ex, _ = med(s, m, "exposed_pct"); rep, _ = med(s, m, "tps_reported")
        ratio = f"{co2 / t:.2f}×" if co2 and m != "co2" else "—"
        print(f"| {names.get(s, s)} | {label[m]} | {t:,.0f} ({'/'.join(f'{x:,.0f}' for x in v)}) | {ms:,.0f} | {ex:.1f}% | {rep:,.0f} | {ratio} |")
print()
lb, _ = med("loopback", "co2")
for s in settings:
    c, _ = med(s, "co2")
    if c and lb and s != "loopback":
        print(f"CO2 at {names.get(s, s)}: {100 * c / lb:.0f}% of its loopback throughput")
print("\nCO2 exposed wait at each round end, ms (the round-1 average is waited for at the end of round 2):")
for r in ok:
    if r["mode"] == "co2": print(f"  {r['tag']}: {r.get('exposed_ms_per_round')}  (timed window: steps {r['window'][0]}..{r['window'][1]})")
bad = [r for r in rows if r.get("failed")]
if bad:
    print("\nFAILED runs:")
    for r in bad: print(f"  {r['tag']} rc={r['rc']}: " + " | ".join(r.get("tail", [])))
PY
