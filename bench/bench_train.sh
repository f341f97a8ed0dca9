#!/usr/bin/env bash
# bench/bench_train.sh — core-engine benchmark: single-process `loom train` against the
# PyTorch peer (tests/torch_gpt.py bench), same shapes, same threads, fp32.
#
#   bench/bench_train.sh [--rounds R] [--steps S] [--threads N] [--configs 124m,30m]
#                        [--loom PATH] [--peer PATH] [--out DIR]
#                        [--max-foreign F (0.10)] [--retries N (2)] [--budget SECONDS (480)]
#                        [--engines openblas,blis,onednn] [--peak GFLOPS (290)]
#                        [--before PATH] [--shares N] [--bf16 PEAK_BF16]
#
# --bf16 PEAK_BF16: bf16 against bf16 instead: loom (fp32), loom --dtype bf16, the peer in fp32
# and the peer under torch.autocast("cpu", bfloat16), rotating; the bf16 rows' MFU is against
# PEAK_BF16 (the value `loom train --dtype bf16` prints as "peak bf16 ... measured").
# --before PATH: one more variant, loom_before, the same `loom train` with another binary (an
# older build), in the same rotation: a before/after comparison from one run (with --bf16 two:
# loom_before and loom_before_bf16). --shares N: every
# run in a cgroup v1 CPU group with cpu.shares N (other processes weigh 1024; needs root), so a
# loaded host's other jobs yield to the timed run.
# --engines: instead of the three variants below, one plain `loom train` per CPU matrix engine
# (LOOM_MATMUL=<engine>, variant loom_<engine>), rotating the same way; no peer. Config 124m256
# is 124M at T256 B4 (the matrix engines' comparison); --peak sets MFU's denominator (the value
# `loom train` prints as "peak fp32 ... measured").
# For each round and each config it runs, one after another (the order rotates every round
# so that no variant always runs first):  loom train | torch_gpt.py bench | loom train --recompute.
# loom's per-step times come from its --metrics JSONL (the first 2 steps dropped as warm-up,
# median of the rest); the peer prints the median after 2 warm-up steps itself. Peak RSS:
# /usr/bin/time -f %M for loom, the peer's own ru_maxrss (RESULT peak_rss_mib).
# These hosts are shared: each run also records the CPU share other processes took while it
# ran, and a disturbed run (> --max-foreign) is repeated, keeping the least disturbed attempt.
# FLOPs per step are loom's (metrics "mfu" = flops/step_time/peak, with --peak-gflops $PEAK so
# summarize.py can invert it), used for both engines.
# Raw logs land in --out (default: a fresh directory under /tmp); bench/summarize.py
# prints the per-run lines and the final markdown table.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS=3
STEPS=6
THREADS=2
CONFIGS="124m,30m"
LOOM="$ROOT/loom"
PEER="$ROOT/tests/torch_gpt.py"
PY=/usr/bin/python3
OUT=""
PEAK=290
MAX_FOREIGN=0.10   # repeat a run when other processes used more than this share of the CPUs
RETRIES=2
BUDGET=480         # seconds after which no run is repeated
ENGINES=""
BEFORE=""
SHARES=""
PEAK_BF16=""
HZ=$(getconf CLK_TCK)
NPROC=$(nproc)

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --steps) STEPS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --configs) CONFIGS="$2"; shift 2 ;;
        --loom) LOOM="$2"; shift 2 ;;
        --peer) PEER="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --max-foreign) MAX_FOREIGN="$2"; shift 2 ;;
        --retries) RETRIES="$2"; shift 2 ;;
        --budget) BUDGET="$2"; shift 2 ;;
        --engines) ENGINES="$2"; shift 2 ;;
        --peak) PEAK="$2"; shift 2 ;;
        --before) BEFORE="$2"; shift 2 ;;
        --shares) SHARES="$2"; shift 2 ;;
        --bf16) PEAK_BF16="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "bench_train.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
if [ "$STEPS" -lt 4 ]; then echo "bench_train.sh: --steps must be >= 4 (2 warm-up + >= 2 timed)" >&2; exit 2; fi
[ -x "$LOOM" ] || { echo "bench_train.sh: no loom binary at $LOOM (run 'make loom')" >&2; exit 2; }
[ -f "$PEER" ] || { echo "bench_train.sh: no peer at $PEER" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench_train.sh: /usr/bin/time missing (apt-get install time)" >&2; exit 2; }
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/loom-bench.XXXXXX)"
mkdir -p "$OUT"

