#!/usr/bin/env bash
# long: started first (tests/run.sh)
# t_llama_offload.sh — block swapping (--offload disk) of --arch llama trains bit for bit what the
# in-memory run trains (losses, gradient norms, validation losses, exported weights byte for
# byte; kv-heads 1 of 2 heads, untied lm_head, gradient accumulation K = 3, clipping active):
# one process with the planned units and with explicit units and prefetch 2, --recompute on and
# off, --grad-clip 0 (AdamW fused into the backward); dp 2 (ZeRO 0 and 1); tp 2 (the kv head
# shared by both ranks) and cp 2 (RoPE at global positions), each rank swapping its own part;
# pp 2; CO2 with 2 workers. Checkpoints: a dp 2 offloaded checkpoint resumes with and without
# --offload (and an in-memory one with it) onto the uninterrupted run's bytes. The budget binds:
# a LLaMA model of 4x --fast-mem of training state trains within it (peak RSS), the same bits
# as in memory.
# The scratch files are gone after every run. Negative control: one step less exports different
# bytes.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 60000 3
mkdir "$d/off"
base="--arch llama --kv-heads 1 --data $d/train.bin --layers 4 --heads 2 --dim 32 --vocab 64
      --block-size 32 --batch 2 --seq 16 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5
      --progress off --seed 5 --threads 1"
flags="$base --val-data $d/train.bin --val-every 2 --val-windows 3 --steps 4 --grad-accum 3"
OFF="--offload disk --offload-dir $d/off --fast-mem $(fastmem 64)"
offloaded() { # NAME A B: the runs A and B trained the same; no scratch file left
    same "$1" "$d/$2.jsonl" "$d/$3.jsonl" "$d/$2.safetensors" "$d/$3.safetensors" || exit 1
    [ -z "$(ls -A "$d/off")" ] || { echo "$1: scratch files left in --offload-dir"; exit 1; }
}
run() { # run NAME NP FLAGS...
    local name=$1 np=$2; shift 2
    $MPI -np "$np" $LOOM train "$@" --metrics "$d/$name.jsonl" \
        --export "$d/$name.safetensors" 2> "$d/$name.err" || { cat "$d/$name.err"; exit 1; }
}
for rc in "" "--recompute"; do
    run mem 1 $flags $rc
    run off 1 $flags $rc $OFF
    offloaded "1 process${rc:+ $rc}, planned units" mem off
    run off2 1 $flags $rc $OFF --offload-units "[[0,1],[2,2],[3,5]]" --offload-prefetch 2
    offloaded "1 process${rc:+ $rc}, units [[0,1],[2,2],[3,5]] prefetch 2" mem off2
done
run memf 1 $flags --grad-clip 0
run offf 1 $flags --grad-clip 0 $OFF --offload-units "[[0,1],[2,2],[3,5]]"
offloaded "1 process, --grad-clip 0: the update fused into the backward" memf offf
run short 1 $flags --steps 3
if cmp -s "$d/mem.safetensors" "$d/short.safetensors"; then
    echo "negative control: 3 and 4 steps export the same bytes"; exit 1
fi
echo "negative control: one update less exports different bytes: seen"

for z in 0 1; do
    run dpmem 2 $flags --dp 2 --zero $z
    run dpoff 2 $flags --dp 2 --zero $z $OFF
    offloaded "dp 2 zero $z" dpmem dpoff
done
for lay in "--tp 2" "--cp 2" "--pp 2" "--dp 2 --co2 --tau 2"; do
    run lmem 2 $flags $lay
    run loff 2 $flags $lay $OFF
    offloaded "$lay" lmem loff
done

echo "== checkpoints: dp 2, saved at step 2 of 4, resumed with and without --offload"
lin="$base --lr-schedule constant --grad-accum 2 --dp 2 --steps 4"
$MPI -np 2 $LOOM train $lin --export "$d/full.safetensors" 2> /dev/null
for src in off mem; do
    extra=""; [ $src = off ] && extra=$OFF
    $MPI -np 2 $LOOM train $lin --save-every 2 --save "$d/ck_$src" $extra 2> /dev/null
    rm -rf "$d/ck_$src/step_00000004"; echo step_00000002 > "$d/ck_$src/latest"
done
for c in "ck_off:" "ck_off:$OFF" "ck_mem:$OFF"; do
    ck=${c%%:*} extra=${c#*:}
    $MPI -np 2 $LOOM train $lin --resume "$d/$ck" $extra --export "$d/res.safetensors" \
        2> "$d/res.err" || { cat "$d/res.err"; exit 1; }
    cmp -s "$d/full.safetensors" "$d/res.safetensors" ||
        { echo "resume from $ck ${extra:+with --offload} differs from the uninterrupted run"; exit 1; }
    echo "resume from $ck ${extra:+with --offload}: the uninterrupted run's bytes"
    [ -z "$(ls -A "$d/off")" ] || { echo "resume from $ck: scratch files left"; exit 1; }
done

echo "== the budget binds"
big="--arch llama --kv-heads 1 --data $d/train.bin --layers 30 --heads 4 --dim 256 --vocab 64
     --block-size 32 --batch 2 --seq 16 --grad-accum 2 --progress off --seed 5 --threads 1
     --steps 2 --recompute"
if [ -z "${LOOM_ASAN:-}" ]; then
    run bm 1 $big
    run bo 1 $big --offload disk --offload-dir "$d/off" --fast-mem 80M
    offloaded "llama, 30 layers in --fast-mem 80M" bm bo
    params=$(grep -o '[0-9.]*M params' "$d/bm.err" | grep -o '^[0-9.]*')
    peak=$(grep -o 'peak RSS [0-9.]* MiB of --fast-mem' "$d/bo.err" | tail -1 | awk '{print $3}')
    $PY - "$params" "$peak" <<'PY'
import sys
params, peak = map(float, sys.argv[1:])
state = 16 * params * 1e6 / 2**20
print(f"training state {state:.0f} MiB = {state / 80:.1f}x --fast-mem 80 MiB; peak RSS {peak:.1f} MiB")
assert state >= 4 * 80, "the model is too small for this test"
assert peak <= 80, f"peak RSS {peak:.1f} MiB over 80 MiB"
PY
fi
echo "t_llama_offload: ok"
