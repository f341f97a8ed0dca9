#!/usr/bin/env bash
# long: started first (tests/run.sh)
# t_offload_tp.sh — block swapping (--offload disk) of a tensor- or context-parallel part: each
# rank swaps its own part's blocks through its own tier, the blocks communicating over tp / cp
# inside as in memory. Against the in-memory run of the same layout, bit for bit (losses,
# gradient norms, validation losses, exported weights): --tp 2 (clipping on: the norm taken per
# tensor from the tier, the replicated tensors once; clipping off: the update fused into the
# backward; --recompute), --tp 2 --sp, --cp 2, dp 2 x tp 2, tp 2 x cp 2 with --sp, all with
# gradient accumulation K = 3 and clipping active (the norms are above --grad-clip).
# Checkpoints: an offloaded tp run's mid-run checkpoint resumes with and without --offload (and
# an in-memory one with it) onto the uninterrupted run's bytes; a cp one with --offload too.
# The budget binds: a part whose training state (parameters, gradients, two moments: 109 MiB per
# rank under --tp 2, 217 MiB under --cp 2) exceeds --fast-mem (96M, 128M) trains within it on
# every rank (peak RSS printed per rank; the fill of the tier, a checkpoint save every step and
# the --export included: both assembled from the ranks' tiers through the budget), the same
# bits as in memory (losses, exported weights, checkpoint shards), where a rank peaks above the
# budget (the negative control).
# ZeRO 1-3 with a swapped part are refused, naming why.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 60000 3
mkdir "$d/off"
base="--data $d/train.bin --layers 4 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2
      --seq 16 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5 --threads 1"
