#!/usr/bin/env bash
# t_version.sh — `loom --version` and `loom version` exit 0 and print every field: the version
# (the VERSION file), the git commit the binary was built from (a commit of this repository, or
# "unknown" outside a checkout), the compiler, the build flags, the backends, and the version of
# each library (OpenBLAS; the matrix engine in use with BLIS's and oneDNN's versions; MPI, ZeroMQ,
# cJSON, zlib, cairo). A flag it does not take is an error.
set -u
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)
fails=0
bad() { echo "FAILED: $*"; fails=$((fails + 1)); }
out=$($LOOM --version) || bad "loom --version exited $?"
echo "$out"
out2=$($LOOM version) || bad "loom version exited $?"
[ "$out" = "$out2" ] || bad "loom version and loom --version differ"
val() { sed -n "s/^$1: *//p" <<<"$out"; } # the value of one "key: value" line
want=$(tr -d ' \t\r\n' < "$root/VERSION")
[ "$(head -1 <<<"$out")" = "loom $want" ] || bad "first line is not 'loom $want'"
[[ $want =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || bad "VERSION '$want' is not MAJOR.MINOR.PATCH"
for k in commit compiler flags isa backends openblas matmul mpi zeromq cjson zlib cairo; do
    v=$(val "$k")
    { [ -n "$v" ] && [ "$v" != unknown ]; } || [ "$k" = commit ] || bad "no value for '$k:'"
done
c=$(val commit)
if [ "$c" != unknown ]; then
    h=${c%-dirty}; [[ $h == *-g* ]] && h=${h##*-g} # `git describe` gives TAG-N-gHASH past a tag
    [[ $h =~ ^[0-9a-f]{7,40}$ ]] || bad "commit '$c' is not a commit id"
    if git -C "$root" rev-parse --git-dir >/dev/null 2>&1 && [[ $h =~ ^[0-9a-f]+$ ]]; then
        git -C "$root" cat-file -e "$h^{commit}" 2>/dev/null || bad "commit '$h' is not in this repository"
    fi
fi
[[ $(val flags) == *-O* ]] || bad "flags lack the optimisation level: $(val flags)"
[[ " $(val backends) " == *" cpu "* ]] || bad "backends lack cpu: $(val backends)"
[[ $(val openblas) == *OpenBLAS* ]] || bad "openblas: $(val openblas)"
for k in zeromq cjson zlib cairo; do
    [[ $(val $k) =~ ^[0-9]+\.[0-9]+ ]] || bad "$k version '$(val $k)' is not a version number"
done
$LOOM version --help | grep -q "usage: loom version" || bad "loom version --help"
expect_fail "unknown flag --bogus" $LOOM version --bogus || fails=$((fails + 1))
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "version ok"
