#!/usr/bin/env bash
# bench/bench_offload.sh — block swapping (--offload disk) against training in memory, and what
# PyTorch does with the same model on the same machine.
#
#   bench/bench_offload.sh [--sections 124m,774m,1558m,predict] [--steps S] [--threads N]
#                          [--dir DIR (offload dir, default /work/.offload-bench)]
#                          [--loom PATH] [--out DIR] [--no-peer]
#                          [--configs disk,fused,shm,halfcore] [--rounds R (3)] [--shares N]
#
# 124m: GPT-2 124M, micro-batch 1 x 1024, --recompute: in memory with K = 1, 2, 4 micro-batches
#       per step, then swapped at --fast-mem 1/2, 1/4 and 1/8 of its training state (parameters,
#       gradients, AdamW m and v: 16 bytes a parameter), K = 1, 2, 4 at the budget that fits.
# 774m, 1558m: GPT-2 774M and 1.5B (XL) swapped with --fast-mem 4G (K = 1), loom in memory
#       where its state fits this machine, and the PyTorch peer (tests/torch_gpt.py bench,
#       AdamW, fp32, same threads) in memory; under `ulimit -v` (so the kernel's OOM killer
#       does not pick another process) where it cannot fit.
# predict: the planner against the run on configurations of this host: GPT-2 124M, micro-batch
#       2 x 128, --fast-mem 768M, `loom plan --offload` (its profile saved) then `loom train`
#       with the plan's units and that profile, per --configs: disk (the tier under --dir),
#       fused (disk, --grad-clip 0: each unit's update fused into the backward), shm (the tier
#       on /dev/shm: memory-speed I/O) and halfcore (disk, --threads 1 in a cgroup
#       v1 CPU quota of half a core: a slower CPU against the same disk), interleaved, --rounds
#       times; --shares N runs them in a cgroup with cpu.shares N (others: 1024) so other
#       processes on the machine disturb them less. bench/offload_table.py --predict prints the
#       medians: step, update pass and the rest, predicted and measured.
# Every run: the median step time over the steps after the first, the median I/O wait (io_ms),
# peak RSS (/usr/bin/time %M), the planner's predicted step time and the bytes moved per step
# (loom's start-up log), and the share of the CPUs other processes used meanwhile. Raw logs in
# --out; bench/offload_table.py prints the tables. --no-peer leaves PyTorch out.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECTIONS="124m,774m,1558m"
STEPS=4
THREADS=2
DIR=/work/.offload-bench
LOOM="$ROOT/loom"
PY=/usr/bin/python3
OUT=""
PEER=1
CONFIGS="disk,fused,shm,halfcore"
ROUNDS=3
SHARES=""
while [ $# -gt 0 ]; do
    case "$1" in
        --sections) SECTIONS=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --threads) THREADS=$2; shift 2 ;;
        --dir) DIR=$2; shift 2 ;;
        --loom) LOOM=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --no-peer) PEER=0; shift ;;
        --configs) CONFIGS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --shares) SHARES=$2; shift 2 ;;
        -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench_offload.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/bench_offload.XXXXXX)
mkdir -p "$OUT" "$DIR"
cp "$LOOM" "$OUT/loom"
BIN="$OUT/loom"
HZ=$(getconf CLK_TCK) NPROC=$(nproc)
export OMP_WAIT_POLICY=PASSIVE
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $NPROC cores"
    echo "mem: $(free -m | awk '/^Mem:/{print $2" MiB"}')"
    echo "disk: $(df -h "$DIR" | awk 'NR==2{print $1", "$4" free"}')"
    echo "loom_git: $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo ' (dirty)') (the tree; the binary run: $LOOM)"
    echo "torch: $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')"
    echo "invocation: $0 --sections $SECTIONS --steps $STEPS --threads $THREADS --dir $DIR" \
        "--configs $CONFIGS --rounds $ROUNDS${SHARES:+ --shares $SHARES}"
    echo "loadavg_start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"

DATA="$OUT/tokens.bin"
$PY "$ROOT/tests/torch_gpt.py" tokens --vocab 50257 --n 200000 --seed 1 --out "$DATA" >/dev/null

busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9; exit}' /proc/stat; }

