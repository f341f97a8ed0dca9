#!/usr/bin/env bash
# run.sh — runs every fuzz target that `make fuzz-build` built, FUZZ_SECONDS each, seeded from
# fuzz/corpus/<name>/ (read only: new inputs go to $FUZZ_BUILD/fuzz/<name>/corpus/, crash and
# timeout artifacts to $FUZZ_BUILD/fuzz/<name>/). Fails when any target finds a crash, a
# sanitizer report, a leak, an input that runs over 10 s, or RSS over FUZZ_RSS_MB.
# FUZZ_TARGETS="safetensors shard" runs only those. FUZZ_SKIP lists targets to leave out.
# FUZZ_JOBS (default 2, or 1 on a one-CPU machine) targets run at once, each on one thread.
set -u
cd "$(dirname "$0")/.."
B=${FUZZ_BUILD:-build-fuzz}
secs=${FUZZ_SECONDS:-60}
rss=${FUZZ_RSS_MB:-2048}
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# fontconfig (under cairo) keeps process-wide caches until exit: fuzz/lsan.supp
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$(cd "$(dirname "$0")" && pwd)/lsan.supp}
export OMP_NUM_THREADS=1
skip=" ${FUZZ_SKIP-} "
all=$(for f in fuzz/fuzz_*.c; do n=$(basename "$f" .c); n=${n#fuzz_}; [[ $skip == *" $n "* ]] || echo "$n"; done)
names=${FUZZ_TARGETS:-$all}
. scripts/jobs.sh
jobs_count "${FUZZ_JOBS:-}" FUZZ_JOBS fuzz/run.sh || exit 2
failed=()

# fuzz_one NAME: runs one target into $B/fuzz/NAME/{log,rc,secs}
fuzz_one() {
    local n=$1 out=$B/fuzz/$1 start dict=()
    [ -f "fuzz/$n.dict" ] && dict=(-dict="fuzz/$n.dict")
    start=$(date +%s)
    "$B/fuzz/fuzz_$n" -max_total_time="$secs" -timeout=10 -rss_limit_mb="$rss" -artifact_prefix="$out/" \
        -print_final_stats=1 "${dict[@]}" "$out/corpus" "fuzz/corpus/$n" >"$out/log" 2>&1
    echo $? >"$out/rc"
    echo $(($(date +%s) - start)) >"$out/secs"
}

# report NAME: a finished target's line
report() {
    local n=$1 out=$B/fuzz/$1 rc t execs cov
    rc=$(cat "$out/rc") t=$(cat "$out/secs")
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/log" | grep -o '[0-9]*$')
    cov=$(grep -o 'cov: [0-9]*' "$out/log" | tail -1)
    if [ "$rc" -eq 0 ]; then
        echo "ok - fuzz_$n (${t}s, ${execs:-?} runs, ${cov:-cov: ?})"
    else
        echo "FAIL - fuzz_$n (exit $rc, ${t}s); log: $out/log"
        grep -E 'ERROR|SUMMARY|runtime error|Test unit written|exited|loom:' "$out/log" | head -20 | sed 's/^/    /'
        failed+=("$n")
    fi
}

for n in $names; do
    bin=$B/fuzz/fuzz_$n
    [ -x "$bin" ] || { echo "FAIL - fuzz_$n: $bin not built (make fuzz-build)"; failed+=("$n"); continue; }
    mkdir -p "$B/fuzz/$n/corpus" "fuzz/corpus/$n"
    jobs_run "$n" fuzz_one "$n"
done
jobs_wait
[ ${#failed[@]} -gt 0 ] && { echo "fuzz failures: ${failed[*]}"; exit 1; }
echo "all fuzz targets clean"
