#!/usr/bin/env bash
# bench/bench_dp.sh — data-parallel benchmark: `loom train --dp N` against PyTorch DDP (gloo,
# bench/torch_ddp.py) on the 30M config, on loopback and on emulated links, in one run.
#
#   bench/bench_dp.sh [--rounds R (2)] [--net-rounds R (2)] [--slow-rounds R (1)]
#                     [--steps S (6)] [--slow-steps S (5)] [--warmup W (2)] [--mem-steps S (4)]
#                     [--settings loopback,1gbit,100mbit] [--ranks 2,4] [--zero1 loopback]
#                     [--max-foreign F (0.10)] [--retries N (2)] [--slow-retries N (0)]
#                     [--budget SECONDS (1200)]
#                     [--out DIR] [--loom PATH] [--peer-dir DIR] [--tiny] [--no-wait]
#
# Settings (ranks get threads = max(1, nproc / N); 4 ranks on 2 cores are CPU-oversubscribed):
#   loopback  plain `scripts/loom-mpirun -np N` on this machine (Open MPI: shared memory + tcp;
#             gloo: TCP over lo). Also runs the single-rank baselines with 2 threads and the
#             ZeRO 2/3 memory sweep (--mem-steps steps each).
#   1gbit     namespaces ldp0..ldp3 on a bridge, every link shaped to 1 Gbit/s each way with tbf
#             (bench/netlab/setup.sh), ranks on hosts n0..n{N-1} via bench/netlab/rsh-netns.
#   100mbit   the same namespaces on TAP devices joined by the userspace switch wirelay at
#             100 Mbit/s and 5 ms one-way delay (bench/netlab/setup-tap.sh 4 1e8 5000).
# Every round of a setting runs, alternating engines (order reversed on even rounds):
#   loom and torch at 1 rank x 1 thread (the scaling baseline; loopback also 1 rank x 2 threads),
#   then per N: loom --zero 0, torch DDP, and loom --zero 1 where the setting is in --zero1.
# Step time: loom's median `step_ms` from --metrics after dropping --warmup steps; torch_ddp.py
# reports the same median for rank 0. tok/s = N*B*T / median step. A cell is the median over
# rounds. Scaling efficiency(N) = tok/s(N ranks) / (N * tok/s(1 rank, same threads per rank)),
# against the same engine's baseline from the same setting. loom's exposed communication =
# sum(comm_exposed_ms) / sum(step_ms) over the timed steps.
# These hosts are shared: each run records the share of the machine's CPU that *other* processes
# took while it ran ("foreign": busy user+system+steal jiffies minus the run's own CPU time and
# wirelay's, over wall x nproc; the run's CPU time comes from a cpuacct cgroup it runs in, since
# Open MPI's remote daemons are not waited-for children). A run above --max-foreign is repeated
# (up to --retries more times, --slow-retries at 100mbit where a step is ~85% waiting on the
# link, while the elapsed time is under --budget); the least disturbed attempt is kept.
# All namespaces and wirelay are removed on exit (trap); nothing leaves the machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS=2; NET_ROUNDS=2; SLOW_ROUNDS=1
STEPS=6; SLOW_STEPS=5; WARMUP=2; MEM_STEPS=4
SETTINGS="loopback,1gbit,100mbit"; RANKS="2,4"; ZERO1="loopback"
LOOM="$ROOT/loom"
PEER_DIR="$ROOT/tests"   # the PyTorch peer, tests/torch_gpt.py
PY=/usr/bin/python3
OUT=""; TINY=0; WAIT=1
RUN_TIMEOUT=600   # seconds per run before it is killed and reported as failed
MAX_FOREIGN=0.10; RETRIES=2; SLOW_RETRIES=0; BUDGET=1200
HZ=$(getconf CLK_TCK)

