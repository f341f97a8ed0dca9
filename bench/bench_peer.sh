#!/usr/bin/env bash
# bench/bench_peer.sh — `loom peer` (a swarm of ATOM-style peers averaging CO2-style over
# ZeroMQ+CURVE) against the MPI strategies on the same emulated links, plus churn and convergence.
#
#   bench/bench_peer.sh [--parts tput,churn,conv] [--settings 100mbit,100mbit-tbf,20mbit,10mbit]
#                       [--machines N (4)] [--cores C (all)] [--exchange all|sharded (all)]
#                       [--compress none|int8|topk (none)]
#                       [--modes alone,together,swarm,co2,dp,1f1b,2bw] [--model 30m|124m|small] [--tau N (12)]
#                       [--peer-files]
#                       [--rounds R (3)] [--warm-rounds W (1)] [--dp-steps S (4)] [--pp-steps S (5)]
#                       [--accum K (8)] [--churn-rounds R (15)] [--churn-every N (3)]
#                       [--churn-link 1gbit|100mbit] [--churn-timeout S (5)] [--swarm-timeout S (30)]
#                       [--churn-at random|boundary (random)]
#                       [--conv-modes dp,co2,none,int8,topk,topk2] [--conv-outer "FLAGS"]
#                       [--out DIR] [--loom PATH]
#
# N equal "machines" (--machines, default 4): every peer and every MPI rank runs in its own CPU
# cgroup with a fixed quota of C/N cores (bench/netlab/machines.sh + as-machine; cpu.shares 65536,
# so other jobs on the host yield first), 1 thread each. Mode alone is one process (`loom train`,
# the same model and batch) in machine 0 on the same share: N x its tok/s is the compute bound
# every other mode is reported against. wirelay (the 100mbit setting's switch) runs outside the
# machines: leave it some of the host (e.g. --cores 1.8 of 2), or it gets only what the machines
# leave and the link runs slower than its rate.
# Part tput (model 30m = L6 H6 C384 V50257 T256 B4: 30.0M params, a 120 MB Δ; 124m = GPT-2
# small at T256 B4: 123.9M params, a 495 MB Δ; small = L4 H4 C256 V50257 T128 B4), per setting,
# one run per mode. --peer-files: every peer keeps its outer state and the swarm's arrays in
# files (`--offload-dir` without --offload; the model stays in memory), as a 124M peer must to
# fit four on a 23 GiB host (~2.9 GiB each at B4 instead of ~7.8 at B1):
#   alone  1 x `loom train` in machine 0, R*N steps, tok/s from step_ms after the warm rounds
#   together  N x `loom train` at once, one per machine, no network, timed as alone: what the
#          host's shared memory and caches leave of the bound when N machines compute at once
#   swarm  N x `loom peer --tau N --peer-timeout --swarm-timeout`, --min-peers N, R rounds (R*N steps), each peer in its own
#          namespace; the first --warm-rounds rounds are not timed. tok/s = sum over peers of
#          tokens / sum of loom's step_ms over the timed rounds (as bench_co2.sh times CO2: a
#          round's last step_ms includes the round-end work: Δ, the stale average, any wait)
#   co2    mpirun -np N loom train --dp N --co2 --tau N, R*N steps, timed the same way
#   dp     mpirun -np N loom train --dp N, --dp-steps steps, wall clock between timestamped
#          metrics lines (step 1 skipped)
#   1f1b / 2bw  mpirun -np N loom train --pp N (--pp N/2 --dp 2 when N > layers) --schedule X --grad-accum K, --pp-steps steps,
#          wall clock between the lines of step 1 and of the third-to-last step (a 2bw run's
#          last two lines come after its final drain)
# Settings: 100mbit = TAP devices joined by the user-space wirelay at 100 Mbit/s + 5 ms one-way
# (setup-tap.sh N 1e8 5000; wirelay costs the ranks CPU); 100mbit-tbf = a veth bridge shaped in
# the kernel to 100 Mbit/s, no delay (setup.sh N 100mbit); 20mbit / 10mbit = the same at 20 / 10
# Mbit/s.
# Part churn: byte-level model L4 H4 C256 V256 T128 B8 on the bundled fortunes corpus, N peers,
# --churn-rounds rounds of τ, --peer-timeout --churn-timeout (5), on a tbf link (--churn-link). Every
# --churn-every rounds (by the round of the records a live peer has written) one peer is
# killed with SIGKILL — at a random point of the round then in progress (--churn-at random: a
# delay uniform in [0, τ × the last record's step time), seeded), or at once (boundary: right as
# a round's records appear, i.e. as the victim sends that round's Δ, the worst moment) (in turn p1, p0, p2, p3, then the replacements) and a new peer with a new
# id starts in the dead one's namespace, bootstrapping to the live peers. Against the same run
# without churn: tokens/s (step_ms), final validation loss, and the longest wait_ms any peer saw.
# Part conv: the same model and token budget with MPI --dp N (sync DP, batch 8 per rank), and
# --dp N --co2 (--conv-modes), on loopback; final validation loss against the no-churn swarm.
# --conv-outer FLAGS go to the co2 run and the conv swarms (e.g. "--outer-momentum 0.2").
# Conv modes none, int8, topk and topk2 (topk with --topk-values 2bit): a swarm of N peers (no
# churn) with that --outer-compress
# (--exchange as given) on a 1 Gbit/s tbf link, the same steps: final validation loss and the
# bytes each peer sent.
# Everything (peers, wirelay, namespaces lpr*) is removed on exit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PARTS=tput,churn,conv; SETTINGS=100mbit; MODESARG=alone,swarm,co2,dp,1f1b,2bw; MODEL=30m; TAU=12
NP=4; CORES=$(nproc); EXCH=all; COMPRESS=none; ROUNDS=3; WARM=1; DP_STEPS=4; PP_STEPS=5; ACC=8; CH_ROUNDS=15; CH_EVERY=3; CH_LINK=1gbit; CH_TIMEOUT=5; SW_TIMEOUT=30; CH_AT=random
CONV_MODES=dp,co2; CONV_OUTER=""; OUT=""; LOOM="$ROOT/loom"; PY=/usr/bin/python3; RUN_TIMEOUT=900; FILES_DIR=0
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --parts) PARTS="$2"; shift 2 ;;
        --settings) SETTINGS="$2"; shift 2 ;;
        --modes) MODESARG="$2"; shift 2 ;;
        --model) MODEL="$2"; shift 2 ;;
        --peer-files) FILES_DIR=1; shift ;;
        --machines) NP="$2"; shift 2 ;;
        --exchange) EXCH="$2"; shift 2 ;;
        --compress) COMPRESS="$2"; shift 2 ;;
        --cores) CORES="$2"; shift 2 ;;
        --tau) TAU="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --warm-rounds) WARM="$2"; shift 2 ;;
        --dp-steps) DP_STEPS="$2"; shift 2 ;;
        --pp-steps) PP_STEPS="$2"; shift 2 ;;
        --accum) ACC="$2"; shift 2 ;;
        --churn-rounds) CH_ROUNDS="$2"; shift 2 ;;
        --churn-every) CH_EVERY="$2"; shift 2 ;;
        --churn-link) CH_LINK="$2"; shift 2 ;;
        --churn-timeout) CH_TIMEOUT="$2"; shift 2 ;;
        --churn-at) CH_AT="$2"; shift 2 ;;
        --swarm-timeout) SW_TIMEOUT="$2"; shift 2 ;;
        --conv-modes) CONV_MODES="$2"; shift 2 ;;
        --conv-outer) CONV_OUTER="$2"; shift 2 ;;
        --out) OUT="$2"; shift 2 ;;
        --loom) LOOM="$2"; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "bench_peer.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" -eq 0 ] || { echo "bench_peer.sh: needs root (network namespaces)" >&2; exit 2; }