# run TAG CMD...: one timed run; a line of results in $OUT/runs.jsonl
run() {
    local tag=$1; shift
    echo "\$ $*" | tee "$OUT/$tag.cmd"
    local b0 t0 b1 t1 rc=0
    b0=$(busy); t0=$(date +%s.%N)
    /usr/bin/time -f "%M %e %U %S" -o "$OUT/$tag.time" "$@" >"$OUT/$tag.log" 2>&1 || rc=$?
    b1=$(busy); t1=$(date +%s.%N)
    $PY - "$OUT" "$tag" "$rc" "$b0" "$b1" "$t0" "$t1" "$HZ" "$NPROC" <<'PY' | tee -a "$OUT/runs.jsonl"
import json, re, statistics, sys
out, tag, rc = sys.argv[1], sys.argv[2], int(sys.argv[3])
b0, b1, t0, t1, hz, n = map(float, sys.argv[4:10])
r = {"tag": tag, "rc": rc}
t = open(f"{out}/{tag}.time").read().split()
if len(t) >= 4 and t[-4].isdigit():
    rss, wall, usr, sys_ = int(t[-4]), float(t[-3]), float(t[-2]), float(t[-1])
    r.update(peak_rss_mib=round(rss / 1024, 1), wall_s=wall,
             foreign=round(max(0.0, ((b1 - b0) / hz - usr - sys_) / ((t1 - t0) * n)), 3))
log = open(f"{out}/{tag}.log", errors="replace").read()
steps = []
try:
    steps = [json.loads(l) for l in open(f"{out}/{tag}.jsonl") if '"loss"' in l]
except OSError:
    pass
if len(steps) > 1:
    r["step_s"] = round(statistics.median(s["step_ms"] for s in steps[1:]) / 1e3, 3)
    r["tok_s"] = round(statistics.median(s["tokens_per_s"] for s in steps[1:]), 1)
    if "io_ms" in steps[1]:
        r["io_wait_s"] = round(statistics.median(s["io_ms"] for s in steps[1:]) / 1e3, 3)
m = re.search(r"predicted ([0-9.]+) s per step", log)
if m: r["predicted_s"] = float(m.group(1))
m = re.search(r"the update pass ([0-9.]+) s of it", log)
if m: r["predicted_update_s"] = float(m.group(1))
m = re.search(r'"compute_ms": ([0-9.e+]+)', log)
if m: r["predicted_compute_s"] = round(float(m.group(1)) / 1e3, 3)
m = re.search(r"update pass ([0-9.]+) s, waiting on the disk ([0-9.]+) s", log)
if m: r.update(update_s=float(m.group(1)), wait_s=float(m.group(2)))
m = re.search(r"per micro-batch: embedding ([0-9.e-]+) \+ ([0-9.e-]+) s, layer ([0-9.e-]+) \+ "
              r"([0-9.e-]+) s, head ([0-9.e-]+) \+ ([0-9.e-]+) s", log)
if m: r["block_s"] = [float(x) for x in m.groups()]
m = re.search(r"AdamW ([0-9.]+) ns per parameter", log)
if m: r["adamw_ns"] = float(m.group(1))
r["load"] = float(open("/proc/loadavg").read().split()[0])
m = re.search(r"units (\[\[.*?\]\]), prefetch (\d+): ([0-9.]+ [MG]iB) of", log)
if m: r.update(units=m.group(1), prefetch=int(m.group(2)), fast=m.group(3))
m = re.search(r"read ([0-9.]+) GB/s, write ([0-9.]+) GB/s", log)
if m: r.update(read_gbps=float(m.group(1)), write_gbps=float(m.group(2)))
m = re.search(r"([0-9.]+) GiB read \+ ([0-9.]+) GiB written per step", log)
if m: r["moved_gib"] = round(float(m.group(1)) + float(m.group(2)), 2)
m = re.search(r"RESULT (\{.*\})", log)
if m:
    res = json.loads(m.group(1))
    r.update(step_s=round(res["median_ms"] / 1e3, 3), tok_s=res["tokens_per_s"])
if rc:
    lines = [l for l in log.splitlines() if l.strip()]
    r["error"] = lines[-1][:300] if lines else ""
print(json.dumps(r))
PY
}

train() { # train TAG MODEL-FLAGS K EXTRA...
    local tag=$1 model=$2 k=$3; shift 3
    run "$tag" "$BIN" train --data "$DATA" $model --batch 1 --seq 1024 --grad-accum "$k" \
        --recompute --steps "$STEPS" --threads "$THREADS" --progress off \
        --metrics "$OUT/$tag.jsonl" "$@"
}

torch_bench() { # torch_bench TAG MODEL-FLAGS [VMEM-KIB]
    [ "$PEER" = 1 ] || return 0
    local tag=$1 model=$2 lim=${3:-unlimited}
    run "$tag" bash -c "ulimit -v $lim && exec $PY $ROOT/tests/torch_gpt.py bench $model \
        --batch 1 --seq 1024 --steps $STEPS --threads $THREADS"
}