usage() { sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --net-rounds) NET_ROUNDS="$2"; shift 2 ;;
        --slow-rounds) SLOW_ROUNDS="$2"; shift 2 ;;
        --steps) STEPS="$2"; shift 2 ;;
        --slow-steps) SLOW_STEPS="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --mem-steps) MEM_STEPS="$2"; shift 2 ;;
        --settings) SETTINGS="$2"; shift 2 ;;
        --ranks) RANKS="$2"; shift 2 ;;
        --zero1) ZERO1="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --loom) LOOM="$2"; shift 2 ;;
        --peer-dir) PEER_DIR="$2"; shift 2 ;;
        --max-foreign) MAX_FOREIGN="$2"; shift 2 ;;
        --retries) RETRIES="$2"; shift 2 ;;
        --slow-retries) SLOW_RETRIES="$2"; shift 2 ;;
        --budget) BUDGET="$2"; shift 2 ;;
        --tiny) TINY=1; shift ;;
        --no-wait) WAIT=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "bench_dp.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for s in "$STEPS" "$SLOW_STEPS" "$MEM_STEPS"; do
    if [ "$s" -le "$WARMUP" ]; then echo "bench_dp.sh: every step count must exceed --warmup ($WARMUP)" >&2; exit 2; fi
done
[ "$(id -u)" -eq 0 ] || { echo "bench_dp.sh: needs root (network namespaces)" >&2; exit 2; }
[ -x "$LOOM" ] || { echo "bench_dp.sh: no loom binary at $LOOM (run 'make')" >&2; exit 2; }
[ -f "$PEER_DIR/torch_gpt.py" ] || { echo "bench_dp.sh: no torch_gpt.py in $PEER_DIR" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench_dp.sh: /usr/bin/time missing (apt-get install time)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench_dp.sh: mpirun missing" >&2; exit 2; }
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/loom-bench-dp.XXXXXX)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

# Namespaces use their own prefix so they cannot collide with shared/netlab's mpi* ones.
export NETLAB_NS=ldp WIRELAY_DIR="$OUT/wirelay"
NETLAB="$ROOT/bench/netlab"
# Each run goes into this cpuacct cgroup (so its CPU time includes every process it starts).
CG=/sys/fs/cgroup/cpuacct/loom_bench_dp_$$
mkdir "$CG" 2>/dev/null || CG=""
net_down() { "$NETLAB/teardown.sh" >>"$OUT/netlab.log" 2>&1 || true; }
cleanup() {
    net_down
    if [ -n "$CG" ] && [ -d "$CG" ]; then rmdir "$CG" 2>/dev/null || true; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if ip netns list | awk '{print $1}' | grep -qE '^ldp(sw|[0-9]+)$'; then
    echo "bench_dp.sh: removing leftover ldp* namespaces"; net_down
fi

# Other benchmark scripts of this project (bench_train.sh, bench_co2.sh, ...), not this one.
other_bench() { pgrep -af -- 'bench_[a-z0-9_]+\.sh' | grep -v -e bench_dp.sh -e pgrep | grep -q .; }
if [ "$WAIT" = 1 ]; then  # another benchmark on this 2-core host would distort both
    for ((i = 0; i < 40; i++)); do
        other_bench || break
        [ "$i" = 0 ] && echo "waiting for other bench/bench_*.sh runs to finish (polling every 30 s, at most 20 min)"
        sleep 30
    done
fi

# A private copy of the binary: a rebuild of ./loom during the run cannot change what is timed.
cp "$LOOM" "$OUT/loom"
BIN="$OUT/loom"
NPROC=$(nproc)
if [ "$TINY" = 1 ]; then read -r L H C V T B BS <<<"2 2 64 256 64 4 64"
else read -r L H C V T B BS <<<"6 6 384 50257 256 4 256"; fi
MODEL=(--layers "$L" --heads "$H" --dim "$C" --vocab "$V" --block-size "$BS" --seq "$T" --batch "$B")
IFS=',' read -r -a RANKLIST <<<"$RANKS"
IFS=',' read -r -a SETLIST <<<"$SETTINGS"
MAXN=1; for n in "${RANKLIST[@]}"; do [ "$n" -gt "$MAXN" ] && MAXN=$n; done
MAXSTEPS=$STEPS; [ "$SLOW_STEPS" -gt "$MAXSTEPS" ] && MAXSTEPS=$SLOW_STEPS
[ "$MEM_STEPS" -gt "$MAXSTEPS" ] && MAXSTEPS=$MEM_STEPS

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(hostname)"
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
    echo "nproc: $NPROC"
    echo "mem: $(free -m | awk '/^Mem:/{print $2" MiB"}')"
    echo "kernel: $(uname -r)"
    echo "loadavg_start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "loom_git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    echo "loom_sha256: $(sha256sum "$BIN" | cut -c1-16)"
    echo "mpirun: $(mpirun --version 2>/dev/null | head -1)"
    echo "torch: $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')"
    echo "model: L$L H$H C$C V$V T$T B$B block $BS (B per rank)"
    echo "invocation: $0 --rounds $ROUNDS --net-rounds $NET_ROUNDS --slow-rounds $SLOW_ROUNDS --steps $STEPS --slow-steps $SLOW_STEPS --warmup $WARMUP --mem-steps $MEM_STEPS --settings $SETTINGS --ranks $RANKS --zero1 $ZERO1 --max-foreign $MAX_FOREIGN --retries $RETRIES --slow-retries $SLOW_RETRIES --budget $BUDGET$([ "$TINY" = 1 ] && echo ' --tiny')"
} | tee "$OUT/machine.txt"