[ -x "$LOOM" ] || { echo "bench_peer.sh: no loom binary at $LOOM (run 'make')" >&2; exit 2; }
case "$NP" in '' | *[!0-9]* | 0 | 1) echo "bench_peer.sh: --machines N needs N >= 2" >&2; exit 2 ;; esac
[ "$ROUNDS" -gt "$WARM" ] || { echo "bench_peer.sh: need --rounds > --warm-rounds" >&2; exit 2; }
case "$MODEL" in
    small) read -r L H C V T B <<<"4 4 256 50257 128 4" ;;
    30m) read -r L H C V T B <<<"6 6 384 50257 256 4" ;;
    124m) read -r L H C V T B <<<"12 12 768 50257 256 4" ;;
    *) echo "bench_peer.sh: --model small|30m|124m" >&2; exit 2 ;;
esac
[ -n "$OUT" ] || OUT="$(mktemp -d /tmp/loom-bench-peer.XXXXXX)"
mkdir -p "$OUT"; OUT="$(cd "$OUT" && pwd)"
has() { [[ ",$1," == *",$2,"* ]]; }

export NETLAB_NS=lpr WIRELAY_DIR="$OUT/wirelay"
NETLAB="$ROOT/bench/netlab"
PIDS=()
killall_mine() {   # only the processes this script started, by PID
    local p; for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
net_down() { "$NETLAB/teardown.sh" >>"$OUT/netlab.log" 2>&1 || true; }
cleanup() { killall_mine; net_down; "$NETLAB/machines.sh" down >>"$OUT/netlab.log" 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns list | awk '{print $1}' | grep -qE '^lpr(sw|[0-9]+)$' && net_down

cp "$LOOM" "$OUT/loom"; BIN="$OUT/loom"
"$NETLAB/machines.sh" up "$NP" "$CORES" | tee -a "$OUT/netlab.log"
echo "\$ NETLAB_NS=lpr bench/netlab/machines.sh up $NP $CORES" >>"$OUT/commands.txt"
ASM="$NETLAB/as-machine"
GIT="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (dirty tree)')"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) cores"
    echo "loadavg_start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "loom_git: $GIT (the checkout's; with --loom, the binary may be older: md5 $(md5sum "$LOOM" | cut -c1-12))"
    echo "machines: $NP x $(awk -v c="$CORES" -v n="$NP" 'BEGIN { printf "%.3g", c / n }') cores (CPU cgroups with fixed quotas)"
    echo "invocation: $0 --machines $NP --cores $CORES --exchange $EXCH --compress $COMPRESS --parts $PARTS --settings $SETTINGS --modes $MODESARG --model $MODEL --tau $TAU --rounds $ROUNDS --warm-rounds $WARM --dp-steps $DP_STEPS --pp-steps $PP_STEPS --accum $ACC --churn-rounds $CH_ROUNDS --churn-every $CH_EVERY --churn-link $CH_LINK --churn-timeout $CH_TIMEOUT --churn-at $CH_AT --swarm-timeout $SW_TIMEOUT --conv-modes $CONV_MODES --conv-outer '$CONV_OUTER'$([ "$FILES_DIR" = 1 ] && echo ' --peer-files')"
} | tee "$OUT/machine.txt"

"$BIN" keygen -o "$OUT/secret" >/dev/null 2>&1
ENVV=(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE)
XS=(-x OMP_NUM_THREADS -x OPENBLAS_NUM_THREADS -x OMP_WAIT_POLICY)
mkdir -p "$OUT/hosts"; for ((i = 0; i < NP; i++)); do echo "n$i slots=1"; done >"$OUT/hosts/hosts"
NETNS_MCA=(--hostfile "$OUT/hosts/hosts" --mca plm_rsh_agent "$NETLAB/rsh-netns" --mca plm_rsh_no_tree_spawn 1
           --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24)
TSREADER='import sys, time
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "w") as o:
    for line in iter(f.readline, b""):
        o.write("%.6f %s" % (time.time(), line.decode())); o.flush()'
