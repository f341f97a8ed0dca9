#!/usr/bin/env bash
# long: started first (tests/run.sh)
# t_offload_host.sh — --offload host without a GPU: the state lives in host memory, the units
# computing in device memory (--device emu: the host cannot touch it, src/backend/emu.c), moved
# by the backend's copy stream, which on emu runs a copy only when its ticket is waited for (a
# missing wait computes on stale bytes, as it could on a GPU).
#   * one process at a --fast-mem that holds under a quarter of the state (parameters,
#     gradients, AdamW moments) trains bit for bit what the in-memory run on the same device
#     trains: identical metrics records and exported bytes, planned units and explicit ones with
#     prefetch 2, recompute on and off, clipping on (the streamed update pass) and off (AdamW
#     fused into the backward); the device's high-water mark (loom's own allocations) stays
#     within --fast-mem;
#   * tp 2 with sp, cp 2, tp 2 x dp 2 (each rank swapping its part), pp 2 (1f1b, 2bw, gpipe x
#     dp 2: each stage swapping its blocks), 2D tp 4 and the LLaMA block equal the same layout
#     in memory on the CPU, and tp 2 and pp 2 checkpoints resume there;
#   * dp 2 with ZeRO 0, 1 and 2 and CO2 over 2 workers (their collectives on device buffers go
#     through comm's host stages) equal the same layouts with --offload disk on the CPU, units
#     and prefetch given, bit for bit (t_offload.sh proves those equal the in-memory runs);
#   * --offload disk with --device emu (a disk under the device, through page-locked bounce
#     buffers): one process equals the in-memory emu run, tp 2 and pp 2 2bw the in-memory cpu
#     runs, dp 2 ZeRO-1 --offload disk on the CPU;
#   * device <- host <- disk (--offload host --offload-dir --host-mem: the front of each rank's
#     state in page-locked host memory, the rest on disk below it, both parts used): one process
#     equals the in-memory emu run within --fast-mem, pp 2 1f1b and tp 2 the in-memory cpu runs,
#     dp 2 ZeRO-1 --offload disk on the CPU; the planner measures both parts and plans with
#     read rates between them;
#   * a checkpoint saved with --offload host resumes on the CPU in memory onto the uninterrupted
#     run's bytes;
#   * refusals: a budget below what the plan needs names it.
# Negative control: LOOM_SWAP_NO_READ_WAIT=1 computes on a unit before its copy is waited for:
# the exported bytes must differ.
set -eu
. "$(dirname "$0")/lib.sh"
need_mpi
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/d.bin" 512 200000 3
mkshard "$d/s.bin" 64 60000 3
mkdir "$d/off"
# 12.8M parameters: 195 MiB of state; --fast-mem 48 MiB is under a quarter of it
big="--data $d/d.bin --layers 16 --heads 4 --dim 256 --vocab 512 --block-size 32 --batch 2
     --seq 16 --lr 3e-3 --weight-decay 0.1 --progress off --seed 5 --threads 1 --steps 3
     --grad-accum 2 --device emu"
run() { # NAME FLAGS...: one process
    local name=$1; shift
    $LOOM train "$@" --metrics "$d/$name.jsonl" --export "$d/$name.st" 2>"$d/$name.err" ||
        { cat "$d/$name.err"; exit 1; }
}
within() { # NAME: the run's device high-water mark within its --fast-mem
    local line peak cap
    line=$(grep 'offload: rank 0: peak device memory' "$d/$1.err") ||
        { echo "$1: no peak device memory line"; cat "$d/$1.err"; exit 1; }
    peak=$(sed -E 's/.*peak device memory ([0-9.]+) MiB of --fast-mem ([0-9.]+) MiB.*/\1/' <<<"$line")
    cap=$(sed -E 's/.*peak device memory ([0-9.]+) MiB of --fast-mem ([0-9.]+) MiB.*/\2/' <<<"$line")
    awk -v p="$peak" -v c="$cap" 'BEGIN { exit !(p <= c) }' ||
        { echo "$1: device peak $peak MiB above --fast-mem $cap MiB"; exit 1; }
    echo "$1: device peak $peak MiB within --fast-mem $cap MiB"
}
HOST="--offload host --fast-mem 48M"
for clip in 0.5 0; do
    run mem $big --grad-clip $clip
    run host $big --grad-clip $clip $HOST
    same "1 process, --grad-clip $clip, planned units" "$d/mem.jsonl" "$d/host.jsonl" \
        "$d/mem.st" "$d/host.st"
    within host