flags="$base --val-data $d/train.bin --val-every 2 --val-windows 3 --steps 4 --grad-accum 3"
OFF="--offload disk --offload-dir $d/off --fast-mem $(fastmem 64)"
mrun() { # NAME NP FLAGS...
    local name=$1 np=$2; shift 2
    $MPI -np "$np" $LOOM train "$@" --metrics "$d/$name.jsonl" --export "$d/$name.st" \
        2>"$d/$name.err" || { cat "$d/$name.err"; exit 1; }
}
clean() { [ -z "$(ls -A "$d/off")" ] || { echo "$1: scratch files left in --offload-dir"; exit 1; }; }
for lay in "2:--tp 2" "2:--tp 2 --grad-clip 0" "2:--tp 2 --recompute" "2:--tp 2 --sp" "2:--cp 2" \
    "4:--tp 2 --dp 2" "4:--tp 2 --cp 2 --sp"; do
    np=${lay%%:*} l=${lay#*:}
    mrun mem "$np" $flags $l
    mrun off "$np" $flags $l $OFF
    grep -q "blocks swapped through its own disk tier" "$d/off.err" ||
        { echo "$l: the run does not say it swaps"; exit 1; }
    same "$l, swapped vs in memory" "$d/mem.jsonl" "$d/off.jsonl" "$d/mem.st" "$d/off.st" || exit 1
    clean "$l"
done
python3 - "$d/mem.jsonl" <<'PY' || exit 1
import json, sys
n = [json.loads(l)["grad_norm"] for l in open(sys.argv[1]) if '"grad_norm"' in l]
if not n or min(n) <= 0.5: sys.exit(f"clipping inactive: norms {n}")
PY

# checkpoints: a save at step 2 of 4 (the step-4 one removed) resumed onto the full run's bytes
lin="$base --lr-schedule constant --grad-accum 2 --tp 2 --steps 4"
offload_resume "tp 2" "$lin"
# --cp 2 (the part is the whole layout): an offloaded checkpoint resumed with --offload
lin="${lin/--tp 2/--cp 2}"
$MPI -np 2 $LOOM train $lin --export "$d/full.st" 2>/dev/null
$MPI -np 2 $LOOM train $lin --save-every 2 --save "$d/ck_cp" $OFF 2>/dev/null
rm -rf "$d/ck_cp/step_00000004"; echo step_00000002 >"$d/ck_cp/latest"
$MPI -np 2 $LOOM train $lin --resume "$d/ck_cp" $OFF --export "$d/res.st" 2>"$d/res.err" ||
    { cat "$d/res.err"; exit 1; }
cmp -s "$d/full.st" "$d/res.st" || { echo "cp 2: the offloaded resume differs"; exit 1; }
echo "cp 2: resume from ck_cp with --offload: the uninterrupted run's bytes"

# the budget binds: per rank 27 MiB of parameters, 109 MiB of training state, --fast-mem 96M
big="--data $d/train.bin --layers 8 --heads 4 --dim 384 --vocab 64 --block-size 32 --batch 2
     --seq 16 --grad-accum 2 --grad-clip 0.5 --progress off --seed 5 --threads 1 --steps 2"
same_shards() { # NAME DIR_A DIR_B: every step's shard files byte for byte
    local f n=0
    for f in "$2"/step_*/*.bin; do
        cmp -s "$f" "$3/${f#"$2"/}" || { echo "$1: ${f#"$2"/} differs"; exit 1; }
        n=$((n + 1))
    done
    [ "$n" -ge 2 ] || { echo "$1: only $n shard files"; exit 1; }
    echo "$1: the swapped run's $n checkpoint shards are the in-memory run's bytes"
}
peaks() { grep -o 'peak RSS [0-9.]* MiB of --fast-mem' "$1" | awk '{print $3}'; }
if [ -z "${LOOM_ASAN:-}" ]; then
    $MPI -np 2 $LOOM train $big --tp 2 --metrics "$d/bm.jsonl" --save "$d/bmck" --save-every 1 \
        --export "$d/bm.st" 2>"$d/bm.err" || { cat "$d/bm.err"; exit 1; }
    $MPI -np 2 $LOOM train $big --tp 2 --offload disk --offload-dir "$d/off" --fast-mem 96M \
        --save "$d/bock" --save-every 1 --export "$d/bo.st" \
        --metrics "$d/bo.jsonl" 2>"$d/bo.err" || { cat "$d/bo.err"; exit 1; }
    same "tp 2, 109 MiB of state per rank in --fast-mem 96M" "$d/bm.jsonl" "$d/bo.jsonl" \
        "$d/bm.st" "$d/bo.st" || exit 1
    same_shards "tp 2" "$d/bmck" "$d/bock"
    p=$(peaks "$d/bo.err")
    [ "$(echo "$p" | wc -l)" = 2 ] || { echo "expected two ranks' peaks, got: $p"; exit 1; }
    for x in $p; do
        awk -v x="$x" 'BEGIN { exit !(x <= 96) }' || { echo "a rank peaked at $x MiB > 96"; exit 1; }
    done
    mp=$(grep -o 'peak RSS [0-9.]* MiB |' "$d/bm.err" | awk '{print $3}')
    awk -v x="$mp" 'BEGIN { exit !(x > 96) }' ||
        { echo "negative control: in memory the rank peaked at only $mp MiB"; exit 1; }
    echo "budget binds: swapped ranks peaked at $(echo $p) MiB of 96, in memory at $mp MiB"
    clean "bound"
    # --cp 2: the part is the whole model (217 MiB of state per rank) in --fast-mem 128M
    $MPI -np 2 $LOOM train $big --cp 2 --metrics "$d/cm.jsonl" --save "$d/cmck" --save-every 1 \
        --export "$d/cm.st" 2>"$d/cm.err" || { cat "$d/cm.err"; exit 1; }
    $MPI -np 2 $LOOM train $big --cp 2 --offload disk --offload-dir "$d/off" --fast-mem 128M \
        --save "$d/cock" --save-every 1 --export "$d/co.st" \
        --metrics "$d/co.jsonl" 2>"$d/co.err" || { cat "$d/co.err"; exit 1; }
    same "cp 2, 217 MiB of state per rank in --fast-mem 128M" "$d/cm.jsonl" "$d/co.jsonl" \
        "$d/cm.st" "$d/co.st" || exit 1
    same_shards "cp 2" "$d/cmck" "$d/cock"
    p=$(peaks "$d/co.err")
    [ "$(echo "$p" | wc -l)" = 2 ] || { echo "expected two ranks' peaks, got: $p"; exit 1; }
    for x in $p; do
        awk -v x="$x" 'BEGIN { exit !(x <= 128) }' || { echo "a cp rank peaked at $x MiB > 128"; exit 1; }
    done
    mp=$(grep -o 'peak RSS [0-9.]* MiB |' "$d/cm.err" | awk '{print $3}')
    awk -v x="$mp" 'BEGIN { exit !(x > 128) }' ||
        { echo "negative control: in memory the cp rank peaked at only $mp MiB"; exit 1; }
    echo "budget binds (cp): swapped ranks peaked at $(echo $p) MiB of 128, in memory at $mp MiB"
    clean "bound cp"
fi

# refused: a swapped part with ZeRO 1-3
for z in 1 2 3; do
    if $MPI -np 4 $LOOM train $flags --tp 2 --dp 2 --zero $z $OFF 2>"$d/z.err"; then
        echo "--tp 2 --offload --zero $z ran"; exit 1
    fi
    grep -q "with ZeRO 0 only" "$d/z.err" || { cat "$d/z.err"; exit 1; }
done
echo "ZeRO 1-3 with a swapped part: refused"