PORT=7700   # a fresh port per peer process (no TIME_WAIT surprises)

net_up() {  # net_up SETTING
    case "$1" in
        100mbit) "$NETLAB/setup-tap.sh" "$NP" 1e8 5000 >>"$OUT/netlab.log" 2>&1
                 echo "\$ NETLAB_NS=lpr bench/netlab/setup-tap.sh $NP 1e8 5000" >>"$OUT/commands.txt" ;;
        100mbit-tbf | 20mbit | 10mbit | 1gbit)
                 "$NETLAB/setup.sh" "$NP" "${1%-tbf}" >>"$OUT/netlab.log" 2>&1
                 echo "\$ NETLAB_NS=lpr bench/netlab/setup.sh $NP ${1%-tbf}" >>"$OUT/commands.txt" ;;
        *) echo "bench_peer.sh: unknown setting '$1'" >&2; exit 2 ;;
    esac
}

# start_peer TAG NS ID BOOTSTRAP FLAGS... — one peer in namespace lpr$NS; echoes nothing, appends PID
start_peer() {
    local tag=$1 ns=$2 id=$3 boot=$4; shift 4
    local port=$((PORT++)) b=() f=()
    [ -n "$boot" ] && b=(--bootstrap "$boot")
    [ "$FILES_DIR" = 1 ] && mkdir -p "$OUT/$tag/files_$id" && f=(--offload-dir "$OUT/$tag/files_$id")
    local cmd=("$ASM" "$ns" nsenter --net="/run/netns/lpr$ns" env "${ENVV[@]}" "$BIN" peer "$@"
               --peer-exchange "$EXCH" --outer-compress "$COMPRESS" --threads 1 --progress off --peak-gflops 1
               --secret "$OUT/secret" --peer-id "$id" --listen "10.77.0.$((10 + ns)):$port" "${b[@]}" "${f[@]}"
               --metrics "$OUT/$tag/$id.jsonl")
    echo "\$ ${cmd[*]} &" >>"$OUT/commands.txt"
    "${cmd[@]}" >"$OUT/$tag/$id.log" 2>&1 &
    PIDS+=($!); echo "$id $! 10.77.0.$((10 + ns)):$port" >>"$OUT/$tag/peers.txt"
}