DATA="$OUT/tokens.bin"
NTOK=$((MAXSTEPS * MAXN * B * T + 4096))
echo "\$ $PY $PEER_DIR/torch_gpt.py tokens --vocab $V --n $NTOK --seed 1 --out $DATA" | tee -a "$OUT/commands.txt"
$PY "$PEER_DIR/torch_gpt.py" tokens --vocab "$V" --n "$NTOK" --seed 1 --out "$DATA" >/dev/null

# ---------------------------------------------------------------- result parsing / summary
cat >"$OUT/dp_results.py" <<'PYEOF'
import json, re, statistics, sys

def parse(args):
    # parse OUT TAG SETTING ROUND ENGINE N ZERO THREADS WARMUP B T WALL RC FOREIGN ATTEMPTS
    out, tag, setting, rnd, engine, n, zero, threads, warm, B, T, wall, rc, foreign, attempts = args
    n, warm, B, T = int(n), int(warm), int(B), int(T)
    r = {"tag": tag, "setting": setting, "round": int(rnd), "engine": engine, "ranks": n,
         "zero": None if zero == "-" else int(zero), "threads": int(threads), "wall_s": float(wall),
         "rc": int(rc), "foreign": float(foreign), "attempts": int(attempts)}
    log = open(f"{out}/{tag}.log", errors="replace").read()
    if engine == "loom":
        steps = []
        try:
            for line in open(f"{out}/{tag}.jsonl"):
                j = json.loads(line)
                if "step_ms" in j: steps.append(j)
        except OSError:
            pass
        timed = steps[warm:]
        if timed:
            med = statistics.median(s["step_ms"] for s in timed)
            r["median_ms"] = round(med, 1)
            r["tokens_per_s"] = round(n * B * T / med * 1000, 1)
            r["step_ms"] = [round(s["step_ms"], 1) for s in steps]
            if all("comm_exposed_ms" in s for s in timed):
                r["exposed_pct"] = round(100 * sum(s["comm_exposed_ms"] for s in timed) / sum(s["step_ms"] for s in timed), 1)
        m = re.search(r"^loom: dp \d+ zero \d+ \|.*$", log, re.M)
        if m:
            r["summary_line"] = m.group(0)
            k = re.search(r"peak RSS ([0-9.]+) MiB", m.group(0))
            if k: r["peak_rss_mib"] = float(k.group(1))
    else:
        m = re.search(r"^RESULT (\{.*\})$", log, re.M)
        if m:
            j = json.loads(m.group(1))
            r["median_ms"], r["tokens_per_s"], r["step_ms"] = j["median_ms"], j["tokens_per_s"], j["step_ms"]
            r["peak_rss_mib"] = max(j["peak_rss_mib"])
    if r["rc"] != 0 or "tokens_per_s" not in r:
        r["failed"] = True
        r["log_tail"] = log.strip().splitlines()[-6:]
    print(json.dumps(r))

def fmt(x, nd=0):
    if x is None: return "—"
    return f"{x:,.{nd}f}"