done
small="--data $d/s.bin --layers 4 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2
       --seq 16 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5 --threads 1
       --val-data $d/s.bin --val-every 2 --val-windows 3 --steps 4 --grad-accum 3"
UNITS='--offload-units [[0,1],[2,2],[3,5]] --offload-prefetch 2'
for rc in "" "--recompute"; do
    run mem $small $rc --device emu
    run host $small $rc --device emu $HOST $UNITS
    same "1 process${rc:+ $rc}, units [[0,1],[2,2],[3,5]] prefetch 2" "$d/mem.jsonl" \
        "$d/host.jsonl" "$d/mem.st" "$d/host.st"
done

# the layouts against --offload disk on the CPU (the same executor over another tier)
both() { # NAME NP ARGS...
    # ($CFG: the model, default $small; $OFF: the emu run's tier, default $HOST)
    local name=$1 np=$2 cfg=${CFG:-$small} off=${OFF:-$HOST}
    shift 2
    $MPI -np "$np" $LOOM train $cfg "$@" --device cpu --offload disk --offload-dir "$d/off" \
        --fast-mem "$(fastmem 96)" $UNITS --metrics "$d/disk.jsonl" --export "$d/disk.st"
    $MPI -np "$np" $LOOM train $cfg "$@" --device emu $off $UNITS --metrics "$d/host.jsonl" \
        --export "$d/host.st" 2>"$d/host.err" || { cat "$d/host.err"; exit 1; }
    same "$name: --offload host on emu vs --offload disk on cpu" "$d/host.jsonl" \
        "$d/disk.jsonl" "$d/host.st" "$d/disk.st"
}
for z in 0 1 2; do
    both "dp 2 zero $z" 2 --dp 2 --zero $z
done
both "co2 2 workers tau 2" 2 --dp 2 --co2 --tau 2 --grad-clip 0

# tensor- and context-parallel parts swap through the same executor (each rank its own tier);
# a save or an export assembles the ranges in host memory (no --offload-dir)
mem_vs() { # NAME NP ARGS...: swapped on emu ($OFF, default --offload host and $UNITS) against
    # the layout in memory on the cpu ($CFG: the model, default $small)
    local name=$1 np=$2 off=${OFF:-$HOST $UNITS} cfg=${CFG:-$small}
    shift 2
    $MPI -np "$np" $LOOM train $cfg "$@" --device cpu --metrics "$d/mem.jsonl" \
        --export "$d/mem.st" 2>/dev/null
    $MPI -np "$np" $LOOM train $cfg "$@" --device emu $off --metrics "$d/host.jsonl" \
        --export "$d/host.st" 2>"$d/host.err" || { cat "$d/host.err"; exit 1; }
    same "$name on emu vs in memory on cpu" "$d/host.jsonl" "$d/mem.jsonl" "$d/host.st" \
        "$d/mem.st"
}
resumes() { # NAME NP ARGS...: a checkpoint of --offload host on emu (step 2 of 4) resumes on the
    # cpu in memory onto the uninterrupted run's bytes ($d/full.st)
    local name=$1 np=$2
    shift 2
    rm -rf "$d/ck"
    $MPI -np "$np" $LOOM train $small "$@" --device cpu --export "$d/full.st" 2>/dev/null
    $MPI -np "$np" $LOOM train $small "$@" --device emu $HOST $UNITS --save-every 2 \
        --save "$d/ck" 2>/dev/null
    rm -rf "$d/ck/step_00000004"; echo step_00000002 >"$d/ck/latest"
    $MPI -np "$np" $LOOM train $small "$@" --device cpu --resume "$d/ck" --export "$d/res.st" \
        2>/dev/null
    cmp -s "$d/full.st" "$d/res.st" ||
        { echo "$name: a checkpoint of --offload host resumed on the cpu differs"; exit 1; }
    echo "$name: a checkpoint of --offload host resumed on the cpu: the uninterrupted run's bytes"
}
mem_vs "tp 2 sp, --offload host" 2 --tp 2 --sp
mem_vs "cp 2, --offload host" 2 --cp 2
mem_vs "tp 2 x dp 2, --offload host" 4 --tp 2 --dp 2
# pipeline stages swap their own blocks (every schedule)
mem_vs "pp 2 1f1b, --offload host" 2 --pp 2 --schedule 1f1b
mem_vs "pp 2 2bw, --offload host" 2 --pp 2 --schedule 2bw
mem_vs "pp 2 gpipe x dp 2, --offload host" 4 --pp 2 --schedule gpipe --dp 2
# a 2D grid's part: its layers and every block's moments swapped, the ends resident
mem_vs "2D tp 4, --offload host" 4 --tp 4 --tp-mode 2d
resumes "tp 2" 2 --tp 2
resumes "pp 2" 2 --pp 2

