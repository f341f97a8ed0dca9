#!/usr/bin/env bash
# long: started first (tests/run.sh)
# t_compose.sh — the composition table: every pair of options from different axes (13 options on
# 7 axes: dp with ZeRO 0-3, pipeline 1f1b/2bw, tp 1D/2D/sp, cp, CO2, offload, recompute), each
# option alone, and the triples a user would write (dp x pp x tp, dp x tp x cp, loom peer x
# offload x recompute), each run for 2 optimizer steps of a tiny model under mpirun (world size
# dp x pp x tp x cp, one process without mpirun) with a timeout, and classified:
#   ok       exit 0 and 2 steps in the metrics;
#   refused  exit 1-125 with a loom error that names a flag (the reason recorded);
#   BROKEN   a crash, a signal, a timeout, a refusal without such a message, or exit 0 without
#            2 steps: any BROKEN cell fails the test. A refused pair does not: refusals are the
#            code's current state, recorded in docs/COMPOSITION.md.
# Prints the table and "N of M pairs run". Negative controls (in a full run): a planted crash
# (a LOOM wrapper that segfaults), a silent exit 3 and a hang are each reported BROKEN and fail
# the script. Options: --markdown FILE writes the table with each refused pair's reason
# (docs/COMPOSITION.md is this output); --only A,B,... runs one combination; --timeout S per
# run (default 120).
# asan: skip (87 short runs under mpirun; the code of each combination runs under the sanitizers in
# its own test)
set -u
. "$(dirname "$0")/lib.sh"
need_mpi
# a refused cell ends when its first rank exits (mpirun otherwise waits 1-2 s: lib.sh expect_fail)
export OMPI_MCA_odls_base_sigkill_timeout=0
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
md="" only="" limit=120
while [ $# -gt 0 ]; do
    case $1 in
    --markdown) md=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    *) echo "usage: t_compose.sh [--markdown FILE] [--only A,B,...] [--timeout S]"; exit 2 ;;
    esac
done
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/d.bin" 64 30000 3
$LOOM keygen -o "$d/secret" 2>/dev/null || { echo "FAILED: loom keygen"; exit 1; }

# The options: name, axis, flags, and the sizes it sets (dp pp tp cp). An option that needs
# data parallelism (ZeRO, CO2: its workers are the dp ranks) sets dp 2. @OFF@ is the cell's
# own scratch directory, @KEY@ the swarm's secret.
NAMES=(Z0 Z1 Z2 Z3 1f1b 2bw 1D 2D sp cp CO2 offload recompute)
declare -A AXIS FLAGS SIZE
opt() { AXIS[$1]=$2; FLAGS[$1]=$3; SIZE[$1]=$4; }
opt Z0 dp "--zero 0" "2 1 1 1"
opt Z1 dp "--zero 1" "2 1 1 1"
opt Z2 dp "--zero 2" "2 1 1 1"
opt Z3 dp "--zero 3" "2 1 1 1"
opt 1f1b pp "--pp 2 --schedule 1f1b" "1 2 1 1"
opt 2bw pp "--pp 2 --schedule 2bw" "1 2 1 1"
opt 1D tp "--tp 2" "1 1 2 1"
opt 2D tp "--tp 4 --tp-mode 2d" "1 1 4 1"
opt sp tp "--tp 2 --sp" "1 1 2 1"
opt cp cp "--cp 2" "1 1 1 2"
opt CO2 co2 "--co2 --tau 2" "2 1 1 1"
opt offload offload "--offload disk --offload-dir @OFF@ --fast-mem 96M" "1 1 1 1"
opt recompute recompute "--recompute" "1 1 1 1"
opt peer peer "--listen 127.0.0.1:0 --secret @KEY@ --peer-id p0 --tau 2" "1 1 1 1"
# A tiny model every layout divides: 4 heads (tp 2, a 2x2 grid), 2 layers (2 stages), T = 16
# (2 x cp x tp chunks), batch 2 (the 2d grid's q), grad-accum 2 (2bw's stages).
MODEL="--data $d/d.bin --vocab 64 --block-size 32 --seq 16 --layers 2 --heads 4 --dim 32
       --batch 2 --grad-accum 2 --steps 2 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5
       --seed 5 --progress off --peak-gflops 50"
