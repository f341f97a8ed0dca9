#!/usr/bin/env bash
# t_nonfinite.sh — a NaN in the loss is detected and never applied: by default training stops
# with exit 4 and a message naming the step; with --on-nonfinite skip the update is skipped and
# the weights stay exactly as they were.
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 5000 1
base="--data $d/train.bin --batch 2 --seq 8 --progress off"
$LOOM train $base --layers 1 --heads 2 --dim 16 --vocab 64 --block-size 16 --steps 0 --export "$d/w.safetensors"
$PY - "$d/w.safetensors" <<'PY'
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read()); n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n]); off = 8 + n + h["h.0.mlp.c_fc.weight"]["data_offsets"][0]
raw[off:off + 4] = struct.pack("<f", float("nan"))
open(sys.argv[1], "wb").write(raw)
PY
set +e
$LOOM train $base --init "$d/w.safetensors" --steps 3 2> "$d/err"; rc=$?
set -e
cat "$d/err"
[ "$rc" -eq 4 ] || { echo "expected exit 4, got $rc"; exit 1; }
grep -q "step 1: the loss is NaN" "$d/err"
$LOOM train $base --init "$d/w.safetensors" --steps 3 --on-nonfinite skip --export "$d/after.safetensors" 2> "$d/err2"
grep -q "3 steps skipped" "$d/err2"
cmp "$d/w.safetensors" "$d/after.safetensors"
echo "NaN detected; skipped updates leave the weights untouched"
