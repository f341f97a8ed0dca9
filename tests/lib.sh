# lib.sh — helpers for the integration tests (sourced).
# mkshard FILE VOCAB N SEED [HEADER_COUNT]: an llm.c shard of N pseudo-random tokens < VOCAB
# (HEADER_COUNT overrides the count written in the header, for truncation tests).
mkshard() {
    $PY - "$@" <<'PY'
import random, struct, sys
path, vocab, n, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
hc = int(sys.argv[5]) if len(sys.argv) > 5 else n
r = random.Random(seed)
# a learnable stream: a repeating pattern with noise
toks = [(i * 7 + (i // 5)) % vocab if r.random() < 0.8 else r.randrange(vocab) for i in range(n)]
with open(path, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, hc, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *toks))
PY
}
# expect_fail PATTERN CMD...: CMD must exit with 1..125 (not a crash), and its
# stderr must contain PATTERN.
expect_fail() {
    local pattern=$1; shift
    local out rc
    out=$("$@" 2>&1 >/dev/null) && rc=0 || rc=$?
    if [ "$rc" -eq 0 ] || [ "$rc" -gt 125 ]; then
        echo "FAILED: '$*' exited $rc (want 1..125): $out"; return 1
    fi
    if ! grep -qF -- "$pattern" <<<"$out"; then
        echo "FAILED: '$*' message lacks '$pattern': $out"; return 1
    fi
    echo "ok ($rc): $out"
}
# missing_dep WHAT: fail the test (exit 1, not the skip code 77) because a dependency is absent.
# `make test` installs every dependency when run as root (scripts/deps.sh test), so on a set-up
# machine this never happens; the message says how to set one up.
missing_dep() {
    echo "FAILED: missing dependency: $1 (run \`make test\` as root to install it, or run" \
         "\`bash scripts/deps.sh test\` to see the commands)"
    exit 1
}
# need_torch: PyTorch and NumPy importable by $PY (Debian python3-torch python3-numpy).
need_torch() {
    $PY -c "import torch, numpy" 2>/dev/null || missing_dep "python3-torch/python3-numpy for $PY"
}
# MPI: how the tests launch ranks on one machine (every transport, no core binding, more ranks
# than cores allowed). need_mpi: fail without mpirun, else let root launch and give each rank
# fastmem MIB: a --fast-mem of MIB MiB for a test's run. Under the sanitizers (LOOM_ASAN) 512 MiB
# more: their shadow memory and quarantine are in the resident set the budget bounds (the fixed
# overhead measured at start-up is ~130 MiB more there), but they are not the program's.
fastmem() {
    local slack=0
    [ -n "${LOOM_ASAN:-}" ] && slack=512
    echo "$(($1 + slack))M"
}
# one OpenMP thread.
MPI="mpirun --oversubscribe --bind-to none --mca btl self,vader,tcp"
need_mpi() {
    command -v mpirun >/dev/null || missing_dep "mpirun (Debian openmpi-bin)"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
}
