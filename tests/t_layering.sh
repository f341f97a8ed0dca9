#!/usr/bin/env bash
# shellcheck disable=SC2053,SC2015,SC2086  # unquoted [[ == ]] right sides are glob patterns on purpose
# t_layering.sh — owns the source tree's layering: which directory of src/ may #include which,
# who may talk MPI or OpenMP, where the CPU backend is chosen, and how long a file may grow.
# It reads only the sources (no build): every quoted #include is resolved against the including
# file's directory to a path under the source root, plus a few greps.
# Usage: tests/t_layering.sh [SRC_ROOT]   (default src; run from the repository root; with no
#        argument, as the suite runs it, the selftest below runs too)
#        tests/t_layering.sh --selftest [SRC_ROOT]   plant one violation of each rule in a copy
#        of SRC_ROOT and check each is reported (the negative control: the test can fail).
# Prints "FILE:LINE: RULE: TEXT [detail]" per violation, then a count; exit 0 clean, 1 not.
set -u -f   # no pathname expansion: the globs below are patterns for [[ == ]], matched on purpose
shopt -s extglob

# ---- rules ---------------------------------------------------------------------------------
# name            reason
RULES=(
  "layering       a file includes only its own or lower layers, so each layer builds and tests without the ones above"
  "mpi            only parallel/comm.c, comm_jobs.c and comm_mpi.h include mpi.h, so everything else builds and tests without MPI"
  "omp            element-wise loops over backend buffers (OpenMP, BLAS) belong to the backend"
  "backend-select the CPU backend is chosen in one place, so adding a backend touches one file"
  "file-size      a file over MAX_LINES lines is split (allowlisted generated tables excepted)"
)
# layering: rank per top-level directory; a file may include its own directory or a lower rank.
declare -A RANK=([backend]=0 [model]=1 [optim]=2 [parallel]=2 [data]=2 [io]=2 [plan]=3
                 [offload]=3 [swarm]=2 [strategy]=4 [train]=5 [cli]=6)
ROOT_OK="common.h common.c rng.h rng.c stop.h stop.c testhooks.h testhooks.c" # top level: usable by everyone
SIBLING="io>data parallel>optim offload>plan"        # equal-rank edges between directories that are allowed
DENY=(                                   # "from-dir target-glob reason", checked first
  "io parallel/* io never calls communication"
  "io optim/* io stores optimizer state as plain buffers"
  "optim parallel/* the optimizer is a local update; strategies bring the communication"
  "offload parallel/!(comm.h|co2.h) offload swaps a rank's own state: of parallel/ it uses comm.h and CO2's rule (co2.h)"
  "offload data/* offload moves model and optimizer state, never the token data"
  "swarm @(model|optim|parallel|offload|data|io|plan|backend)/* the swarm moves float arrays and messages: it knows no model, optimizer or MPI"
)
MPI_ONLY="src/parallel/comm.c src/parallel/comm_jobs.c src/parallel/comm_mpi.h"
# plan/profile.c runs whole model copies on concurrent threads to measure contention (no
# element-wise work on buffers)
OMP_ALLOW="src/plan/profile.c"
SELECT_FILE="src/backend/select.c"       # the one file outside src/backend/ that calls backend_cpu(
MAX_LINES=550
SIZE_ALLOW=""                            # "path:cap" for generated tables (none today)
# ---------------------------------------------------------------------------------------------

selftest() {
    local src=${1:-src} tmp out rc miss=0 f n
    tmp=$(mktemp -d) || exit 2
    trap 'rm -rf "$tmp"' EXIT
    cp -R "$src" "$tmp/src" || exit 2
    pick() { # first .c file in $1 (not $2), or a new one
        local f; f=$(find "$tmp/src/$1" -maxdepth 1 -name '*.c' ! -name "${2:-/}" 2>/dev/null | sort | head -1)
        echo "${f:-$tmp/src/$1/planted.c}"
    }
    plant() { # FILE RULE LINE...: append the lines, remember where the last one landed
        local f=$1 r=$2; shift 2
        mkdir -p "${f%/*}"; printf '%s\n' "$@" >> "$f"
        want+=("$f:$(wc -l < "$f"): $r:")
    }
    local want=()
    plant "$(pick io)" layering '#include "../parallel/comm.h"'
    plant "$(pick parallel comm.c)" mpi '#include <mpi.h>'
    plant "$(pick model)" omp '#pragma omp parallel for'
    plant "$(pick train)" backend-select 'static void planted(void) { (void)backend_cpu(); }'
    f=$tmp/src/model/planted_big.h; mkdir -p "${f%/*}"
    for ((n = 1; n < 600; n++)); do echo "// padding line $n"; done > "$f"
    plant "$f" file-size '// padding line 600'
    out=$(bash "$0" "$tmp/src"); rc=$?
    [ "$rc" -ne 0 ] || { echo "selftest: FAIL: exit 0 with planted violations"; miss=1; }
    for f in "${want[@]}"; do
        if grep -qF -- "$f" <<<"$out"; then echo "selftest: caught ${f#"$tmp/"}"
        else echo "selftest: FAIL: not reported: ${f#"$tmp/"}"; miss=1; fi
    done
    [ "$miss" -eq 0 ] && echo "selftest: all ${#want[@]} planted violations reported"
    exit "$miss"
}
[ "${1:-}" = --selftest ] && selftest "${2:-src}"