# A private copy of the binary: a rebuild of ./loom during the run cannot change what is timed.
cp "$LOOM" "$OUT/loom"
BIN="$OUT/loom"
if [ -n "$BEFORE" ]; then
    [ -x "$BEFORE" ] || { echo "bench_train.sh: no loom binary at $BEFORE (--before)" >&2; exit 2; }
    cp "$BEFORE" "$OUT/loom_before"
fi
# --shares: the cgroup every timed run enters (cgroup v1 cpu controller).
WRAP=()
if [ -n "$SHARES" ]; then
    CG=/sys/fs/cgroup/cpu/loom-bench-train
    mkdir -p "$CG" && echo "$SHARES" >"$CG/cpu.shares" ||
        { echo "bench_train.sh: cannot create the CPU cgroup $CG (--shares needs root and cgroup v1)" >&2; exit 2; }
    WRAP=(bash -c 'echo $$ >"$0/tasks" && exec "$@"' "$CG")
fi

ENVV=(OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS="$THREADS" OPENBLAS_NUM_THREADS="$THREADS")

# name L H C V T B block-size
config_args() {
    case "$1" in
        124m) echo "12 12 768 50257 64 4 1024" ;;
        124m256) echo "12 12 768 50257 256 4 1024" ;;
        30m) echo "6 6 384 50257 256 4 256" ;;
        *) echo "bench_train.sh: unknown config '$1' (124m|124m256|30m)" >&2; exit 2 ;;
    esac
}

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "host: $(hostname)"
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)" \
         "(family $(sed -n 's/^cpu family[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)," \
         "model $(sed -n 's/^model[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)," \
         "avx512f: $(grep -q avx512f /proc/cpuinfo && echo yes || echo no))"
    echo "nproc: $(nproc)"
    echo "mem: $(free -m | awk '/^Mem:/{print $2" MiB"}')"
    echo "loadavg_start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "loom_git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty tree)')"
    echo "loom_sha256: $(sha256sum "$BIN" | cut -c1-16)"
    [ -n "$BEFORE" ] && echo "loom_before: $BEFORE sha256 $(sha256sum "$OUT/loom_before" | cut -c1-16)"
    echo "torch: $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')"
    echo "rounds: $ROUNDS  steps: $STEPS  threads: $THREADS  peak_gflops: $PEAK"
    echo "invocation: $0 --rounds $ROUNDS --steps $STEPS --threads $THREADS --configs $CONFIGS --max-foreign $MAX_FOREIGN --retries $RETRIES --budget $BUDGET${ENGINES:+ --engines $ENGINES} --peak $PEAK${BEFORE:+ --before $BEFORE}${SHARES:+ --shares $SHARES}${PEAK_BF16:+ --bf16 $PEAK_BF16}"
} | tee "$OUT/machine.txt"

# Random-token shard (enough tokens for the longest run: S*B*T+1).
DATA="$OUT/tokens.bin"
NTOK=$((STEPS * 4 * 256 + 4096))
echo "\$ $PY $PEER tokens --vocab 50257 --n $NTOK --seed 1 --out $DATA"
$PY "$PEER" tokens --vocab 50257 --n "$NTOK" --seed 1 --out "$DATA" >/dev/null

busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9; exit}' /proc/stat; }

# One timed run: prints the exact command, wraps it in /usr/bin/time (peak RSS, CPU time) and
# measures the CPU that *other* processes used meanwhile ("foreign": busy jiffies of the whole
# machine minus this run's user+sys, over wall*nproc). A run with foreign > MAX_FOREIGN is
# repeated (up to RETRIES times while the time budget lasts); the least disturbed attempt is kept.
run_timed() {  # tag, command...
    local tag="$1"; shift
    echo "\$ ${ENVV[*]} /usr/bin/time -f '%M %e %U %S' -o $OUT/$tag.a1.time $*"
    local best="" best_f=2 a
    for ((a = 1; a <= RETRIES + 1; a++)); do
        local b0 t0 b1 t1 f
        b0=$(busy_jiffies); t0=$(date +%s.%N)
        if ! env "${ENVV[@]}" "${WRAP[@]}" /usr/bin/time -f "%M %e %U %S" -o "$OUT/$tag.a$a.time" "$@" \
                >"$OUT/$tag.a$a.log" 2>&1; then
            echo "FAILED: $tag (see $OUT/$tag.a$a.log)"; tail -5 "$OUT/$tag.a$a.log"; return 1
        fi
        b1=$(busy_jiffies); t1=$(date +%s.%N)
        [ -f "$OUT/$tag.jsonl" ] && mv "$OUT/$tag.jsonl" "$OUT/$tag.a$a.jsonl"
        f=$(awk -v b0="$b0" -v b1="$b1" -v t0="$t0" -v t1="$t1" -v hz="$HZ" -v n="$NPROC" \
                -v cpu="$(tail -1 "$OUT/$tag.a$a.time" | awk '{print $3+$4}')" \
                'BEGIN{x=((b1-b0)/hz-cpu)/((t1-t0)*n); if(x<0)x=0; printf "%.3f", x}')
        echo "{\"tag\":\"$tag\",\"attempt\":$a,\"foreign\":$f,\"wall_s\":$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}'),\"load1_after\":$(cut -d' ' -f1 /proc/loadavg)}" >>"$OUT/runs.jsonl"
        if awk -v f="$f" -v b="$best_f" 'BEGIN{exit !(f<b)}'; then best=$a; best_f=$f; fi
        if awk -v f="$f" -v m="$MAX_FOREIGN" 'BEGIN{exit !(f<=m)}'; then break; fi
        if [ $(($(date +%s) - START)) -ge "$BUDGET" ]; then echo "   (foreign CPU ${f}; time budget spent, not retrying)"; break; fi
        echo "   other processes took ${f} of the machine during this run; repeating it"
    done
    for ext in time log jsonl; do
        [ -f "$OUT/$tag.a$best.$ext" ] && cp "$OUT/$tag.a$best.$ext" "$OUT/$tag.$ext"
    done
    echo "{\"tag\":\"$tag\",\"kept\":$best,\"foreign\":$best_f}" >>"$OUT/kept.jsonl"
}