def summary(args):
    out = args[0]
    rows = [json.loads(l) for l in open(f"{out}/results.jsonl")]
    ok = [r for r in rows if not r.get("failed")]
    bad = [r for r in rows if r.get("failed")]
    nproc = int(args[1])
    def cell(setting, engine, n, zero, threads=None):
        v = [r for r in ok if r["setting"] == setting and r["engine"] == engine and r["ranks"] == n
             and (zero is None or r["zero"] == zero) and (threads is None or r["threads"] == threads)]
        return v
    def med(v, key):
        xs = [r[key] for r in v if r.get(key) is not None]
        return statistics.median(xs) if xs else None
    settings = []
    for r in rows:
        if r["setting"] not in settings: settings.append(r["setting"])
    names = {"loopback": "loopback (shm + tcp; gloo: tcp over lo)", "1gbit": "1 Gbit/s (tbf)",
             "100mbit": "100 Mbit/s + 5 ms (wirelay)"}
    print("| setting | ranks × threads | loom tok/s (rounds) | torch DDP tok/s (rounds) | loom / torch | loom scaling eff. | torch scaling eff. | loom exposed comm | max foreign CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in settings:
        bl = med(cell(s, "loom", 1, None, 1), "tokens_per_s")
        bt = med(cell(s, "torch", 1, None, 1), "tokens_per_s")
        ns = sorted({r["ranks"] for r in rows if r["setting"] == s})
        for n in ns:
            thr = sorted({r["threads"] for r in rows if r["setting"] == s and r["ranks"] == n})
            for t in thr:
                zs = [0] if n == 1 else sorted({r["zero"] for r in rows if r["setting"] == s and r["ranks"] == n
                                                and r["engine"] == "loom" and r["threads"] == t and r["zero"] <= 1} | {0})
                for z in zs:
                    lv = cell(s, "loom", n, z if n > 1 else None, t)
                    tv = cell(s, "torch", n, None, t) if (z == 0) else []
                    if not lv and not tv: continue
                    lt, tt = med(lv, "tokens_per_s"), med(tv, "tokens_per_s")
                    ratio = lt / tt if lt and tt else None
                    le = lt / (n * bl) if (lt and bl and t == 1) else None
                    te = tt / (n * bt) if (tt and bt and t == 1) else None
                    ex = med(lv, "exposed_pct")
                    label = f"{n} × {t}" + ("" if n == 1 else f", zero {z}")
                    rl = "/".join(fmt(r["tokens_per_s"]) for r in lv)
                    rt = "/".join(fmt(r["tokens_per_s"]) for r in tv)
                    print(f"| {names.get(s, s)} | {label} | {fmt(lt)} ({rl}) | {fmt(tt) if tv else '—'}{' (' + rt + ')' if tv else ''} | "
                          f"{fmt(ratio, 2) + '×' if ratio else '—'} | {fmt(le and 100 * le, 0) + '%' if le else '—'} | "
                          f"{fmt(te and 100 * te, 0) + '%' if te else '—'} | {fmt(ex, 1) + '%' if ex is not None else '—'} | {max(r['foreign'] for r in lv + tv):.2f} |")
    print()
    print("CPU-limited scaling efficiency (tok/s(N) / (min(N, nproc) * tok/s(1 rank x 1 thread))):")
    for s in settings:
        for e in ("loom", "torch"):
            b = med(cell(s, e, 1, None, 1), "tokens_per_s")
            for n in sorted({r["ranks"] for r in rows if r["setting"] == s and r["ranks"] > 1}):
                v = med(cell(s, e, n, 0 if e == "loom" else None, 1), "tokens_per_s")
                if b and v: print(f"  {s:9s} {e:5s} N={n}: {100 * v / (min(n, nproc) * b):.0f}%")
    print()
    print("Median step ms per run (all steps; the first WARMUP are dropped):")
    for r in ok:
        print(f"  {r['tag']}: median {r['median_ms']} ms  steps {r['step_ms']}" + (f"  exposed {r['exposed_pct']}%" if 'exposed_pct' in r else "")
              + f"  foreign {r['foreign']:.2f} (attempts {r['attempts']})")
    dis = [r for r in ok if r["foreign"] > float(args[2])]
    print()
    print(f"runs kept although other processes took more than {args[2]} of the CPUs: " +
          (", ".join(f"{r['tag']} ({r['foreign']:.2f})" for r in dis) if dis else "none"))
    print()
    print("loom on loopback, per rank (rank 0): ZeRO memory from the end-of-run line; tok/s indicative for zero 2/3 (fewer steps, 1 run)")
    print("| ranks | zero | params MiB | grads MiB | optimizer MiB | peak RSS MiB (runs) | tok/s | exposed comm |")
    print("|---|---|---|---|---|---|---|---|")
    for n in sorted({r["ranks"] for r in ok if r["engine"] == "loom" and r["setting"] == "loopback" and r["ranks"] > 1}):
        for z in range(4):
            v = [r for r in ok if r["engine"] == "loom" and r["setting"] == "loopback" and r["ranks"] == n and r["zero"] == z and r.get("summary_line")]
            if not v: continue
            m = re.search(r"params ([0-9.]+) MiB, grads ([0-9.]+) MiB, optimizer ([0-9.]+) MiB", v[0]["summary_line"])
            rss = "/".join(fmt(r["peak_rss_mib"]) for r in v)
            print(f"| {n} | {z} | {m.group(1)} | {m.group(2)} | {m.group(3)} | {fmt(med(v, 'peak_rss_mib'))} ({rss}) | {fmt(med(v, 'tokens_per_s'))} | {fmt(med(v, 'exposed_pct'), 1)}% |")
    print()
    print("loom end-of-run lines:")
    for r in ok:
        if r.get("summary_line"):
            print(f"  {r['tag']}: {r['summary_line']}")
    if bad:
        print()
        print("FAILED runs:")
        for r in bad:
            print(f"  {r['tag']} rc={r['rc']}: " + " | ".join(r.get("log_tail", [])))

if __name__ == "__main__":
    {"parse": parse, "summary": summary}[sys.argv[1]](sys.argv[2:])
PYEOF

# ---------------------------------------------------------------- one run
HOSTFILE_DIR="$OUT/hosts"; mkdir -p "$HOSTFILE_DIR"
for n in "${RANKLIST[@]}"; do
    : >"$HOSTFILE_DIR/hosts.$n"
    for ((i = 0; i < n; i++)); do echo "n$i slots=1" >>"$HOSTFILE_DIR/hosts.$n"; done
done
NETNS_MCA=(--mca plm_rsh_agent "$NETLAB/rsh-netns" --mca plm_rsh_no_tree_spawn 1 --mca btl tcp,self
           --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24)

busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$9; exit}' /proc/stat; }  # user nice system steal
wirelay_jiffies() {  # CPU the userspace switch used (ours, not foreign)
    local p; p=$(cat "$WIRELAY_DIR/wirelay.pid" 2>/dev/null) || { echo 0; return; }
    awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0
}