ROOT=${1:-src}; ROOT=${ROOT%/}
[ -d "$ROOT" ] || { echo "t_layering.sh: no source root '$ROOT' (run from the repository root)"; exit 2; }
count=0; declare -A fired=()
report() { # FILE LINE RULE TEXT [DETAIL]
    echo "$1:$2: $3: $4${5:+  [$5]}"; count=$((count + 1)); fired[$3]=1
}
key() { REPLY="src/${1#"$ROOT"/}"; }                # a file's name in the settings above
layer() { case $1 in */*) REPLY=${1%%/*} ;; *) [[ " $ROOT_OK " == *" $1 "* ]] && REPLY=. || REPLY=; esac; }
norm() { # REPLY = $1 (dir/relative path) normalized, or "" if it leaves the source root
    local IFS=/ p out=(); for p in $1; do case $p in ''|.) ;;
        ..) [ ${#out[@]} -gt 0 ] || { REPLY=; return; }; unset 'out[-1]' ;; *) out+=("$p") ;; esac; done
    REPLY="${out[*]}"
}
RANK[.]=-1

# 1. layering
while IFS=: read -r f n text; do
    rel=${f#"$ROOT"/}; inc=${text#*\"}; inc=${inc%%\"*}
    dir=${rel%/*}; [ "$dir" = "$rel" ] && dir=.
    norm "$dir/$inc"; to=$REPLY
    [ -n "$to" ] || { report "$f" "$n" layering "$text" "leaves the source root"; continue; }
    layer "$rel"; a=$REPLY; layer "$to"; b=$REPLY
    for r in "${DENY[@]}"; do
        read -r df dg why <<<"$r"
        [ "$a" = "$df" ] && [[ $to == $dg ]] && { report "$f" "$n" layering "$text" "$a -> $to: $why"; continue 2; }
    done
    [ -n "$a" ] && [ -n "${RANK[$a]+x}" ] || { report "$f" "$n" layering "$text" "'${a:-$rel}' has no rank in RANK"; continue; }
    [ -n "$b" ] && [ -n "${RANK[$b]+x}" ] || { report "$f" "$n" layering "$text" "'${b:-$to}' has no rank in RANK"; continue; }
    [ "$a" = "$b" ] && continue
    ra=${RANK[$a]} rb=${RANK[$b]}
    if [ "$rb" -gt "$ra" ]; then report "$f" "$n" layering "$text" "$a ($ra) -> $b ($rb): upward"
    elif [ "$rb" -eq "$ra" ] && [[ " $SIBLING " != *" $a>$b "* ]]; then
        report "$f" "$n" layering "$text" "$a -> $b: equal rank, not in SIBLING"
    fi
done < <(grep -rnE --include='*.[ch]' '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$ROOT" | sort -t: -k1,1 -k2,2n)

# 2-4. greps: RULE REGEX ALLOWED-KEY-GLOB...
grep_rule() {
    local rule=$1 re=$2 f n text; shift 2
    while IFS=: read -r f n text; do
        key "$f"; for g in "$@"; do [[ $REPLY == $g ]] && continue 2; done
        [[ $text =~ ^[[:space:]]*(//|/\*|\*) ]] && continue   # a comment line
        report "$f" "$n" "$rule" "$text"
    done < <(grep -rnE --include='*.[ch]' "$re" "$ROOT" | sort -t: -k1,1 -k2,2n)
}
grep_rule mpi '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]mpi\.h[>"]' $MPI_ONLY
grep_rule omp '^[[:space:]]*#[[:space:]]*pragma[[:space:]]+omp|_Pragma[[:space:]]*\([[:space:]]*"omp|^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](omp|cblas)\.h[>"]' \
    'src/backend/*' $OMP_ALLOW
sel=$SELECT_FILE; [ -f "$ROOT/${SELECT_FILE#src/}" ] || sel='src/backend/*'
grep_rule backend-select '(^|[^[:alnum:]_])backend_cpu(_set_threads)?[[:space:]]*\(' 'src/backend/*' "$sel"

# 5. file size
while read -r n f; do
    [ "$f" = total ] && continue
    key "$f"; cap=$MAX_LINES
    for a in $SIZE_ALLOW; do [ "${a%:*}" = "$REPLY" ] && cap=${a##*:}; done
    [ "$n" -gt "$cap" ] && report "$f" "$n" file-size "$n lines (max $cap)"
done < <(find "$ROOT" -type f \( -name '*.c' -o -name '*.h' \) -exec wc -l {} + | sort -k2)

echo "$count violation(s)"
for r in "${RULES[@]}"; do read -r name why <<<"$r"; [ -n "${fired[$name]:-}" ] && echo "  $name: $why"; done
[ "$count" -eq 0 ] || exit 1
[ $# -eq 0 ] && exec bash "$0" --selftest "$ROOT"
exit 0
