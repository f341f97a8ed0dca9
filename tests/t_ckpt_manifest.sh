#!/usr/bin/env bash
# t_ckpt_manifest.sh — a damaged or hostile checkpoint manifest (checkpoint.json) is refused
# with an error naming the file and the field, exit 1..125, never a crash: shard entries that
# are not objects or lack lo/hi, out-of-range / fractional / huge numbers, file names leaving
# the directory, shards with a gap or an overlap, bad step/opt_t/data_window/RNG state, model
# shapes whose parameter count overflows, shard files of the wrong size, a data order other than
# "sequences". A replica listing the same range twice is accepted, and so is a manifest without
# "data_order" (written before it).
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/train.bin" 64 20000 1
flags="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 4
       --seq 16 --steps 2 --seed 3 --progress off"
$LOOM train $flags --save "$d/ck" --export "$d/a.safetensors" 2>/dev/null
good="$d/ck/step_00000002"
# each case: NAME, a Python statement on the manifest j, the expected message
cases='
notobj|j["shards"].insert(0, 7)|'"'"'shards[0]'"'"' is not an object
nolo|del j["shards"][0]["lo"]|'"'"'shards[0].lo'"'"' is missing
nohi|del j["shards"][0]["hi"]|'"'"'shards[0].hi'"'"' is missing
hugehi|j["shards"][0]["hi"] = 1e300|'"'"'shards[0].hi'"'"' must be an integer
bighi|j["shards"][0]["hi"] = 4611686018427387904|'"'"'shards[0].hi'"'"' must be an integer
neglo|j["shards"][0]["lo"] = -1|'"'"'shards[0].lo'"'"' must be an integer
fraclo|j["shards"][0]["lo"] = 0.5|'"'"'shards[0].lo'"'"' must be an integer
strhi|j["shards"][0]["hi"] = "28544"|'"'"'shards[0].hi'"'"' is not a number
arrays|j["shards"][0]["arrays"] = 5|'"'"'shards[0].arrays'"'"' must be an integer in [3, 4]
dotdot|j["shards"][0]["file"] = "../ck/step_00000002/shard_00000.bin"|'"'"'shards[0].file'"'"' must name a file inside
slash|j["shards"][0]["file"] = "/etc/passwd"|'"'"'shards[0].file'"'"' must name a file inside
crc|j["shards"][0]["crc32"] = "xyz"|'"'"'shards[0].crc32'"'"' must be 8 hex digits
empty|j["shards"] = []|'"'"'shards'"'"' lists 0 files
nolist|j["shards"] = {"a": 1}|'"'"'shards'"'"' is missing or not a list
gap|j["shards"][0]["hi"] = 28000|'"'"'shards'"'"' cover 28000 of 28544 parameters
overlap|j["shards"].append(dict(j["shards"][0], hi=100))|'"'"'shards'"'"' overlap
negstep|j["step"] = -1|'"'"'step'"'"' must be an integer
hugestep|j["step"] = 1e300|'"'"'step'"'"' must be an integer
opt_t|j["opt_t"] = 3|'"'"'opt_t'"'"' must be an integer in [0, 2]
dwneg|j["data_window"] = "-1"|'"'"'data_window'"'"' must be a decimal unsigned 64-bit integer
dwbig|j["data_window"] = "18446744073709551616"|'"'"'data_window'"'"' must be a decimal
dwstep|j["data_window"] = "1"|'"'"'data_window'"'"' 1 is out of range for step 2
rnginc|j["rng_inc"] = "14"|'"'"'rng_inc'"'"' must be odd
rngnum|j["rng_state"] = 5|'"'"'rng_state'"'"' is missing or not a string
layers|j["model"]["layers"] = 1e9|'"'"'model.layers'"'"' must be an integer
overflow|j["model"].update(layers=1048576, dim=16777216, block_size=16777216, heads=1)|bad '"'"'model'"'"' shape: --layers must be in [1, 65536] (got 1048576)
heads|j["model"]["heads"] = 3|bad '"'"'model'"'"' shape
co2|j["co2"] = 5|'"'"'co2'"'"' is not an object
co2sh|j["co2"] = {"workers": 1, "tau": 1, "sharded": 2}|'"'"'co2.sharded'"'"' must be an integer in [0, 1]
tok|j["tokenizer"] = "x" * 40|'"'"'tokenizer'"'"' must be a string
order|j["data_order"] = "windows"|'"'"'data_order'"'"' must be "sequences"
ordernum|j["data_order"] = 1|'"'"'data_order'"'"' must be "sequences"
args|j["train_args"] = 3|'"'"'train_args'"'"' is not an object
notobjroot|j = [j]|corrupted manifest (not a JSON object)
format|j["format"] = "loom-checkpoint-1"|not a loom checkpoint manifest
'
fails=0
while IFS='|' read -r name stmt pattern; do
    [ -n "$name" ] || continue
    cp -r "$good" "$d/$name"
    $PY - "$d/$name/checkpoint.json" "$stmt" <<'PY'
import json, sys
p = sys.argv[1]
j = json.load(open(p))
exec(sys.argv[2])
json.dump(j, open(p, "w"))
PY
    expect_fail "$d/$name/checkpoint.json: $pattern" $LOOM export "$d/$name" -o "$d/x.safetensors" ||
        fails=$((fails + 1))
done <<<"$cases"
# the first defect: a non-object shard entry crashed `train --resume` (SIGSEGV)
expect_fail "'shards[0]' is not an object" $LOOM train $flags --steps 4 --resume "$d/notobj" ||
    fails=$((fails + 1))
# a shard file of the wrong size is refused before anything is read
cp -r "$good" "$d/short"
truncate -s 1000 "$d/short/shard_00000.bin"
expect_fail "shard_00000.bin: 1000 bytes, expected 342528" $LOOM export "$d/short" -o "$d/x.safetensors" ||
    fails=$((fails + 1))
# a replica of the same range (the same file listed twice) is accepted
cp -r "$good" "$d/dup"
$PY - "$d/dup/checkpoint.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); j["shards"].append(dict(j["shards"][0])); json.dump(j, open(sys.argv[1], "w"))
PY
$LOOM export "$d/dup" -o "$d/dup.safetensors" 2>/dev/null
cmp "$d/a.safetensors" "$d/dup.safetensors"
# a manifest written before "data_order" existed still loads
grep -q '"data_order":[[:space:]]*"sequences"' "$good/checkpoint.json"
cp -r "$good" "$d/old"
$PY - "$d/old/checkpoint.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); del j["data_order"]; json.dump(j, open(sys.argv[1], "w"))
PY
$LOOM export "$d/old" -o "$d/old.safetensors" 2>/dev/null
cmp "$d/a.safetensors" "$d/old.safetensors"
[ "$fails" -eq 0 ] || { echo "$fails case(s) failed"; exit 1; }
echo "manifest validation: every damaged manifest refused with a message naming the field"
