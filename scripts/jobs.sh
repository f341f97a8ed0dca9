# jobs.sh — a pool of background jobs, sourced by tests/run.sh and fuzz/run.sh (bash >= 5.1).
#   jobs_count VALUE VAR WHO  sets JOBS to VALUE, or to 2 (1 on a one-CPU machine) when it is
#                             empty; returns 1, naming VAR, when it is not a positive integer
#   jobs_run NAME CMD...      runs CMD in the background once fewer than JOBS are running
#   jobs_wait                 waits for the rest
# Each job that finishes is handed to the caller's function named by JOBS_REPORT (default
# `report`) as `FUNCTION NAME`, in the caller's shell.
declare -A JOBS_RUNNING=() # pid -> name

jobs_count() {
    JOBS=$1
    # (nproc answers OMP_NUM_THREADS when it is set, as fuzz/run.sh sets it: not the CPUs)
    local cpus
    cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1)
    [ -n "$JOBS" ] || { [ "$cpus" -ge 2 ] && JOBS=2 || JOBS=1; }
    case "$JOBS" in *[!0-9]* | 0) echo "$3: $2 must be a positive integer" >&2; return 1 ;; esac
}

jobs_reap() {
    local pid
    wait -n -p pid
    "${JOBS_REPORT:-report}" "${JOBS_RUNNING[$pid]}"
    unset "JOBS_RUNNING[$pid]"
}

jobs_run() {
    local name=$1
    shift
    while [ "${#JOBS_RUNNING[@]}" -ge "$JOBS" ]; do jobs_reap; done
    "$@" &
    JOBS_RUNNING[$!]=$name
}

jobs_wait() { while [ "${#JOBS_RUNNING[@]}" -gt 0 ]; do jobs_reap; done; }
