#!/usr/bin/env bash
# t_bad_input.sh — every kind of bad input gets a clear message naming the file or field and
# an exit code in 1..125 (never a crash): shards, flags, config files, shapes, weights files.
set -u
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/ok.bin" 64 5000 1
mkshard "$d/trunc.bin" 64 5000 1 6000
mkshard "$d/big.bin" 300 5000 1
head -c 3000 /dev/urandom > "$d/foreign.bin"
head -c 500 "$d/ok.bin" > "$d/short.bin"
base="--layers 1 --heads 2 --dim 16 --vocab 64 --block-size 16 --batch 2 --seq 8 --steps 1 --progress off"
fails=0
t() { expect_fail "$@" || fails=$((fails + 1)); }
t "trunc.bin: header says 6000 tokens" $LOOM train $base --data "$d/trunc.bin"
t "foreign.bin: not an llm.c token shard" $LOOM train $base --data "$d/foreign.bin"
t "short.bin: truncated shard" $LOOM train $base --data "$d/short.bin"
t "missing.bin: no such file" $LOOM train $base --data "$d/missing.bin"
t "big.bin: token" $LOOM train $base --data "$d/big.bin"
t "--lr: 'abc' is not a finite number" $LOOM train $base --data "$d/ok.bin" --lr abc
t "--steps: -1 is out of range" $LOOM train $base --data "$d/ok.bin" --steps -1
t "unknown flag --bogus" $LOOM train $base --data "$d/ok.bin" --bogus 3
t "--batch needs a value" $LOOM train $base --data "$d/ok.bin" --batch
t "--shuffle: 'maybe' must be on or off" $LOOM train $base --data "$d/ok.bin" --shuffle maybe
t "--lr-schedule: 'linear' is not one of constant|cosine" $LOOM train $base --data "$d/ok.bin" --lr-schedule linear
t "not divisible by --heads" $LOOM train $base --data "$d/ok.bin" --dim 15
t "--seq 32 is longer than --block-size 16" $LOOM train $base --data "$d/ok.bin" --seq 32
t "--data is required" $LOOM train $base
t "--device-comm nccl: the backend has no collective library between devices" $LOOM train $base \
    --data "$d/ok.bin" --device-comm nccl
t "--device-comm: 'gloo' is not one of auto|nccl|host" $LOOM train $base --data "$d/ok.bin" \
    --device-comm gloo
printf '{"lr": 0.001,' > "$d/bad.json"
t "bad.json: not a JSON object" $LOOM train $base --data "$d/ok.bin" --config "$d/bad.json"
printf '{"lrr": 0.001}' > "$d/key.json"
t "key.json: unknown key 'lrr'" $LOOM train $base --data "$d/ok.bin" --config "$d/key.json"
printf '{"steps": "ten"}' > "$d/type.json"
t "type.json: key 'steps' must be a number" $LOOM train $base --data "$d/ok.bin" --config "$d/type.json"
printf '{"steps": 2.5}' > "$d/int.json"
t "int.json: key 'steps' must be an integer" $LOOM train $base --data "$d/ok.bin" --config "$d/int.json"
head -c 200 /dev/urandom > "$d/w.safetensors"
t "w.safetensors" $LOOM train $base --data "$d/ok.bin" --init "$d/w.safetensors"
printf '\x10\x00\x00\x00\x00\x00\x00\x00{"a":1' > "$d/t.safetensors"
t "t.safetensors" $LOOM train $base --data "$d/ok.bin" --init "$d/t.safetensors"
t "no such checkpoint" $LOOM sample --ckpt "$d/nothing"
t "unknown command" $LOOM frobnicate
t "--comm-thread: 'sometimes' must be on or off" $LOOM train $base --data "$d/ok.bin" --comm-thread sometimes
t "--gap-mode: 'fancy' is not one of constant|adaptive" $LOOM train $base --data "$d/ok.bin" --co2 --gap-mode fancy
t "--dp 1 x --pp 2 x --tp 1 x --cp 1 = 2 ranks, but the job has 1" $LOOM train $base --data "$d/ok.bin" --pp 2
if command -v mpirun >/dev/null; then  # checks that need the ranks
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    t "--pp 3 needs at least 3 transformer layers" $MPI -np 3 $LOOM train $base --data "$d/ok.bin" --pp 3
    t "--stage-layers '1,x'" $MPI -np 2 $LOOM train $base --layers 2 --data "$d/ok.bin" --pp 2 --stage-layers 1,x
fi
t "missing.json: cannot open" $LOOM plan --profile "$d/missing.json"
# found by make fuzz / hardening: huge config integers, directories and FIFOs given as files
t "huge_int.json: key 'steps' must be an integer" $LOOM train $base --data "$d/ok.bin" --config "$(dirname "$0")/data/fuzz_regress/config/huge_int.json"
t "not a regular file (a directory)" $LOOM train $base --data "$d/ok.bin" --config "$d"
mkfifo "$d/fifo"
t "fifo: not a regular file (a FIFO)" timeout 20 $LOOM train $base --data "$d/ok.bin" --config "$d/fifo"
t "fifo: not a regular file" timeout 20 $LOOM train $base --data "$d/fifo"
t "--workers: 0 is out of range" $LOOM plan --workers 0
# a good config file works and flags override it
printf '{"layers": 1, "heads": 2, "dim": 16, "vocab": 64, "block_size": 16, "batch": 2, "seq": 8, "steps": 2, "lr-schedule": "constant"}' > "$d/good.json"
$LOOM train --config "$d/good.json" --data "$d/ok.bin" --steps 1 --progress off --metrics "$d/m.jsonl" || fails=$((fails + 1))
[ "$(wc -l < "$d/m.jsonl")" -eq 1 ] || { echo "FAILED: --steps did not override the config"; fails=$((fails + 1)); }
echo "$fails failures"
[ "$fails" -eq 0 ]