# run_one SETTING ROUND ENGINE N ZERO THREADS STEPS   (ZERO "-" for torch)
run_one() {
    local setting=$1 rnd=$2 engine=$3 n=$4 zero=$5 t=$6 steps=$7
    local tag="${setting}_${engine}_n${n}_t${t}$([ "$zero" != - ] && [ "$n" -gt 1 ] && echo "_z$zero")_r${rnd}"
    local envv=(OMP_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t" OMP_WAIT_POLICY=PASSIVE)
    local xs=(-x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x OMP_WAIT_POLICY)
    local cmd=()
    local port=$((29500 + RANDOM % 2000))
    local ifname=lo addr=127.0.0.1
    [ "$setting" = 1gbit ] && { ifname=ve0; addr=10.77.0.10; }
    [ "$setting" = 100mbit ] && { ifname=tp0; addr=10.77.0.10; }
    local prog
    if [ "$engine" = loom ]; then
        prog=("$BIN" train --data "$DATA" "${MODEL[@]}" --steps "$steps" --threads "$t" --progress off
              --metrics "$OUT/$tag.jsonl")
        [ "$n" -gt 1 ] && prog+=(--dp "$n" --zero "$zero" --comm-timeout 300)
    else
        prog=("$PY" "$ROOT/bench/torch_ddp.py" --data "$DATA" "${MODEL[@]}" --steps "$steps" --warmup "$WARMUP"
              --threads "$t")
        envv+=(MASTER_ADDR="$addr" MASTER_PORT="$port" GLOO_SOCKET_IFNAME="$ifname" LOOM_PEER_DIR="$PEER_DIR")
        xs+=(-x MASTER_ADDR -x MASTER_PORT -x GLOO_SOCKET_IFNAME -x LOOM_PEER_DIR)
    fi
    if [ "$n" -eq 1 ]; then
        cmd=(env "${envv[@]}" "${prog[@]}")
    elif [ "$setting" = loopback ]; then
        cmd=(env "${envv[@]}" "$ROOT/scripts/loom-mpirun" --oversubscribe -np "$n" "${xs[@]}" "${prog[@]}")
    else
        cmd=(ip netns exec ldp0 env "${envv[@]}" "$ROOT/scripts/loom-mpirun" --hostfile "$HOSTFILE_DIR/hosts.$n"
             -np "$n" "${NETNS_MCA[@]}" "${xs[@]}" "${prog[@]}")
    fi
    echo "== [$setting r$rnd] $engine N=$n threads=$t$([ "$zero" != - ] && echo " zero=$zero") steps=$steps"
    echo "\$ ${cmd[*]}" >>"$OUT/commands.txt"
    local a best=1 best_f=2 rc=0 wall=0 f retries=$RETRIES
    [ "$setting" = 100mbit ] && retries=$SLOW_RETRIES
    for ((a = 1; a <= retries + 1; a++)); do
        local b0 b1 w0 w1 t0 t1 arc=0
        if [ -n "$CG" ]; then echo 0 >"$CG/cpuacct.usage"; fi
        b0=$(busy_jiffies); w0=$(wirelay_jiffies); t0=$(date +%s.%N)
        sh -c '[ -n "$0" ] && echo $$ >"$0/cgroup.procs"; exec "$@"' "$CG" \
            /usr/bin/time -f "%e %U %S" -o "$OUT/$tag.a$a.time" timeout -k 10 "$RUN_TIMEOUT" "${cmd[@]}" \
            >"$OUT/$tag.a$a.log" 2>&1 || arc=$?
        b1=$(busy_jiffies); w1=$(wirelay_jiffies); t1=$(date +%s.%N)
        local cpu
        if [ -n "$CG" ]; then cpu=$(awk '{printf "%.3f", $1 / 1e9}' "$CG/cpuacct.usage")
        else cpu=$(tail -1 "$OUT/$tag.a$a.time" 2>/dev/null | awk '{print $2+$3}'); fi
        [ -f "$OUT/$tag.jsonl" ] && mv "$OUT/$tag.jsonl" "$OUT/$tag.a$a.jsonl"
        f=$(awk -v b0="$b0" -v b1="$b1" -v w="$((w1 - w0))" -v t0="$t0" -v t1="$t1" -v hz="$HZ" -v n="$NPROC" \
                -v cpu="$cpu" \
                'BEGIN{x=((b1-b0-w)/hz-cpu)/((t1-t0)*n); if(x<0)x=0; printf "%.3f", x}')
        local aw; aw=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
        echo "{\"tag\":\"$tag\",\"attempt\":$a,\"rc\":$arc,\"foreign\":$f,\"cpu_s\":$cpu,\"wall_s\":$aw,\"load1_after\":$(cut -d' ' -f1 /proc/loadavg)}" >>"$OUT/attempts.jsonl"
        if [ "$arc" -ne 0 ]; then best=$a; best_f=$f; rc=$arc; wall=$aw; break; fi  # a failure is reported, not retried
        if awk -v f="$f" -v b="$best_f" 'BEGIN{exit !(f<b)}'; then best=$a; best_f=$f; wall=$aw; fi
        if awk -v f="$f" -v m="$MAX_FOREIGN" 'BEGIN{exit !(f<=m)}'; then break; fi
        if [ $(($(date +%s) - START)) -ge "$BUDGET" ] || [ "$a" -gt "$retries" ]; then
            echo "   (other processes took $f of the CPUs; not repeating: retries or time budget spent)"; break
        fi
        echo "   other processes took $f of the CPUs during this run; repeating it"
    done
    for ext in log jsonl time; do
        [ -f "$OUT/$tag.a$best.$ext" ] && cp "$OUT/$tag.a$best.$ext" "$OUT/$tag.$ext"
    done
    $PY "$OUT/dp_results.py" parse "$OUT" "$tag" "$setting" "$rnd" "$engine" "$n" "$zero" "$t" "$WARMUP" \
        "$B" "$T" "$wall" "$rc" "$best_f" "$a" | tee -a "$OUT/results.jsonl" |
        $PY -c 'import json,sys; r=json.loads(sys.stdin.read()); print("   " + ("FAILED rc=%d: %s" % (r["rc"], " | ".join(r.get("log_tail", []))) if r.get("failed") else "%.1f tok/s, median %.0f ms%s, wall %.0f s, foreign %.2f" % (r["tokens_per_s"], r["median_ms"], (", exposed %.1f%%" % r["exposed_pct"]) if "exposed_pct" in r else "", r["wall_s"], r["foreign"])))'
    if other_bench; then echo "   WARNING: another bench/bench_*.sh was running at the end of $tag" | tee -a "$OUT/warnings.txt"; fi
    return 0
}

# The run list of one round of a setting, alternating engines.
round_list() {  # setting
    local s=$1
    echo "loom 1 - 1"; echo "torch 1 - 1"
    if [ "$s" = loopback ]; then echo "loom 1 - $NPROC"; echo "torch 1 - $NPROC"; fi
    for n in "${RANKLIST[@]}"; do
        local t=$((NPROC / n)); [ "$t" -lt 1 ] && t=1
        echo "loom $n 0 $t"; echo "torch $n - $t"
        if [[ ",$ZERO1," == *",$s,"* ]]; then echo "loom $n 1 $t"; fi
    done
}

START=$(date +%s)
for s in "${SETLIST[@]}"; do
    case "$s" in
        loopback) R=$ROUNDS; S=$STEPS ;;
        1gbit) R=$NET_ROUNDS; S=$STEPS
               echo "\$ NETLAB_NS=ldp $NETLAB/setup.sh $MAXN 1gbit" | tee -a "$OUT/commands.txt"
               "$NETLAB/setup.sh" "$MAXN" 1gbit >>"$OUT/netlab.log" 2>&1 ;;
        100mbit) R=$SLOW_ROUNDS; S=$SLOW_STEPS
               echo "\$ NETLAB_NS=ldp WIRELAY_DIR=$WIRELAY_DIR $NETLAB/setup-tap.sh $MAXN 1e8 5000" | tee -a "$OUT/commands.txt"
               "$NETLAB/setup-tap.sh" "$MAXN" 1e8 5000 >>"$OUT/netlab.log" 2>&1 ;;
        *) echo "bench_dp.sh: unknown setting '$s' (loopback|1gbit|100mbit)" >&2; exit 2 ;;
    esac
    mapfile -t LIST < <(round_list "$s")
    for ((r = 1; r <= R; r++)); do
        if [ $((r % 2)) -eq 0 ]; then order=$(seq $((${#LIST[@]} - 1)) -1 0); else order=$(seq 0 $((${#LIST[@]} - 1))); fi
        for k in $order; do
            read -r e n z t <<<"${LIST[$k]}"
            run_one "$s" "$r" "$e" "$n" "$z" "$t" "$S"
        done
    done
    if [ "$s" = loopback ]; then  # ZeRO 2/3 memory (and indicative speed); zero 0/1 lines come from the rounds
        for n in "${RANKLIST[@]}"; do
            t=$((NPROC / n)); [ "$t" -lt 1 ] && t=1
            for z in 2 3; do run_one loopback 1 loom "$n" "$z" "$t" "$MEM_STEPS"; done
        done
    fi
    if [ "$s" != loopback ]; then net_down; fi
    echo "-- setting $s done at $(($(date +%s) - START)) s"
done
echo "total bench time: $(($(date +%s) - START)) s   loadavg_end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
echo "raw results: $OUT"
$PY "$OUT/dp_results.py" summary "$OUT" "$NPROC" "$MAX_FOREIGN" | tee "$OUT/summary.md"
