#!/usr/bin/env bash
# long: started first (tests/run.sh)
# t_offload.sh — block swapping (--offload disk) trains bit for bit what the in-memory run
# trains: the same losses, gradient norms and validation losses in the metrics, and exported
# weights equal byte for byte, with gradient accumulation (K = 3), recompute on and off, the
# planned units and explicit ones with prefetch 2, clipping on (AdamW a streamed pass after the
# backward) and off (AdamW per unit right after its backward); for one process, for dp 2 with
# ZeRO 0, 1 and 2, and for CO2 (2 workers, tau 2, a partial last round, adaptive and constant gap
# penalty: the anchor, outer momentum and round averages live in the tier, the averages run in
# the background piece by piece). Checkpoints: an offloaded run's checkpoint resumes with and
# without offload (and an in-memory one with offload) onto the uninterrupted trajectory, byte
# for byte; for CO2 mid-run checkpoints (its outer state) likewise.
# The scratch files are gone after every run. Negative control: a run with one step less
# exports different bytes (the comparison sees a change of one update).
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
offloaded() { # NAME A B: runs A and B ($d/A.jsonl, $d/A.st, ...) trained the same (same, in
    # tests/lib.sh: metrics but the timings, and the exported weights' bytes), and no scratch
    # file is left in --offload-dir
    same "$1" "$d/$2.jsonl" "$d/$3.jsonl" "$d/$2.st" "$d/$3.st" || exit 1
    [ -z "$(ls -A "$d/off")" ] || { echo "$1: scratch files left in --offload-dir"; exit 1; }
}
run() { # run NAME FLAGS...: one process
    local name=$1; shift
    $LOOM train "$@" --metrics "$d/$name.jsonl" --export "$d/$name.st" 2>"$d/$name.err" ||
        { cat "$d/$name.err"; exit 1; }
}
for rc in "" "--recompute"; do
    run mem $flags $rc
    run off $flags $rc $OFF
    grep -q '"io_ms"' "$d/off.jsonl" || { echo "no io_ms in the offloaded run's metrics"; exit 1; }
    offloaded "1 process${rc:+ $rc}, planned units" mem off
    run off2 $flags $rc $OFF --offload-units "[[0,1],[2,2],[3,5]]" --offload-prefetch 2
    offloaded "1 process${rc:+ $rc}, units [[0,1],[2,2],[3,5]] prefetch 2" mem off2
done
# clipping off (and a non-finite step stopping the run): each unit's AdamW runs right after its
# backward from the slot, the gradient never written (the fused update)
for rc in "" "--recompute"; do
    run memf $flags $rc --grad-clip 0
    run offf $flags $rc --grad-clip 0 $OFF --offload-units "[[0,1],[2,2],[3,5]]" --offload-prefetch 2
    offloaded "1 process${rc:+ $rc}, --grad-clip 0: the update fused into the backward" memf offf
done
run short $flags --steps 3
if cmp -s "$d/mem.st" "$d/short.st"; then echo "negative control: 3 and 4 steps export the same bytes"; exit 1; fi
echo "negative control: one update less exports different bytes: seen"

# ZeRO-2 swapped reduce-scatters each unit's summed gradient once per step, as ZeRO-1 swapped or
# in memory all-reduce it: the same bits as ZeRO-1 in memory; in-memory ZeRO-2 reduces every
# micro-batch (another order of additions): within 1e-5 of it.
for z in 0 1 2; do
    for clip in 0.5 0; do
        for m in mem off; do
            extra="" zm=$z; [ $m = off ] && extra=$OFF
            [ $m = mem ] && [ $z = 2 ] && zm=1
            $MPI -np 2 $LOOM train $flags --grad-accum 2 --dp 2 --zero $zm --grad-clip $clip $extra \
                --metrics "$d/dp$m.jsonl" --export "$d/dp$m.st" 2>"$d/dp.err" ||
                { cat "$d/dp.err"; exit 1; }
        done
        offloaded "dp 2 zero $z, --grad-clip $clip$([ $z = 2 ] && echo ' (in memory: zero 1)')" \
            dpmem dpoff
        [ $z = 2 ] || continue
        $MPI -np 2 $LOOM train $flags --grad-accum 2 --dp 2 --zero 2 --grad-clip $clip \
            --metrics "$d/dpz2.jsonl" --export "$d/dpz2.st" 2>"$d/dp.err" || { cat "$d/dp.err"; exit 1; }
        same --tol 1e-5 "dp 2 zero 2 swapped vs in memory, --grad-clip $clip" "$d/dpz2.jsonl" \
            "$d/dpoff.jsonl" "$d/dpz2.st" "$d/dpoff.st" || exit 1
    done
