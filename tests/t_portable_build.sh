#!/usr/bin/env bash
# long: started first (tests/run.sh)
# asan: skip (a second full build; nothing here is about memory errors)
# t_portable_build.sh — the portable build for mixed clusters: `make ARCH=-march=x86-64` into a
# separate build directory gives a loom that runs, holds no AVX instructions (no ymm/zmm
# registers: it cannot die with SIGILL on an older node), says so in `loom --version`, and trains
# a step (the peak probe's SSE path); objects built with one ARCH are not reused for another
# (build/cflags.stamp), and a second make with the same flags does nothing (the generated
# build_info.h of `loom --version` is rewritten only when the commit or flags change).
# Takes one full build (~25-30 s on 2 busy cores).
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
unset MAKEFLAGS MFLAGS MAKELEVEL # not the suite's own make's jobserver
mk() { make --no-print-directory BUILD="$d/b" LOOM_BIN="$d/b/loom" "$@"; }
start=$(date +%s)
mk -s -j2 ARCH=-march=x86-64 "$d/b/loom" > "$d/build.log" 2>&1 || { tail -30 "$d/build.log"; exit 1; }
echo "generic build: $(($(date +%s) - start)) s"
"$d/b/loom" --help | grep -q "usage: loom"
"$d/b/loom" --version | grep -q -- "^flags: .*-march=x86-64\( \|$\)" ||
    { "$d/b/loom" --version; echo "loom --version does not name -march=x86-64"; exit 1; }
if command -v objdump >/dev/null; then
    n=$(objdump -d "$d/b/loom" | grep -c -E '%[yz]mm' || true)
    [ "$n" -eq 0 ] || { echo "ARCH=-march=x86-64 binary uses $n AVX instructions"; exit 1; }
fi
mkshard "$d/train.bin" 64 5000 1
"$d/b/loom" train --data "$d/train.bin" --batch 2 --seq 8 --layers 1 --heads 2 --dim 16 \
    --vocab 64 --block-size 16 --steps 1 --progress off 2> "$d/err"
grep -q "loom: peak fp32 .* GFLOP/s measured" "$d/err" || { cat "$d/err"; exit 1; }
# the same flags: up to date; another ARCH: everything is rebuilt (make -q exits 1)
mk -q ARCH=-march=x86-64 "$d/b/loom" || { echo "same ARCH not up to date"; exit 1; }
if mk -q ARCH=-march=x86-64-v3 "$d/b/loom"; then
    echo "objects built with -march=x86-64 would be reused for -march=x86-64-v3"; exit 1
fi
echo "portable build ok"