# wait_pids DEADLINE_S — waits for every PID in PIDS; kills the rest after the deadline. rc 0/1
wait_pids() {
    local end=$(( $(date +%s) + $1 )) p alive
    while :; do
        alive=0; for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        if [ "$(date +%s)" -ge "$end" ]; then echo "   TIMEOUT: killing the peers" | tee -a "$OUT/problems.txt"; killall_mine; return 1; fi
        sleep 1
    done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=(); return 0
}

# run_mpi TAG SETTING STEPS ARGS... — mpirun -np N across the namespaces (or loopback); metrics
# through a timestamping FIFO into TAG.ts
run_mpi() {
    local tag=$1 s=$2 steps=$3; shift 3
    local prog=("$ASM" rank "$BIN" train "$@" --steps "$steps" --threads 1 --progress off --peak-gflops 1
                --comm-timeout 300 --metrics "$OUT/$tag.fifo") cmd
    if [ "$s" = loopback ]; then cmd=(env "${ENVV[@]}" "$ROOT/scripts/loom-mpirun" --oversubscribe -np "$NP" "${XS[@]}" "${prog[@]}")
    else cmd=(nsenter --net=/run/netns/lpr0 env "${ENVV[@]}" "$ROOT/scripts/loom-mpirun" -np "$NP" "${NETNS_MCA[@]}" "${XS[@]}" "${prog[@]}"); fi
    echo "\$ ${cmd[*]}" >>"$OUT/commands.txt"
    rm -f "$OUT/$tag.fifo"; mkfifo "$OUT/$tag.fifo"
    $PY -c "$TSREADER" "$OUT/$tag.fifo" "$OUT/$tag.ts" &
    local rp=$! rc=0 t0
    t0=$(date +%s)
    timeout -k 10 "$RUN_TIMEOUT" "${cmd[@]}" >"$OUT/$tag.log" 2>&1 || rc=$?
    timeout 2 sh -c ": > '$OUT/$tag.fifo'" 2>/dev/null || true
    wait "$rp" 2>/dev/null || true
    rm -f "$OUT/$tag.fifo"
    echo "{\"tag\":\"$tag\",\"rc\":$rc,\"wall_s\":$(( $(date +%s) - t0 ))}" >"$OUT/$tag.rc"
    echo "   $tag rc=$rc wall $(( $(date +%s) - t0 )) s"
}

