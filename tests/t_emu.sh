#!/usr/bin/env bash
# t_emu.sh — `--device emu` (src/backend/emu.c: the CPU's kernels on buffers the host cannot
# dereference; a host access to one crashes the run) trains exactly what `--device cpu` trains,
# so everything a one-process run does goes through the backend's ops:
#   * a tiny GPT for 6 steps with validation and a save every 3: the same losses, gradient norms
#     and validation losses step for step, the same exported bytes, and the run reports its
#     device memory (mem_peak);
#   * resuming: emu from its step-3 checkpoint, cpu from emu's and emu from cpu's, and
#     `loom export` of emu's checkpoint: all the uninterrupted run's bytes;
#   * gradient accumulation with --recompute and --recompute-gelu, and a LLaMA (grouped-query
#     attention, RoPE, SwiGLU) with tied embeddings: the same losses and exported bytes;
#   * --dtype bf16 with emu is an error naming the device; an unknown device lists emu.
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 20000 1
mkshard "$d/val.bin" 64 4000 2
flags="--data $d/train.bin --val-data $d/val.bin --val-every 3 --val-windows 2 --layers 2
       --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 4 --seq 16 --lr 3e-3
       --lr-schedule constant --seed 5 --progress off --steps 6"

for dev in cpu emu; do
    $LOOM train $flags --device $dev --metrics "$d/$dev.jsonl" --save "$d/ck_$dev" \
        --save-every 3 --keep 0 --export "$d/$dev.st" 2>"$d/$dev.err" || { cat "$d/$dev.err"; exit 1; }
done
same "gpt2, 6 steps" "$d/emu.jsonl" "$d/cpu.jsonl" "$d/emu.st" "$d/cpu.st"
grep -q "peak device memory" "$d/emu.err" || { echo "FAILED: emu reported no device memory"; exit 1; }
metric_cols "$d/emu.jsonl" device_mem_mib | awk '$2 <= 0 { bad = 1 } END { exit bad }' ||
    { echo "FAILED: emu's metrics lack device_mem_mib"; exit 1; }

# resumed at step 3: on emu, across devices both ways; loom export of emu's final checkpoint
for c in emu:ck_emu cpu:ck_emu emu:ck_cpu; do
    dev=${c%%:*} ck=${c#*:}
    $LOOM train $flags --device "$dev" --resume "$d/$ck/step_00000003" --export "$d/res.st" \
        2>"$d/res.err" || { cat "$d/res.err"; exit 1; }
    same_st "--device $dev resumed from $ck at step 3" "$d/cpu.st" "$d/res.st"
done
$LOOM export "$d/ck_emu" -o "$d/exp.st" 2>/dev/null
same_st "loom export of emu's checkpoint" "$d/cpu.st" "$d/exp.st"

# gradient accumulation with recomputation; a LLaMA with grouped-query attention, tied
for v in "accum:--grad-accum 2 --recompute --recompute-gelu" \
    "llama:--arch llama --heads 4 --kv-heads 2 --tie-embeddings on"; do
    name=${v%%:*} extra=${v#*:}
    for dev in cpu emu; do
        $LOOM train $flags $extra --steps 3 --device $dev --metrics "$d/${name}_$dev.jsonl" \
            --export "$d/${name}_$dev.safetensors" 2>"$d/$dev.err" || { cat "$d/$dev.err"; exit 1; }
    done
    same "$name" "$d/${name}_emu.jsonl" "$d/${name}_cpu.jsonl" "$d/${name}_emu.safetensors" \
        "$d/${name}_cpu.safetensors"
done

expect_fail "--dtype bf16: the emu backend computes in fp32 only" \
    $LOOM train $flags --device emu --dtype bf16
expect_fail "unknown device (cpu, emu" $LOOM train $flags --device nosuch
