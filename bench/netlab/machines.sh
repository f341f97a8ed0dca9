#!/bin/sh
# bench/netlab/machines.sh — N equal "machines" on this host, so that a benchmark of N peers, N
# pipeline stages or N data-parallel ranks measures the design rather than N processes fighting
# over the same cores. Each machine is a cgroup v1 CPU group with a fixed CFS quota (CORES/N
# cores each) and cpu.shares 65536 (other jobs on the host yield first), plus a cpuacct group of
# the same name that counts the CPU time the machine actually used. Root only.
#
#   machines.sh up N [CORES]   groups ${NETLAB_NS:-mpi}m0 .. m(N-1) (CORES: default nproc)
#   machines.sh show           per machine: quota, CPU seconds used, throttled periods
#   machines.sh down           moves any process left back to the root groups, removes the groups
#
# bench/netlab/as-machine runs a command inside one of them (a rank under mpirun: its rank's).
set -eu
CPU=/sys/fs/cgroup/cpu
ACCT=/sys/fs/cgroup/cpuacct
NS=${NETLAB_NS:-mpi}
die() { echo "machines.sh: $*" >&2; exit 2; }
[ -w "$CPU/cgroup.procs" ] || die "needs root and cgroup v1's cpu controller at $CPU"

groups() { for d in "$CPU/${NS}m"[0-9]* "$ACCT/${NS}m"[0-9]*; do [ -d "$d" ] && echo "$d"; done; }

case "${1:-}" in
up)
    n=${2:-}; cores=${3:-$(nproc)}
    case "$n" in '' | *[!0-9]*) die "up N [CORES]: N must be a number" ;; esac
    [ "$n" -ge 1 ] || die "up N: N must be at least 1"
    "$0" down
    period=$(cat "$CPU/cpu.cfs_period_us")
    # the quota per machine in microseconds per period: CORES / N cores (CORES may be fractional)
    quota=$(awk -v c="$cores" -v n="$n" -v p="$period" 'BEGIN { printf "%d", c * p / n }')
    [ "$quota" -ge 1000 ] || die "CORES/N leaves a machine less than 1 ms per ${period} us period"
    k=0
    while [ "$k" -lt "$n" ]; do
        mkdir -p "$CPU/${NS}m$k" "$ACCT/${NS}m$k"
        echo "$period" >"$CPU/${NS}m$k/cpu.cfs_period_us"
        echo "$quota" >"$CPU/${NS}m$k/cpu.cfs_quota_us"
        echo 65536 >"$CPU/${NS}m$k/cpu.shares"
        k=$((k + 1))
    done
    echo "machines: $n x $(awk -v q="$quota" -v p="$period" 'BEGIN { printf "%.3g", q / p }') cores (cgroups $CPU/${NS}m0..$((n - 1)))"
    ;;
show)
    for d in "$CPU/${NS}m"[0-9]*; do
        [ -d "$d" ] || continue
        m=${d##*/}
        q=$(cat "$d/cpu.cfs_quota_us"); p=$(cat "$d/cpu.cfs_period_us")
        used=$(cat "$ACCT/$m/cpuacct.usage" 2>/dev/null || echo 0)
        thr=$(awk '$1 == "nr_throttled" { print $2 }' "$d/cpu.stat")
        awk -v m="$m" -v q="$q" -v p="$p" -v u="$used" -v t="$thr" \
            'BEGIN { printf "%s quota %.3g cores, used %.2f cpu-s, throttled %d periods\n", m, q / p, u / 1e9, t }'
    done
    ;;
down)
    for d in $(groups); do
        root=${d%/*}
        while read -r pid; do echo "$pid" >"$root/cgroup.procs" 2>/dev/null || true; done <"$d/cgroup.procs"
        rmdir "$d" 2>/dev/null || die "could not remove $d (a process still in it?)"
    done
    ;;
*) die "usage: machines.sh up N [CORES] | show | down" ;;
esac
