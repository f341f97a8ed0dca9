#!/usr/bin/env bash
# run.sh — the GPU suite (`make test-gpu`): every tests/gpu test_* binary of LOOM_BUILD
# (default build-cuda) and every tests/gpu/t_*.sh, with the CUDA build's loom as $LOOM. Each
# one compares the CUDA backend with the CPU backend (or with PyTorch / transformers). Prints
# every test's own lines (measured errors included), then "N passed, N failed, N skipped".
# Without a usable GPU every test reports "skip" and the suite says it skipped.
set -u
cd "$(dirname "$0")/../.."
BUILD=${LOOM_BUILD:-build-cuda}
export LOOM=${LOOM:-$PWD/$BUILD/loom}
export PY=${PY:-python3}
passed=0 failed=0 skipped=0
failures=()
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

for t in "$BUILD"/tests/gpu/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    echo "== $name"
    start=$(date +%s)
    "$t" >"$log/$name.out" 2>"$log/$name.err"
    rc=$?
    sed 's/^/    /' "$log/$name.err"
    cat "$log/$name.out"
    p=$(grep -c '^ok - ' "$log/$name.out")
    f=$(grep -c '^FAIL - ' "$log/$name.out")
    s=$(grep -c '^skip - ' "$log/$name.out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL - $name exited with $rc"; fi
    [ "$f" -gt 0 ] && failures+=("$name")
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    echo "   ($(( $(date +%s) - start )) s)"
done

for t in tests/gpu/t_*.sh; do
    [ -f "$t" ] || continue
    name=$(basename "$t" .sh)
    echo "== $name"
    start=$(date +%s)
    bash "$t" >"$log/$name.out" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    sed 's/^/    /' "$log/$name.out"
    if [ "$rc" -eq 0 ]; then
        echo "ok - $name (${secs}s)"; passed=$((passed + 1))
    elif [ "$rc" -eq 77 ]; then
        echo "skip - $name: $(tail -1 "$log/$name.out")"; skipped=$((skipped + 1))
    else
        echo "FAIL - $name (exit $rc, ${secs}s)"; failed=$((failed + 1)); failures+=("$name")
    fi
done

[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
if [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ]; then
    echo "test-gpu: SKIPPED: no usable GPU here ($skipped skipped); nothing was tested"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
