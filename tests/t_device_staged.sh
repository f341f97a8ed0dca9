#!/usr/bin/env bash
# t_device_staged.sh — the strategies on a device whose memory the host cannot touch, without a
# GPU: --device emu runs the CPU's kernels behind pointers that fault when the host reads them
# (src/backend/emu.c), so every buffer crossing MPI must go through comm's host stages
# (src/parallel/comm_stage.c: device → host → MPI → host → device, as on a GPU with an MPI
# that is not CUDA-aware), and every other host access to a device buffer in a strategy would
# crash the run. Each run equals the same run on --device cpu exactly (identical metrics
# records and exported bytes; the same kernels and the same sums): dp 2 with ZeRO 0-3, pp 2
# (1f1b and 2bw), dp 2 x pp 2 ZeRO-1, cp 2, CO2 over dp 2, tp 2 with sp, tp 2 x dp 2 ZeRO-3,
# 2D tp 4, pp 2 x tp 2 and cp 2 x tp 2; checkpoints of dp 2 ZeRO-2 and tp 2 x dp 2 ZeRO-1
# saved on emu resume on the CPU. (Swapping on a device, --offload: t_offload_host.sh.)
# Negative control: LOOM_COMM_NO_STAGE=1 hands the device pointers to MPI as they are, and
# the run must fault (a signal, or AddressSanitizer's report of the wild pointer).
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/d.bin" 64 60000 3
flags="--data $d/d.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2
       --seq 16 --steps 4 --lr 3e-3 --warmup 1 --weight-decay 0.1 --grad-clip 0.5 --progress off
       --bucket-mb 0.02 --seed 5 --grad-accum 2"
both() { # NAME NP ARGS...: the run on cpu and on emu, equal
    local name=$1 np=$2
    shift 2
    for dev in cpu emu; do
        $MPI -np "$np" $LOOM train $flags "$@" --device $dev --metrics "$d/$dev.jsonl" \
            --export "$d/$dev.st"
    done
    same "$name on emu vs cpu" "$d/emu.jsonl" "$d/cpu.jsonl" "$d/emu.st" "$d/cpu.st"
}
# (under the sanitizers a subset: every kind of staged operation, each strategy once)
full=1
[ -z "${LOOM_ASAN:-}" ] || full=
for z in 0 1 2 3; do
    [ -n "$full" ] || [ $z -ge 2 ] || continue
    both "dp 2 zero $z" 2 --dp 2 --zero $z
done
[ -z "$full" ] || both "pp 2 1f1b" 2 --pp 2 --schedule 1f1b
both "pp 2 2bw" 2 --pp 2 --schedule 2bw
[ -z "$full" ] || both "dp 2 x pp 2 zero 1" 4 --dp 2 --pp 2 --zero 1
both "cp 2" 2 --cp 2
both "co2 dp 2" 2 --dp 2 --co2 --tau 2
both "tp 2 sp" 2 --tp 2 --sp
[ -z "$full" ] || both "tp 2 x dp 2 zero 3" 4 --tp 2 --dp 2 --zero 3
both "tp 4 2d" 4 --tp 4 --tp-mode 2d
[ -z "$full" ] || both "pp 2 x tp 2" 4 --pp 2 --tp 2
[ -z "$full" ] || both "cp 2 x tp 2" 4 --cp 2 --tp 2

# a checkpoint written from device buffers resumes on the CPU
for lay in "2:--dp 2 --zero 2" "4:--tp 2 --dp 2 --zero 1"; do
    np=${lay%%:*} lay=${lay#*:}
    $MPI -np $np $LOOM train $flags $lay --device emu --save "$d/ck" --save-every 2 --keep 0 \
        --metrics "$d/all.jsonl"
    $MPI -np $np $LOOM train $flags $lay --resume "$d/ck/step_00000002" --metrics "$d/resumed.jsonl"
    tail -n 2 "$d/all.jsonl" > "$d/tail.jsonl"
    same "$lay saved on emu, resumed on cpu" "$d/resumed.jsonl" "$d/tail.jsonl"
    rm -rf "$d/ck" "$d/all.jsonl" "$d/resumed.jsonl"
done


# negative control: without the stages MPI reads the device pointers and the run dies
if LOOM_COMM_NO_STAGE=1 $MPI -np 2 $LOOM train $flags --dp 2 --device emu >"$d/nc.log" 2>&1; then
    echo "FAILED: dp 2 on emu without host stages ran"; exit 1
fi
grep -q "signal 11\|signal 7\|Segmentation fault\|Bus error\|AddressSanitizer" "$d/nc.log" ||
    { echo "FAILED: dp 2 on emu without host stages failed, but not by a fault:"; tail "$d/nc.log"; exit 1; }
echo "negative control: dp 2 on emu without host stages fails"