# the LLaMA block (grouped-query attention, SwiGLU, RMSNorm) swapped the same way
llama="--data $d/s.bin --arch llama --kv-heads 1 --ffn-dim 64 --layers 3 --heads 2 --dim 32
       --vocab 64 --block-size 32 --batch 2 --seq 16 --lr 3e-3 --grad-clip 0.5 --progress off
       --seed 5 --threads 1 --steps 4 --grad-accum 2"
$LOOM train $llama --device cpu --metrics "$d/lm.jsonl" --export "$d/lm" 2>/dev/null
$LOOM train $llama --device emu $HOST --metrics "$d/lh.jsonl" --export "$d/lh" 2>/dev/null
same "llama: --offload host on emu vs in memory on cpu" "$d/lh.jsonl" "$d/lm.jsonl"
diff -r "$d/lh" "$d/lm" >/dev/null || { echo "llama: exported directories differ"; exit 1; }
echo "llama: exported directories identical"

# --offload disk on a device: the same executor over the disk tier, each I/O thread through a
# page-locked bounce buffer (device <- host <- disk)
DISKDEV="--offload disk --offload-dir $d/off --fast-mem 48M"
run mem $small --device emu
run dd $small --device emu $DISKDEV $UNITS
same "1 process, --offload disk on emu" "$d/mem.jsonl" "$d/dd.jsonl" "$d/mem.st" "$d/dd.st"
within dd
[ -z "$(ls -A "$d/off")" ] || { echo "scratch files left in --offload-dir"; exit 1; }
OFF="$DISKDEV $UNITS" mem_vs "pp 2 2bw, --offload disk" 2 --pp 2 --schedule 2bw
OFF="$DISKDEV $UNITS" mem_vs "tp 2, --offload disk" 2 --tp 2
$MPI -np 2 $LOOM train $small --dp 2 --zero 1 --device emu $DISKDEV $UNITS \
    --metrics "$d/dd.jsonl" --export "$d/dd.st" 2>"$d/dd.err" || { cat "$d/dd.err"; exit 1; }
$MPI -np 2 $LOOM train $small --dp 2 --zero 1 --device cpu --offload disk --offload-dir "$d/off" \
    --fast-mem "$(fastmem 96)" $UNITS --metrics "$d/disk.jsonl" --export "$d/disk.st" 2>/dev/null
same "dp 2 zero 1: --offload disk on emu vs on cpu" "$d/dd.jsonl" "$d/disk.jsonl" "$d/dd.st" \
    "$d/disk.st"