# run_alone TAG STEPS ARGS... — one `loom train` in machine 0 (no network): the compute bound's unit
run_alone() {
    local tag=$1 steps=$2; shift 2
    local cmd=("$ASM" 0 env "${ENVV[@]}" "$BIN" train "$@" --steps "$steps" --threads 1 --progress off
               --peak-gflops 1 --metrics "$OUT/$tag.jsonl") rc=0 t0
    echo "\$ ${cmd[*]}" >>"$OUT/commands.txt"
    t0=$(date +%s)
    timeout -k 10 "$RUN_TIMEOUT" "${cmd[@]}" >"$OUT/$tag.log" 2>&1 || rc=$?
    echo "{\"tag\":\"$tag\",\"rc\":$rc,\"wall_s\":$(( $(date +%s) - t0 ))}" >"$OUT/$tag.rc"
    echo "   $tag rc=$rc wall $(( $(date +%s) - t0 )) s"
}

# run_together TAG STEPS ARGS... — N independent `loom train`s at once, one per machine, no network
run_together() {
    local tag=$1 steps=$2 i t0; shift 2
    mkdir -p "$OUT/$tag"; t0=$(date +%s)
    for ((i = 0; i < NP; i++)); do
        local cmd=("$ASM" "$i" env "${ENVV[@]}" "$BIN" train "$@" --steps "$steps" --threads 1 --progress off
                   --peak-gflops 1 --metrics "$OUT/$tag/m$i.jsonl")
        echo "\$ ${cmd[*]} &" >>"$OUT/commands.txt"
        "${cmd[@]}" >"$OUT/$tag/m$i.log" 2>&1 &
        PIDS+=($!)
    done
    local rc=0; wait_pids "$RUN_TIMEOUT" || rc=1
    echo "{\"tag\":\"$tag\",\"rc\":$rc,\"wall_s\":$(( $(date +%s) - t0 ))}" >"$OUT/$tag.rc"
    echo "   $tag rc=$rc wall $(( $(date +%s) - t0 )) s"
}

# run_swarm TAG STEPS FLAGS... — N peers p0..p(N-1) in lpr0.., all waiting for each other
run_swarm() {
    local tag=$1 steps=$2; shift 2
    mkdir -p "$OUT/$tag"; : >"$OUT/$tag/peers.txt"
    local t0 rc=0 i
    t0=$(date +%s)
    start_peer "$tag" 0 p0 "" "$@" --steps "$steps" --min-peers "$NP"
    local boot; boot=$(awk '{print $3}' "$OUT/$tag/peers.txt")
    sleep 1
    for ((i = 1; i < NP; i++)); do start_peer "$tag" "$i" "p$i" "$boot" "$@" --steps "$steps" --min-peers "$NP"; done
    wait_pids "$RUN_TIMEOUT" || rc=1
    echo "{\"tag\":\"$tag\",\"rc\":$rc,\"wall_s\":$(( $(date +%s) - t0 ))}" >"$OUT/$tag.rc"
    echo "   $tag rc=$rc wall $(( $(date +%s) - t0 )) s"
}

START=$(date +%s)
# ---------------------------------------------------------------- part tput
if has "$PARTS" tput; then
    TOK="$OUT/tokens.bin"
    $PY "$ROOT/tests/torch_gpt.py" tokens --vocab "$V" --n $(( (NP * ROUNDS * TAU + 8 * ACC * PP_STEPS + NP * DP_STEPS) * B * T + 4096 )) --seed 1 --out "$TOK" >/dev/null
    MODELF=(--data "$TOK" --layers "$L" --heads "$H" --dim "$C" --vocab "$V" --block-size "$T" --seq "$T" --batch "$B")
    echo "model: L$L H$H C$C V$V T$T B$B per rank/peer, $NP x 1 thread" | tee -a "$OUT/machine.txt"
    # the pipeline: N stages, or N/2 stages x dp 2 when the model has fewer layers than machines
    PPF=(--pp "$NP"); [ "$NP" -gt "$L" ] && PPF=(--pp $((NP / 2)) --dp 2)
    IFS=',' read -r -a SETLIST <<<"$SETTINGS"; IFS=',' read -r -a MODES <<<"$MODESARG"
    for s in "${SETLIST[@]}"; do
        echo "== tput $s"; net_up "$s"
        for m in "${MODES[@]}"; do
            tag="tput_${s}_$m"
            case "$m" in
                alone) run_alone "$tag" $((ROUNDS * TAU)) "${MODELF[@]}" ;;
                together) run_together "$tag" $((ROUNDS * TAU)) "${MODELF[@]}" ;;
                swarm) run_swarm "$tag" $((ROUNDS * TAU)) "${MODELF[@]}" --tau "$TAU" --peer-timeout "$SW_TIMEOUT" ;;
                co2) run_mpi "$tag" "$s" $((ROUNDS * TAU)) "${MODELF[@]}" --dp "$NP" --co2 --tau "$TAU" ;;
                dp) run_mpi "$tag" "$s" "$DP_STEPS" "${MODELF[@]}" --dp "$NP" ;;
                1f1b|2bw) run_mpi "$tag" "$s" "$PP_STEPS" "${MODELF[@]}" "${PPF[@]}" --schedule "$m" --grad-accum "$ACC" ;;
                *) echo "bench_peer.sh: unknown mode '$m'" >&2; exit 2 ;;
            esac
        done
        net_down
    done
