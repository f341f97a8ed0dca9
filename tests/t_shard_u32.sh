#!/usr/bin/env bash
# t_shard_u32.sh — llm.c's uint32 token shards (magic 20240801, version 7) train exactly like
# the same tokens in a uint16 shard: identical losses and exported weights, also when the two
# widths are mixed in one --data directory; a vocabulary past 65,536 ids trains from a uint32
# shard. Negative control: a shard with other tokens trains differently.
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkshard "$d/a16.bin" 64 4000 3
mkshard "$d/other.bin" 64 4000 4
widen() { # widen SRC DST [ADD]: the same tokens (+ADD) as a uint32 shard
    $PY - "$@" <<'PY'
import struct, sys
src, dst = sys.argv[1], sys.argv[2]
add = int(sys.argv[3]) if len(sys.argv) > 3 else 0
b = open(src, "rb").read()
n = struct.unpack("<3i", b[:12])[2]
toks = [t + add for t in struct.unpack(f"<{n}H", b[1024:1024 + 2 * n])]
with open(dst, "wb") as f:
    f.write(struct.pack("<256i", 20240801, 7, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}I", *toks))
PY
}
widen "$d/a16.bin" "$d/a32.bin"
F="--vocab 64 --layers 2 --heads 2 --dim 32 --block-size 32 --batch 2 --seq 16 --steps 6
   --lr 3e-3 --seed 5 --progress off --threads 1"
run() { # run NAME DATA [FLAGS]
    local name=$1 data=$2; shift 2
    $LOOM train --data "$data" $F "$@" --metrics "$d/$name.jsonl" --export "$d/$name.st" \
        2>"$d/$name.err" || { cat "$d/$name.err"; exit 1; }
}
same_run() { # same_run A B: identical losses and weights
    cmp -s <(sed 's/,"step_ms".*//' "$d/$1.jsonl") <(sed 's/,"step_ms".*//' "$d/$2.jsonl") &&
        cmp -s "$d/$1.st" "$d/$2.st"
}
run u16 "$d/a16.bin"
run u32 "$d/a32.bin"
same_run u16 u32 || { echo "FAILED: the uint32 shard trains differently"; exit 1; }
echo "ok: a uint32 shard trains bit for bit like the uint16 one"
mkdir "$d/mix16" "$d/mix32"
head -c $((1024 + 2 * 2000)) "$d/a16.bin" > "$d/mix16/s0.bin"
mkshard "$d/b16.bin" 64 2000 9
cp "$d/b16.bin" "$d/mix16/s1.bin"
$PY -c "
import struct,sys
b=open('$d/mix16/s0.bin','rb').read(); b=struct.pack('<3i',20240520,1,2000)+b[12:]
open('$d/mix16/s0.bin','wb').write(b)"
cp "$d/mix16/s0.bin" "$d/mix32/s0.bin"
widen "$d/b16.bin" "$d/mix32/s1.bin"
run m16 "$d/mix16"
run m32 "$d/mix32"
same_run m16 m32 || { echo "FAILED: mixed widths train differently"; exit 1; }
echo "ok: a directory mixing uint16 and uint32 shards reads as one stream"
run other "$d/other.bin"
if same_run u16 other; then echo "FAILED: negative control: other tokens train the same"; exit 1; fi
echo "negative control: a shard of other tokens trains differently: seen"
widen "$d/a16.bin" "$d/big.bin" 70000
$LOOM train --data "$d/big.bin" ${F/--vocab 64/--vocab 70100} --steps 2 > /dev/null 2>"$d/big.err" ||
    { cat "$d/big.err"; exit 1; }
expect_fail "out of range for vocab 64" $LOOM train --data "$d/big.bin" $F --steps 1
echo "ok: ids past 65,535 train from a uint32 shard (--vocab 70100)"
