#!/usr/bin/env bash
# run.sh — the whole test suite: every C unit-test binary (build/tests/test_*) and every
# integration script (tests/t_*.sh). Ends with "N passed, N failed, N skipped".
# Environment: LOOM_BUILD (build dir, default build), LOOM (CLI binary, default ./loom),
# LOOM_ASAN=1 skips the tests listed as too slow under sanitizers, TEST_JOBS (default 2, or 1 on
# a one-CPU machine): how many unit-test binaries, then integration scripts, run at once. A
# script whose header says `# serial: WHY` (it waits on timeouts, grace periods or a peer's
# silence, which a second test on the same CPUs could stretch) runs after the others, alone;
# one whose header says `# long` starts before the others.
set -u
cd "$(dirname "$0")/.."
BUILD=${LOOM_BUILD:-build}
export LOOM=${LOOM:-$PWD/loom}
[ "$BUILD" != build ] && [ -x "$BUILD/loom" ] && export LOOM=$PWD/$BUILD/loom
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
export PY=${PY:-/usr/bin/python3}
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} # (tests/lib.sh need_mpi says why)
passed=0 failed=0 skipped=0
failures=()
. scripts/jobs.sh
jobs_count "${TEST_JOBS:-}" TEST_JOBS run.sh || exit 2
log=$(mktemp -d)

# run_unit T NAME: runs one unit-test binary into $log/NAME.{out,err,rc}
run_unit() {
    "$1" >"$log/$2.out" 2>"$log/$2.err"
    echo $? >"$log/$2.rc"
}

# report_unit NAME: prints a finished unit-test binary's lines and counts them
report_unit() {
    local name=$1 rc p f s
    rc=$(cat "$log/$name.rc")
    echo "== $name"
    cat "$log/$name.out"
    p=$(grep -c '^ok - ' "$log/$name.out")
    f=$(grep -c '^FAIL - ' "$log/$name.out")
    s=$(grep -c '^skip - ' "$log/$name.out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "FAIL - $name exited with $rc"; fi
    [ "$f" -gt 0 ] && { sed 's/^/    /' "$log/$name.err" | tail -40; failures+=("$name"); }
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
}

# run_script T NAME: runs one integration script into $log/NAME.{out,rc,secs}
run_script() {
    local start rc
    start=$(date +%s)
    bash "$1" >"$log/$2.out" 2>&1
    rc=$?
    echo $(($(date +%s) - start)) >"$log/$2.secs"
    echo "$rc" >"$log/$2.rc"
}

# report_script NAME: prints a finished script's line and counts it
report_script() {
    local name=$1 rc secs
    rc=$(cat "$log/$name.rc") secs=$(cat "$log/$name.secs")
    if [ "$rc" -eq 0 ]; then
        echo "ok - $name (${secs}s)"; passed=$((passed + 1))
    elif [ "$rc" -eq 77 ]; then
        echo "skip - $name: $(tail -1 "$log/$name.out")"; skipped=$((skipped + 1))
    else
        echo "FAIL - $name (exit $rc, ${secs}s)"; sed 's/^/    /' "$log/$name.out" | tail -40
        failed=$((failed + 1)); failures+=("$name")
    fi
}

# the unit-test binaries, JOBS at a time, then the scripts
JOBS_REPORT=report_unit
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    jobs_run "$(basename "$t")" run_unit "$t" "$(basename "$t")"
done
jobs_wait
JOBS_REPORT=report_script

# scripts whose header says `# long` (the longest, a minute or more) start first, so the pool
# does not end on one of them with the other CPU idle
serial=() scripts=()
for t in tests/t_*.sh; do grep -q '^# long' "$t" && scripts+=("$t"); done
for t in tests/t_*.sh; do grep -q '^# long' "$t" || scripts+=("$t"); done
for t in "${scripts[@]}"; do
    [ -f "$t" ] || continue
    name=$(basename "$t" .sh)
    if [ -n "${LOOM_ASAN:-}" ] && grep -q '^# asan: skip' "$t"; then
        echo "skip - $name (too slow under sanitizers)"; skipped=$((skipped + 1)); continue
    fi
    if [ "$JOBS" -gt 1 ] && grep -q '^# serial:' "$t"; then serial+=("$t"); continue; fi
    jobs_run "$name" run_script "$t" "$name"
done
jobs_wait
for t in "${serial[@]}"; do
    name=$(basename "$t" .sh)
    run_script "$t" "$name"
    report_script "$name"
done

rm -rf "$log"
[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