fi

# ---------------------------------------------------------------- parts churn, conv
CH_STEPS=$((CH_ROUNDS * TAU))
if has "$PARTS" churn || has "$PARTS" conv; then
    mapfile -t FILES < <(find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
    [ "${#FILES[@]}" -gt 0 ] || { echo "bench_peer.sh: no fortunes corpus (apt-get install fortunes)" >&2; exit 2; }
    "$BIN" prepare --tokenizer byte --out "$OUT/fortunes" "${FILES[@]}" >"$OUT/prepare.log" 2>&1
    BYTEF=(--data "$OUT/fortunes/train_000000.bin" --val-data "$OUT/fortunes/val_000000.bin" --val-windows 32
           --layers 4 --heads 4 --dim 256 --vocab 256 --block-size 128 --seq 128 --batch 8 --lr 1e-3 --warmup 20
           --min-lr 1e-4 --tau "$TAU")
    echo "churn/conv model: L4 H4 C256 V256 T128 B8 per peer/rank, $CH_STEPS steps (τ $TAU), fortunes corpus" | tee -a "$OUT/machine.txt"
fi
if has "$PARTS" churn; then
    net_up "$CH_LINK"
    echo "== churn ($CH_LINK)"
    run_swarm churn_none "$CH_STEPS" "${BYTEF[@]}" --peer-timeout "$CH_TIMEOUT"
    # churn: the same start, then a kill + replacement every CH_EVERY rounds
    tag=churn_kill; mkdir -p "$OUT/$tag"; : >"$OUT/$tag/peers.txt"; : >"$OUT/$tag/events.txt"
    t0=$(date +%s)
    start_peer "$tag" 0 p0 "" "${BYTEF[@]}" --steps "$CH_STEPS" --peer-timeout "$CH_TIMEOUT" --min-peers "$NP"
    boot=$(awk '{print $3}' "$OUT/$tag/peers.txt")
    sleep 1
    for ((i = 1; i < NP; i++)); do start_peer "$tag" "$i" "p$i" "$boot" "${BYTEF[@]}" --steps "$CH_STEPS" --peer-timeout "$CH_TIMEOUT" --min-peers "$NP"; done
    declare -A NSOF; for ((i = 0; i < NP; i++)); do NSOF[p$i]=$i; done; declare -A PIDOF ADDROF
    while read -r id pid addr; do PIDOF[$id]=$pid; ADDROF[$id]=$addr; done <"$OUT/$tag/peers.txt"
    VICTIMS=(p1 p0 p2 p3); next=$CH_EVERY; gen=$NP; vi=0; rc=0; RANDOM=1
    end=$(( $(date +%s) + RUN_TIMEOUT ))
    while :; do
        live=(); for id in "${!PIDOF[@]}"; do kill -0 "${PIDOF[$id]}" 2>/dev/null && live+=("$id"); done
        [ "${#live[@]}" = 0 ] && break
        [ "$(date +%s)" -ge "$end" ] && { echo "   churn TIMEOUT" | tee -a "$OUT/problems.txt"; rc=1; break; }
        # the round the swarm has averaged: the newest record of any live peer
        r=0; for id in "${live[@]}"; do
            x=$(tail -n 3 "$OUT/$tag/$id.jsonl" 2>/dev/null | grep -o '"round":[0-9]*' | tail -1 | cut -d: -f2 || true)
            [ -n "$x" ] && [ "$x" -gt "$r" ] && r=$x
        done
        if [ "$r" -ge "$next" ] && [ $(( (r + 2) * TAU )) -lt "$CH_STEPS" ]; then
            # victim: the next in VICTIMS, or else the oldest live peer that is not the newest
            if [ "$vi" -lt "${#VICTIMS[@]}" ]; then v=${VICTIMS[$vi]}; else v=$(printf '%s\n' "${live[@]}" | sort -V | head -1); fi
            vi=$((vi + 1))
            if [ "$CH_AT" = random ]; then # a random point of the round in progress
                ms=$(tail -n 1 "$OUT/$tag/${live[0]}.jsonl" 2>/dev/null | grep -o '"step_ms":[0-9.]*' | cut -d: -f2 || true)
                sleep "$(awk -v r=$RANDOM -v ms="${ms:-300}" -v t="$TAU" 'BEGIN { printf "%.3f", r / 32768 * t * ms / 1000 }')"
            fi
            if kill -0 "${PIDOF[$v]}" 2>/dev/null; then
                kill -9 "${PIDOF[$v]}"; wait "${PIDOF[$v]}" 2>/dev/null || true; ns=${NSOF[$v]}; unset "PIDOF[$v]"
                echo "$(date +%s.%N) round $r: killed $v (ns $ns)" | tee -a "$OUT/$tag/events.txt"
                boot=""; for id in "${!PIDOF[@]}"; do boot+="${boot:+,}${ADDROF[$id]}"; done
                nid=p$gen; gen=$((gen + 1)); NSOF[$nid]=$ns
                start_peer "$tag" "$ns" "$nid" "$boot" "${BYTEF[@]}" --steps "$CH_STEPS" --peer-timeout "$CH_TIMEOUT"
                read -r _ PIDOF[$nid] ADDROF[$nid] < <(tail -1 "$OUT/$tag/peers.txt")
                echo "$(date +%s.%N) round $r: started $nid (ns $ns) bootstrapping to $boot" | tee -a "$OUT/$tag/events.txt"
            fi
            next=$((next + CH_EVERY))
        fi
        sleep 0.5
    done
    killall_mine
    echo "{\"tag\":\"$tag\",\"rc\":$rc,\"wall_s\":$(( $(date +%s) - t0 ))}" >"$OUT/$tag.rc"
    echo "   $tag rc=$rc wall $(( $(date +%s) - t0 )) s"
    net_down
fi
if has "$PARTS" conv; then
    echo "== conv (loopback)"
    has "$CONV_MODES" dp && run_mpi conv_dp loopback "$CH_STEPS" "${BYTEF[@]}" --dp "$NP" --val-every 0
    read -r -a COUT <<<"$CONV_OUTER"
    has "$CONV_MODES" co2 && run_mpi conv_co2 loopback "$CH_STEPS" "${BYTEF[@]}" --dp "$NP" --co2 --val-every 0 "${COUT[@]}"
    for c in none int8 topk topk2; do
        has "$CONV_MODES" "$c" || continue
        net_up 1gbit
        echo "== conv swarm --outer-compress $c (1gbit)"
        v=(); [ $c = topk2 ] && v=(--topk-values 2bit)
        COMPRESS=${c%2} run_swarm "conv_swarm_$c" "$CH_STEPS" "${BYTEF[@]}" --peer-timeout 5 "${COUT[@]}" "${v[@]}"
        net_down
    done
fi
"$NETLAB/machines.sh" show | tee -a "$OUT/machine.txt"
echo "total bench time: $(($(date +%s) - START)) s   loadavg_end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"
echo "raw results: $OUT"
$PY "$ROOT/bench/bench_peer_summary.py" "$OUT" "$TAU" "$WARM" "$ACC" "$B" "$T" "$NP" "${PPF[*]:-}" | tee "$OUT/summary.md"