# device <- host <- disk: --host-mem of page-locked host memory holds the front of each rank's
# state (less the disk part's 16 MiB of bounce buffers), the rest is on disk below it; a model
# of 53 MiB of state (26 a stage or a tp part) against 20 MiB: 4 MiB in host memory
mid="--data $d/d.bin --layers 4 --heads 4 --dim 256 --vocab 512 --block-size 32 --batch 2
     --seq 16 --lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --progress off --seed 5 --threads 1
     --steps 3 --grad-accum 2"
SPLIT="--offload host --offload-dir $d/off --host-mem 20M --fast-mem 48M"
split_used() { # FILE: every rank's state is split, some of it in host memory and some on disk
    local n
    n=$(grep -cE 'rank [0-9]+: [1-9][0-9.]* MiB of the state in page-locked host memory \(--host-mem 20.0 MiB less 16.0 MiB of bounce buffers\), [1-9][0-9.]* MiB on disk' "$1") || true
    [ "$n" = "$2" ] || { echo "$1: $n ranks split their state, want $2"; cat "$1"; exit 1; }
}
run mem $mid --device emu
run sp $mid --device emu $SPLIT
split_used "$d/sp.err" 1
same "1 process, --host-mem: host memory above a disk on emu" "$d/mem.jsonl" "$d/sp.jsonl" \
    "$d/mem.st" "$d/sp.st"
within sp
CFG=$mid OFF="$SPLIT $UNITS" mem_vs "pp 2 1f1b, --host-mem" 2 --pp 2 --schedule 1f1b
split_used "$d/host.err" 2
CFG=$mid OFF="$SPLIT $UNITS" mem_vs "tp 2, --host-mem" 2 --tp 2
split_used "$d/host.err" 2
CFG=$mid OFF=$SPLIT both "dp 2 zero 1, --host-mem" 2 --dp 2 --zero 1
split_used "$d/host.err" 2
# the planner measures both parts (the costs measured, as a user's run does) and plans with
# read rates between the disk's and host memory's, by the share host memory holds
env -u LOOM_OFFLOAD_COSTS $LOOM train $mid --steps 1 --device emu $SPLIT 2>"$d/plan.err" ||
    { cat "$d/plan.err"; exit 1; }
rd() { # the first read rate of the planner's line about $1
    grep -F "offload plan: $1" "$d/plan.err" | head -1 | grep -oE 'read [0-9.e+-]+ GB/s' |
        head -1 | cut -d' ' -f2
}
disk=$(rd "tier $d/off") hostr=$(rd "tier host memory") blend=$(rd "--host-mem holds")
pct=$(sed -nE 's/.*--host-mem holds ([0-9]+)% of the state.*/\1/p' "$d/plan.err")
awk -v d="$disk" -v h="$hostr" -v b="$blend" -v p="$pct" 'BEGIN {
    exit !(p >= 1 && p <= 99 && b > d && b < h) }' ||
    { echo "planned rates: disk '$disk', host '$hostr', blended '$blend' at '$pct'%"; cat "$d/plan.err"; exit 1; }
echo "planner: --host-mem holds $pct% of the state: read $disk (disk) < $blend < $hostr GB/s"
[ -z "$(ls -A "$d/off")" ] || { echo "scratch files left in --offload-dir"; exit 1; }

# a one-process checkpoint too ($d/full.st: its uninterrupted run, for the negative control)
resumes "1 process" 1

expect_fail "--fast-mem 4.0 MiB is too small" $LOOM train $small --device emu --offload host \
    --fast-mem 4M

# negative control: computing before the copy is waited for
LOOM_SWAP_NO_READ_WAIT=1 $LOOM train $small --device emu $HOST $UNITS --export "$d/neg.st" \
    2>/dev/null || true
if cmp -s "$d/neg.st" "$d/host.st" || cmp -s "$d/neg.st" "$d/full.st"; then
    echo "negative control: a unit computed before its copy was waited for trained the same bytes"
    exit 1
fi
echo "negative control: computing before the copy is waited for trains other bytes: seen"
echo "all ok"
