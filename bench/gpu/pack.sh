#!/usr/bin/env bash
# pack.sh — what bench/gpu/check.sh needs on a GPU machine that has the NVIDIA driver and the
# CUDA toolkit but none of this machine's Debian libraries, built here into one folder:
#   DIR/build/loom, DIR/build/tests/gpu/test_*   the CUDA build (make CUDA=1 CUDA_ARCHS=ARCH,
#                                                ARCH=-march=x86-64-v3: any AVX2 host CPU)
#   DIR/lib/                                     the shared libraries loom links, except glibc's,
#                                                the compiler runtime's and CUDA's (OpenBLAS,
#                                                oneDNN, BLIS, cJSON, ZeroMQ, Open MPI, cairo...)
#   DIR/fortunes/                                the bundled corpus, prepared (t_cuda_cli part 4)
#   DIR/train_gpt2cu                             llm.c's trainer, when LLMC_SRC names its source
#   DIR/env.sh                                   sourced there: LD_LIBRARY_PATH, LOOM_BUILD, LOOM,
#                                                FORTUNES (and LLMC)
# Usage here:   LLMC_SRC=path/to/llm.c bench/gpu/pack.sh DIR [ARCH (default 90)]
# There (in a copy of this repository with DIR inside it; `tar -cJf` shrinks the libraries from
# ~100 MB to ~20 MB for the trip):
#   . DIR/env.sh && RESULTS=out MODELS="124m 350m" bench/gpu/check.sh
set -eu
cd "$(dirname "$0")/../.."
[ $# -ge 1 ] || { echo "usage: $0 DIR [ARCH]" >&2; exit 2; }
DIR=$1 ARCH=${2:-90}
case $ARCH in *[!0-9]* | '') echo "$0: ARCH must be digits, e.g. 90" >&2; exit 2 ;; esac
mkdir -p "$DIR/build/tests/gpu" "$DIR/lib"
B=build-cuda-pack
make -s -j"$(nproc)" CUDA=1 CUDA_ARCHS="$ARCH" ARCH=-march=x86-64-v3 BUILD=$B LOOM_BIN=$B/loom \
    $B/loom gpu-tests
cp $B/loom "$DIR/build/loom"
for t in $B/tests/gpu/test_*; do
    case $t in *.d) ;; *) cp "$t" "$DIR/build/tests/gpu/" ;; esac
done
# every library ldd resolves outside the C library, the compiler's runtime and CUDA
ldd $B/loom | awk '/=> \//{print $1, $3}' | while read -r name path; do
    case $name in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | \
        libgcc_s.so.* | libstdc++.so.* | ld-linux*) ;;
    *) case $path in /usr/local/cuda*) ;; *) cp -L "$path" "$DIR/lib/$name" ;; esac ;;
    esac
done
if [ ! -f "$DIR/fortunes/meta.json" ]; then
    corpus=/usr/share/games/fortunes
    [ -d $corpus ] || { echo "$0: no $corpus (Debian's fortunes package)" >&2; exit 1; }
    # shellcheck disable=SC2046
    $B/loom prepare --tokenizer byte --out "$DIR/fortunes" --val-fraction 0.05 \
        $(find $corpus -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort) >/dev/null
fi
llmc=
if [ -n "${LLMC_SRC:-}" ]; then
    bin=$(bash bench/gpu/llmc_build.sh "$LLMC_SRC" "$ARCH" | tail -1)
    cp "$bin" "$DIR/train_gpt2cu"
    llmc='export LLMC=$d/train_gpt2cu'
fi
cat >"$DIR/env.sh" <<EOF
# sourced on the GPU machine (bench/gpu/pack.sh wrote it)
d=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH=\$d/lib:/usr/local/cuda/lib64\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export LOOM_BUILD=\$d/build LOOM=\$d/build/loom FORTUNES=\$d/fortunes
$llmc
EOF
du -sh "$DIR" | awk '{print "packed " $2 ": " $1}'