done

# a unit larger than the streaming buffer (12 layers in one unit): its reduce-scatter in pieces
z2="${flags/--layers 4/--layers 12} --grad-accum 2 --dp 2"
$MPI -np 2 $LOOM train $z2 --zero 1 --metrics "$d/bigmem.jsonl" --export "$d/bigmem.st" 2>"$d/dp.err" ||
    { cat "$d/dp.err"; exit 1; }
$MPI -np 2 $LOOM train $z2 --zero 2 $OFF --offload-units "[[0,0],[1,12],[13,13]]" \
    --metrics "$d/bigoff.jsonl" --export "$d/bigoff.st" 2>"$d/dp.err" || { cat "$d/dp.err"; exit 1; }
offloaded "dp 2 zero 2, 12 layers in one unit (in memory: zero 1)" bigmem bigoff

co2="$base --steps 5 --grad-accum 2 --dp 2 --co2 --tau 2"
for g in "adaptive" "constant" "adaptive --grad-clip 0"; do
    for m in mem off; do
        extra=""; [ $m = off ] && extra=$OFF
        $MPI -np 2 $LOOM train $co2 --gap-mode $g $extra --metrics "$d/co$m.jsonl" \
            --export "$d/co$m.st" 2>"$d/co.err" || { cat "$d/co.err"; exit 1; }
    done
    offloaded "co2 2 workers, $g gap penalty" comem cooff
done
cl="$base --lr-schedule constant --grad-accum 2 --dp 2 --co2 --tau 2 --steps 6"
$MPI -np 2 $LOOM train $cl --export "$d/cfull.st" 2>/dev/null
for src in off mem; do # a round-end checkpoint at step 4 (the step-6 one removed)
    extra=""; [ $src = off ] && extra=$OFF
    $MPI -np 2 $LOOM train $cl --save-every 2 --save "$d/cck_$src" $extra 2>/dev/null
    rm -rf "$d/cck_$src/step_00000006"; echo step_00000004 >"$d/cck_$src/latest"
done
for c in "cck_off:" "cck_off:$OFF" "cck_mem:$OFF"; do
    ck=${c%%:*} extra=${c#*:}
    $MPI -np 2 $LOOM train $cl --resume "$d/$ck" $extra --export "$d/cres.st" 2>"$d/co.err" ||
        { cat "$d/co.err"; exit 1; }
    cmp -s "$d/cfull.st" "$d/cres.st" ||
        { echo "co2: resume from $ck ${extra:+with offload} differs from the uninterrupted run"; exit 1; }
    echo "co2: resume from $ck ${extra:+with --offload}: the uninterrupted run's bytes"
done

lin="$base --lr-schedule constant --grad-accum 2"
run full $lin --steps 4
$LOOM train $lin --steps 2 $OFF --save "$d/ck_off" 2>/dev/null
$LOOM train $lin --steps 2 --save "$d/ck_mem" 2>/dev/null
for c in "ck_off:" "ck_off:$OFF" "ck_mem:$OFF"; do
    ck=${c%%:*} extra=${c#*:}
    run res $lin --steps 4 --resume "$d/$ck" $extra
    cmp -s "$d/full.st" "$d/res.st" ||
        { echo "resume from $ck ${extra:+with offload} differs from the uninterrupted run"; exit 1; }
    echo "resume from $ck ${extra:+with --offload}: the uninterrupted run's bytes"
done