TRIPLES=("Z1 1f1b 1D" "Z1 1D cp" "peer offload recompute" "peer offload" "peer recompute" "peer")

# cmdline NAME...: sets CMD (the loom arguments) and WORLD for the combination
cmdline() {
    local dp=1 pp=1 tp=1 cp=1 sub=train f="" n s
    for n in "$@"; do
        [ "$n" = peer ] && sub=peer
        read -r -a s <<<"${SIZE[$n]}"
        [ "${s[0]}" -gt $dp ] && dp=${s[0]}
        pp=$((pp * s[1])) tp=$((tp * s[2])) cp=$((cp * s[3]))
        f="$f ${FLAGS[$n]}"
    done
    [ $dp -gt 1 ] && f="--dp $dp$f"
    CMD="$sub ${f# }"
    WORLD=$((dp * pp * tp * cp))
}
shown() { # the command of the last cmdline, as the table shows it
    local c="loom ${CMD//@OFF@/DIR}"
    echo "${c//@KEY@/KEY}"
}
# run NAME...: runs the combination; sets STATUS (ok, refused, BROKEN) and WHY
run() {
    local c out rc line
    cmdline "$@"
    c=$(mktemp -d -p "$d") && mkdir "$c/off"
    local args=${CMD//@OFF@/$c/off}
    args=${args//@KEY@/$d/secret}
    if [ "$WORLD" -gt 1 ]; then
        timeout -k 10 "$limit" $MPI -np "$WORLD" $LOOM $args $MODEL --metrics "$c/m.jsonl" \
            >"$c/out" 2>&1 </dev/null
    else
        timeout -k 10 "$limit" $LOOM $args $MODEL --metrics "$c/m.jsonl" >"$c/out" 2>&1 </dev/null
    fi
    rc=$?
    out=$c/out
    line=$(grep -E '^loom(\[rank [0-9]+\])?: ' "$out" | grep -v '^loom[^:]*: warning' | head -1 |
        sed -E 's/^loom(\[rank [0-9]+\])?: //')
    line=${line//$c/DIR}
    line=${line//$d/DIR}
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        STATUS=BROKEN WHY="timed out after ${limit}s"
    elif grep -qE 'exited on signal|Segmentation fault|core dumped|AddressSanitizer|runtime error:' "$out"; then
        STATUS=BROKEN WHY="exit $rc, crashed: $(grep -m1 -E 'exited on signal|Segmentation|core dumped|Sanitizer|runtime error:' "$out")"
    elif [ $rc -gt 125 ]; then
        STATUS=BROKEN WHY="exit $rc (signal $((rc - 128)))"
    elif [ $rc -eq 0 ]; then
        local steps
        steps=$(grep -c '"loss"' "$c/m.jsonl" 2>/dev/null)
        if [ "${steps:-0}" -ge 2 ]; then STATUS=ok WHY=""; else
            STATUS=BROKEN WHY="exit 0 but ${steps:-0} of 2 steps in the metrics"; fi
    elif [[ "$line" == *--* ]]; then
        STATUS=refused WHY=$line
    else
        STATUS=BROKEN WHY="exit $rc without a loom message naming a flag${line:+: $line}"
    fi
    [ "$STATUS" = BROKEN ] && { echo "---- $* ($CMD, $WORLD ranks):"; tail -n 20 "$out"; } >&2
    rm -rf "$c"
}

if [ -n "$only" ]; then # one combination (and the negative controls' way in)
    for n in ${only//,/ }; do
        [ -n "${AXIS[$n]+x}" ] || { echo "--only: no option '$n' (${NAMES[*]} peer)"; exit 2; }
    done
    run ${only//,/ }
    echo "$only: $STATUS${WHY:+: $WHY} ($(shown), $WORLD ranks)"
    [ "$STATUS" != BROKEN ]
    exit
fi

start=$(date +%s)
declare -A CELL REASON
nbroken=0 npairs=0 nrun=0 PAIRS=()
note() { # KEY NAME...: runs and records
    local key=$1; shift
    run "$@"
    CELL[$key]=$STATUS REASON[$key]=$WHY
    [ "$STATUS" = BROKEN ] && nbroken=$((nbroken + 1))
    printf '%-24s %-8s %s\n' "$*" "$STATUS" "$WHY"
}
for a in "${NAMES[@]}"; do note "$a $a" "$a"; done
for i in "${!NAMES[@]}"; do
    for j in "${!NAMES[@]}"; do
        a=${NAMES[$i]} b=${NAMES[$j]}
        [ $j -le $i ] || [ "${AXIS[$a]}" = "${AXIS[$b]}" ] && continue
        note "$a $b" "$a" "$b"
        PAIRS+=("$a $b")
        npairs=$((npairs + 1))
        [ "$STATUS" = ok ] && nrun=$((nrun + 1))
    done
done
for t in "${TRIPLES[@]}"; do note "$t" $t; done
secs=$(($(date +%s) - start))

cell() { # A B: the table's word for the pair (same axis: -)
    if [ "$1" != "$2" ] && [ "${AXIS[$1]}" = "${AXIS[$2]}" ]; then echo "-"; return; fi
    local k="$1 $2"
    [ -n "${CELL[$k]+x}" ] || k="$2 $1"
    echo "${CELL[$k]}"
}
echo
printf '%-10s' ""; printf '%-8s' "${NAMES[@]}"; echo
for a in "${NAMES[@]}"; do
    printf '%-10s' "$a"
    for b in "${NAMES[@]}"; do printf '%-8s' "$(cell "$a" "$b")"; done
    echo
done
nsingle=0
for a in "${NAMES[@]}"; do [ "${CELL[$a $a]}" = ok ] && nsingle=$((nsingle + 1)); done
echo "(the diagonal: each option alone; -: the same axis)"
echo "$nsingle of ${#NAMES[@]} options run alone; $nrun of $npairs pairs run," \
    "$((npairs - nrun)) refused or broken; $nbroken BROKEN cells; ${secs}s"

markdown() { # the table, each refused combination's reason, and what the axes are
    local a b k
    cat <<'EOF'
# Composition: which options run together

loom's parallelism and memory options lie on seven axes. This page is the table of which
options combine today: every pair of options from different axes, each option alone, and the
triples a user would write, each run for two optimizer steps of a tiny model. It is generated
by the test that checks it; to regenerate it after a change:

    bash tests/t_compose.sh --markdown docs/COMPOSITION.md

(`make test` runs the same script: it fails when a combination crashes, hangs or exits without
a clear message, never because one is refused.)

The table is for GPT-2's block. With `--arch llama` (the LLaMA block) the options that run are
one process, `--recompute`, `--dp` with ZeRO 0-3, `--pp` (gpipe, 1f1b, 2bw), `--co2`, 1D
`--tp` with or without `--sp` (`tests/t_llama_tp.sh`: alone and with dp, pp and CO2), `--cp`
(`tests/t_llama_cp.sh`: alone and with dp and tp), `--offload` (`tests/t_llama_offload.sh`:
one process, dp, tp, cp, pp and CO2), `loom peer` (`tests/t_llama_peer.sh`) and 2D `--tp`
(`tests/t_llama_tp2d.sh`: alone and with dp, ZeRO 1 and 3, `--recompute`, cp, `--offload` and
CO2).

## The axes

| axis | options | flags | what it does |
|---|---|---|---|
| data parallelism | Z0, Z1, Z2, Z3 | `--dp 2 --zero 0..3` | each dp rank a replica of the model on its own data; ZeRO 1 shards the AdamW moments over the replicas, 2 also the gradients, 3 also the parameters |
| pipeline | 1f1b, 2bw | `--pp 2 --schedule 1f1b` or `2bw` | the layers cut into stages on successive ranks; 1f1b flushes every step, 2bw (PipeDream-2BW) keeps two weight versions and applies each update one step late |
| tensor parallelism | 1D, 2D, sp | `--tp 2`, `--tp 4 --tp-mode 2d`, `--tp 2 --sp` | each layer's matrices split over ranks: Megatron 1D (heads, MLP, vocabulary), Colossal-AI 2D (SUMMA on a 2 x 2 grid), 1D plus sequence parallelism (LayerNorm and residual regions split along the sequence) |
| context parallelism | cp | `--cp 2` | each sequence split into 2 x cp chunks, attention computed around a ring |
| CO2 | CO2 | `--co2 --tau 2` (with `--dp 2`) | local AdamW steps; the replicas' weights averaged every tau steps, one round stale, overlapped with the next round; its workers are the dp replicas (with 1D, sp or cp each worker a tp x cp group, with 2D a q x q grid) |
| offload | offload | `--offload disk --offload-dir DIR --fast-mem 96M` | the training state in a disk tier, blocks swapped through the fast memory |
| recompute | recompute | `--recompute` | each layer's forward recomputed during backward |

`loom peer` (CO2's rule over a swarm of peers instead of MPI ranks) is a command of its own; it
appears with the triples below (a swarm of one peer).

## How a cell is run

A combination's flags are its options' flags together; an option that needs data parallelism
(ZeRO, CO2) brings `--dp 2`, once. It runs under `mpirun -np dp x pp x tp x cp` (one process
without mpirun when that is 1) on a model every layout divides: 2 layers, 4 heads, 32 channels,
vocabulary 64, batch 2, sequence 16, grad-accum 2, 2 steps. A cell is

- **ok**: exit 0 with both steps in the metrics;
- **refused**: exit 1-125 with a loom error naming a flag (its first line is the reason below);
- **BROKEN**: a crash, a signal, a timeout, or an exit without such a message (the test fails).

On the diagonal (in italics), the option alone; `-`: two options of one axis, not a pair.

## The table

EOF
    printf '| |'; printf ' %s |' "${NAMES[@]}"; echo
    printf '|---|'; for a in "${NAMES[@]}"; do printf -- '---|'; done; echo
    for a in "${NAMES[@]}"; do
        printf '| **%s** |' "$a"
        for b in "${NAMES[@]}"; do
            k=$(cell "$a" "$b")
            [ "$a" = "$b" ] && k="*$k*"
            printf ' %s |' "$k"
        done
        echo
    done
    echo
    echo "**$nrun of $npairs pairs run**, $((npairs - nrun)) refused; $nsingle of ${#NAMES[@]} options run alone."
    echo
    echo "## Refused pairs and why"
    echo
    echo "| pair | flags | loom's message |"
    echo "|---|---|---|"
    for k in "${PAIRS[@]}"; do
        [ "${CELL[$k]}" = ok ] && continue
        cmdline $k
        printf '| %s | `%s` | %s |\n' "${k/ / x }" "$(shown)" "${REASON[$k]//|/\\|}"
    done
    echo
    echo "## Triples and loom peer"
    echo
    echo "| combination | flags | result | loom's message |"
    echo "|---|---|---|---|"
    for k in "${TRIPLES[@]}"; do
        cmdline $k
        printf '| %s | `%s` | %s | %s |\n' "${k// / x }" "$(shown)" "${CELL[$k]}" \
            "${REASON[$k]//|/\\|}"
    done
}
if [ -n "$md" ]; then
    markdown > "$md" && echo "wrote $md"
elif ! cmp -s <(markdown) "$(dirname "$0")/../docs/COMPOSITION.md"; then
    echo "note: docs/COMPOSITION.md is not what this code produces; regenerate it:" \
        "bash tests/t_compose.sh --markdown docs/COMPOSITION.md"
fi

# Negative controls: the same script over a planted wrapper must report BROKEN and fail.
fake() { # NAME BODY: a LOOM wrapper that runs BODY for Z1 x 1D and the real loom otherwise
    printf '#!/usr/bin/env bash\ncase " $* " in *" --zero 1 --tp 2 "*) %s ;; esac\nexec %s "$@"\n' \
        "$2" "$LOOM" > "$d/$1"
    chmod +x "$d/$1"
}
fake segv 'kill -SEGV $$'
fake silent 'exit 3'
fake hang 'sleep 600'
for f in segv silent hang; do
    out=$(LOOM=$d/$f bash "$self" --only Z1,1D --timeout 5 2>/dev/null) && rc=0 || rc=$?
    if [ $rc -eq 0 ] || ! grep -q BROKEN <<<"$out"; then
        echo "FAILED: negative control '$f' was not reported BROKEN (exit $rc): $out"; exit 1
    fi
    echo "negative control ($f): $out"
done
[ $nbroken -eq 0 ] || { echo "FAILED: $nbroken BROKEN cells"; exit 1; }