IFS=',' read -r -a CFGS <<<"$CONFIGS"
VARIANTS=(loom torch loom_recompute)
[ -n "$BEFORE" ] && VARIANTS+=(loom_before)
[ -n "$PEAK_BF16" ] && VARIANTS=(loom loom_bf16 torch torch_bf16)
[ -n "$PEAK_BF16" ] && [ -n "$BEFORE" ] && VARIANTS+=(loom_before loom_before_bf16)
if [ -n "$ENGINES" ]; then
    VARIANTS=()
    IFS=',' read -r -a ENG_LIST <<<"$ENGINES"
    for e in "${ENG_LIST[@]}"; do
        case "$e" in openblas|blis|onednn) VARIANTS+=("loom_$e") ;;
            *) echo "bench_train.sh: unknown engine '$e' (openblas|blis|onednn)" >&2; exit 2 ;; esac
    done
fi
NV=${#VARIANTS[@]}
START=$(date +%s)
for ((r = 1; r <= ROUNDS; r++)); do
    for cfg in "${CFGS[@]}"; do
        read -r L H C V T B BS <<<"$(config_args "$cfg")"
        for ((k = 0; k < NV; k++)); do
            v="${VARIANTS[$(((k + r - 1) % NV))]}"
            tag="${cfg}_${v}_r${r}"
            echo "== round $r/$ROUNDS  config $cfg  $v"
            case "$v" in
                loom|loom_recompute|loom_openblas|loom_blis|loom_onednn|loom_before|loom_bf16|loom_before_bf16)
                    extra=() eng=() bin="$BIN"
                    case "$v" in loom_before*) bin="$OUT/loom_before" ;; esac
                    [ "$v" = loom_recompute ] && extra=(--recompute)
                    case "$v" in *_bf16) extra=(--dtype bf16) ;; esac
                    case "$v" in loom_openblas|loom_blis|loom_onednn) eng=(env "LOOM_MATMUL=${v#loom_}") ;; esac
                    run_timed "$tag" "${eng[@]}" "$bin" train --data "$DATA" --vocab "$V" --layers "$L" --heads "$H" \
                        --dim "$C" --block-size "$BS" --seq "$T" --batch "$B" --steps "$STEPS" \
                        --threads "$THREADS" --peak-gflops "$PEAK" --progress off --metrics "$OUT/$tag.jsonl" "${extra[@]}"
                    ;;
                torch|torch_bf16)
                    extra=()
                    [ "$v" = torch_bf16 ] && extra=(--autocast bf16)
                    run_timed "$tag" "$PY" "$PEER" bench --layers "$L" --heads "$H" --dim "$C" \
                        --vocab "$V" --seq "$T" --batch "$B" --steps "$STEPS" --threads "$THREADS" \
                        "${extra[@]}"
                    ;;
            esac
        done
    done
done
echo "total bench time: $(($(date +%s) - START)) s   loadavg_end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
echo "raw results: $OUT"
$PY "$ROOT/bench/summarize.py" "$OUT" --peak "$PEAK" ${PEAK_BF16:+--peak-bf16 "$PEAK_BF16"} |
    tee "$OUT/summary.md"