M124="--layers 12 --heads 12 --dim 768 --vocab 50257 --block-size 1024"
M774="--layers 36 --heads 20 --dim 1280 --vocab 50257 --block-size 1024"
M1558="--layers 48 --heads 25 --dim 1600 --vocab 50257 --block-size 1024"
T124="--layers 12 --heads 12 --dim 768 --vocab 50257"
T774="--layers 36 --heads 20 --dim 1280 --vocab 50257"
T1558="--layers 48 --heads 25 --dim 1600 --vocab 50257"
OFF="--offload disk --offload-dir $DIR"

CG=/sys/fs/cgroup/cpu
# group NAME QUOTA-US SHARES: cgroup v1 CPU group NAME (quota per 100 ms period, -1: none;
# shares: its weight against other processes' 1024); prints the command prefix that runs in it
group() {
    local g=$CG/$1
    mkdir -p "$g" && echo 100000 >"$g/cpu.cfs_period_us" && echo "$2" >"$g/cpu.cfs_quota_us" &&
        echo "$3" >"$g/cpu.shares" && echo "$g"
}
# predict_pair CONFIG ROUND: loom plan, then loom train with its units and profile
predict_pair() {
    local cfg=$1 r=$2 dir=$DIR th=$THREADS quota=-1 tag="pred_$1_r$2" upd=""
    case "$cfg" in
        disk) ;;
        fused) upd="--grad-clip 0" ;;
        shm) dir=/dev/shm/loom-offload-bench ;;
        halfcore) th=1 quota=50000 ;;
        *) echo "unknown config $cfg" >&2; exit 2 ;;
    esac
    mkdir -p "$dir"
    local wrap=() g
    if [ "$quota" != -1 ] || [ -n "$SHARES" ]; then
        g=$(group "loom-bench-$cfg" "$quota" "${SHARES:-1024}")
        wrap=(bash -c 'echo $$ >"$0/tasks" && exec "$@"' "$g")
    fi
    local pm="$M124 --batch 2 --seq 128 --threads $th $upd"
    run "${tag}_plan" "${wrap[@]}" "$BIN" plan --offload disk --offload-dir "$dir" --fast-mem 768M \
        $pm --save-profile "$OUT/$tag.prof.json" --json "$OUT/$tag.plan.json"
    local units prefetch
    units=$($PY -c "import json, sys; print(json.dumps(json.load(open(sys.argv[1]))['units']).replace(' ', ''))" "$OUT/$tag.plan.json")
    prefetch=$($PY -c "import json, sys; print(json.load(open(sys.argv[1]))['prefetch'])" "$OUT/$tag.plan.json")
    run "${tag}_train" "${wrap[@]}" "$BIN" train --data "$DATA" $pm --offload disk \
        --offload-dir "$dir" --fast-mem 768M --profile "$OUT/$tag.prof.json" \
        --offload-units "$units" --offload-prefetch "$prefetch" --steps "$STEPS" --progress off \
        --metrics "$OUT/${tag}_train.jsonl"
}

for sec in ${SECTIONS//,/ }; do
    case "$sec" in
    124m) # state: 124.4M parameters x 16 bytes = 1.85 GiB
        for k in 1 2 4; do train "124m_mem_k$k" "$M124" "$k"; done
        for f in 950M 475M 237M; do train "124m_off_${f}_k1" "$M124" 1 $OFF --fast-mem $f; done
        for k in 2 4; do train "124m_off_950M_k$k" "$M124" "$k" $OFF --fast-mem 950M; done ;;
    774m)
        train 774m_off_4G "$M774" 1 $OFF --fast-mem 4G
        train 774m_mem "$M774" 1
        torch_bench 774m_torch "$T774" ;;
    1558m)
        train 1558m_off_4G "$M1558" 1 $OFF --fast-mem 4G
        torch_bench 1558m_torch "$T1558" $((22 * 1024 * 1024)) ;;
    predict)
        for ((r = 1; r <= ROUNDS; r++)); do
            for cfg in ${CONFIGS//,/ }; do predict_pair "$cfg" "$r"; done
        done
        rm -rf /dev/shm/loom-offload-bench
        for cfg in ${CONFIGS//,/ }; do rmdir "$CG/loom-bench-$cfg" 2>/dev/null || true; done
        $PY "$ROOT/bench/offload_table.py" --predict "$OUT/runs.jsonl" ;;
    *) echo "unknown section $sec" >&2; exit 2 ;;
    esac
done
echo "results: $OUT/runs.jsonl"
