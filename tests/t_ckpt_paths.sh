#!/usr/bin/env bash
# t_ckpt_paths.sh — paths a checkpoint directory must not escape or mangle: a `latest` file
# naming anything but a step_<N> directory inside DIR (.., a slash, an absolute path) is
# refused; a symbolic link inside the tokenizer directory copied into checkpoints is refused
# (named), not followed; a path too long for loom's buffers fails clearly instead of being
# silently truncated.
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
mkdir "$d/data"
mkshard "$d/data/train.bin" 64 20000 1
flags="--data $d/data/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32
       --batch 4 --seq 16 --steps 2 --seed 4 --progress off"
$LOOM train $flags --save "$d/ck" 2>/dev/null
fails=0
# `latest` escaping DIR: outside/ is a valid checkpoint, outside/ck2/latest points at it
cp -r "$d/ck/step_00000002" "$d/outside"
mkdir "$d/outside/ck2"
for bad in '..' 'step_00000002/..' "$d/outside" 'step_00000002.old' 'step_' 'step_12/../../x'; do
    printf '%s\n' "$bad" > "$d/outside/ck2/latest"
    expect_fail "malformed 'latest' file" $LOOM export "$d/outside/ck2" -o "$d/x.safetensors" ||
        fails=$((fails + 1))
done
# a symbolic link in the tokenizer directory next to the data
mkdir "$d/data/tokenizer"
echo 'vocab' > "$d/data/tokenizer/vocab.txt"
$LOOM train $flags --save "$d/ck3" 2>/dev/null
cmp "$d/data/tokenizer/vocab.txt" "$d/ck3/step_00000002/tokenizer/vocab.txt"
echo secret > "$d/secret.txt"
ln -s "$d/secret.txt" "$d/data/tokenizer/secret"
expect_fail "tokenizer/secret: a symbolic link" $LOOM train $flags --save "$d/ck4" ||
    fails=$((fails + 1))
if [ -e "$d/ck4/step_00000002/tokenizer/secret" ]; then
    echo "FAILED: the link was followed"; fails=$((fails + 1))
fi
rm "$d/data/tokenizer/secret"
ln -s . "$d/data/tokenizer/loop"
expect_fail "tokenizer/loop: a symbolic link" $LOOM train $flags --save "$d/ck5" ||
    fails=$((fails + 1))
rm "$d/data/tokenizer/loop"
# a path longer than loom's path buffers
long=$d/$(printf 'a%.0s' {1..250})
for _ in $(seq 16); do long=$long/$(printf 'b%.0s' {1..250}); done
expect_fail "path too long" $LOOM train $flags --resume "$long" || fails=$((fails + 1))
[ "$fails" -eq 0 ] || { echo "$fails case(s) failed"; exit 1; }
echo "latest confined to DIR, links refused, long paths refused"
