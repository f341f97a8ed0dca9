# lib.sh — helpers for the integration tests (sourced).
# --offload runs plan from fixed costs instead of measuring at start-up (LOOM_OFFLOAD_COSTS,
# src/testhooks.h: 2-4 s a run saved; the comparisons hold for any plan); t_offload_plan,
# t_offload_bound and t_offload_memory unset it and measure as a user's run does.
export LOOM_OFFLOAD_COSTS=fixed
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
# stderr must contain PATTERN. Under mpirun (CMD is $MPI ...), the job ends as soon as a rank
# fails: mpirun otherwise waits odls_base_sigkill_timeout (1 s) after a rank's non-zero exit,
# 2 s when the other ranks catch SIGTERM (loom does), even if they have already exited.
expect_fail() {
    local pattern=$1; shift
    local out rc
    out=$(OMPI_MCA_odls_base_sigkill_timeout=0 "$@" 2>&1 >/dev/null) && rc=0 || rc=$?
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
# fastmem MIB: a --fast-mem of MIB MiB for a test's run. Under the sanitizers (LOOM_ASAN) 512 MiB
# more: their shadow memory and quarantine are in the resident set the budget bounds (the fixed
# overhead measured at start-up is ~130 MiB more there), but they are not the program's.
fastmem() {
    local slack=0
    [ -n "${LOOM_ASAN:-}" ] && slack=512
    echo "$(($1 + slack))M"
}
# need_gpu ARGS...: `$LOOM train ARGS --steps 0` must start (the GPU tests, tests/gpu/): exit 77
# (skip) where there is no usable GPU or loom was built without CUDA, 1 on any other failure
# (its output shown).
need_gpu() {
    local out
    out=$($LOOM train "$@" --steps 0 2>&1) && return 0
    grep -q "no usable NVIDIA GPU\|built without the CUDA backend" <<<"$out" && { echo "$out"; exit 77; }
    echo "$out"
    exit 1
}
# MPI: how the tests launch ranks on one machine (shared memory and TCP, no core binding, more
# ranks than cores allowed). need_mpi: fail without mpirun, else let root launch, give each rank
# one OpenMP thread, and name Open MPI's point-to-point layer (ob1, the one it picks for these
# transports anyway): left to choose, each rank first tries UCX and the matching-transport layer,
# 200 of the 350 ms its MPI_Init takes on a 2-core virtual machine.
MPI="mpirun --oversubscribe --bind-to none --mca btl self,vader,tcp"
need_mpi() {
    command -v mpirun >/dev/null || missing_dep "mpirun (Debian openmpi-bin)"
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
    export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1}
}
# same [--tol T] [--wtol W] [--part] [--steps LO-HI] NAME A.jsonl B.jsonl [A.st B.st]: run A
# trained what run B trained. Without --tol, every training record of A (loss, lr, grad_norm,
# tokens: every field but the timings step_ms, tokens_per_s, mfu, comm_*_ms, io_ms, a peer's
# wait_ms and sent_mb (what it sends depends on when the others ask), and
# device_mem_mib, which a device backend adds: --device emu against cpu) and every
# validation loss equals B's at the same step, and the exported weights A.st and B.st are the
# same bytes. With --tol T (runs laid out differently, which round differently), the training
# losses are within T step for step and finite, and the weights within T (or W) value for value
# (torch_ref.py compare-st, which needs NumPy). A and B have the same steps, unless --part (A's
# steps are some of B's: a resumed run against the uninterrupted one); --steps LO-HI: A's
# steps are exactly LO..HI. Prints one line "NAME: ..." (with the differences, if any) and
# returns 1 on a mismatch.
same() {
    local tol=0 wtol= part=0 steps=
    while :; do
        case $1 in
            --tol) tol=$2; shift 2 ;;
            --wtol) wtol=$2; shift 2 ;;
            --part) part=1; shift ;;
            --steps) steps=$2; shift 2 ;;
            *) break ;;
        esac
    done
    [ $# -eq 3 ] || [ $# -eq 5 ] || { echo "same: usage: same [opts] NAME A B [A.st B.st]"; return 2; }
    $PY - "$(dirname "${BASH_SOURCE[0]}")/torch_ref.py" "$tol" "${wtol:-$tol}" "$part" \
        "$steps" "$@" <<'PY' || return 1
import json, math, subprocess, sys
ref, tol, wtol, part, steps = sys.argv[1], float(sys.argv[2]), *sys.argv[3:6]
part = part == "1"
name, fa, fb = sys.argv[6:9]
wa, wb = sys.argv[9:11] if len(sys.argv) > 9 else (None, None)
TIMING = {"step_ms", "tokens_per_s", "mfu", "comm_exposed_ms", "comm_overlap_ms", "io_ms",
          "device_mem_mib", "wait_ms", "sent_mb"}
def records(path):  # {step: training record without timings}, {step: val_loss}
    train, val = {}, {}
    for line in open(path):
        r = json.loads(line)
        into, v = (train, {k: x for k, x in r.items() if k not in TIMING}) if "loss" in r else \
                  (val, r.get("val_loss")) if "val_loss" in r else (None, None)
        if into is None: continue
        if r["step"] in into:
            print(f"{name}: FAILED: {path} has step {r['step']} twice")
            sys.exit(1)
        into[r["step"]] = v
    return train, val
(ta, va), (tb, vb) = records(fa), records(fb)
def span(s): return "none" if not s else f"{min(s)}" if min(s) == max(s) else f"{min(s)}-{max(s)}"
bad = []
if not ta: bad.append(f"no training steps in {fa}")
elif steps:
    lo, hi = map(int, steps.split("-"))
    if sorted(ta) != list(range(lo, hi + 1)): bad.append(f"steps {span(ta)}, not {steps}")
if part: missing = sorted(set(ta) - set(tb))
else: missing = sorted(set(ta) ^ set(tb))
if missing: bad.append(f"steps differ ({span(ta)} vs {span(tb)}: {missing[:5]})")
common = sorted(set(ta) & set(tb))
nonfinite = [s for s in common if not math.isfinite(ta[s]["loss"] + tb[s]["loss"])]
if nonfinite: bad.append(f"non-finite loss at steps {nonfinite}")
if tol > 0:
    worst = max((abs(ta[s]["loss"] - tb[s]["loss"]) for s in common), default=0.0)
    what = f"steps {span(ta)}, max loss difference {worst:.3g} (tolerance {tol:g})"
    if not worst <= tol: bad.append(what)
else:
    diff = [s for s in common if ta[s] != tb[s]]
    vdiff = sorted(s for s in (set(va) if part else set(va) | set(vb)) if va.get(s) != vb.get(s))
    what = f"steps {span(ta)}{f' and {len(va)} validation losses' if va else ''} identical"
    if diff:
        s = diff[0]
        bad.append(f"training records differ at steps {diff[:5]} (step {s}: {ta[s]} vs {tb[s]})")
    if vdiff: bad.append(f"validation losses differ at steps {vdiff[:5]}")
if wa:
    if tol > 0:
        r = subprocess.run([sys.executable, ref, "compare-st", wa, wb, "--tol", wtol],
                           capture_output=True, text=True)
        out = (r.stdout.strip() or r.stderr.strip() or "no output").splitlines()[-1]
        what += f", weights: {out}"
        if r.returncode: bad.append(f"weights: {out}")
    elif open(wa, "rb").read() == open(wb, "rb").read(): what += ", weights identical"
    else: bad.append(f"exported weights {wa} and {wb} differ")
print(f"{name}: {what}" if not bad else f"{name}: FAILED: {'; '.join(bad)}")
sys.exit(1 if bad else 0)
PY
}

# same_st [--tol T] NAME A.st B.st: the exported weights of two runs, value for value within T
# (torch_ref.py compare-st) or, without --tol, the same bytes. Prints one line "NAME: ..." and
# returns 1 on a mismatch.
same_st() {
    local tol=0 out
    [ "$1" = --tol ] && { tol=$2; shift 2; }
    [ $# -eq 3 ] || { echo "same_st: usage: same_st [--tol T] NAME A.st B.st"; return 2; }
    if [ "$tol" = 0 ]; then
        cmp -s "$2" "$3" || { echo "$1: FAILED: exported weights $2 and $3 differ"; return 1; }
        echo "$1: weights identical"
        return 0
    fi
    out=$($PY "$(dirname "${BASH_SOURCE[0]}")/torch_ref.py" compare-st "$2" "$3" --tol "$tol" 2>&1) ||
        { echo "$1: FAILED: $(tail -1 <<<"$out")"; return 1; }
    echo "$1: weights: $(tail -1 <<<"$out")"
}

# offload_resume LABEL FLAGS [NP]: an NP-rank (default 2) run of FLAGS (4 steps) exported whole;
# then runs with --save-every 2, offloaded ($OFF) and in memory, cut back to step 2 and resumed
# (the offloaded checkpoint without and with $OFF, the in-memory one with $OFF): each must export
# the uninterrupted run's bytes and leave no scratch files in $d/off. Uses $d, $OFF, $MPI, $LOOM.
offload_resume() {
    local label=$1 flags=$2 np=${3:-2} src extra c ck
    $MPI -np "$np" $LOOM train $flags --export "$d/full.st" 2>/dev/null
    for src in off mem; do
        extra=""; [ $src = off ] && extra=$OFF
        $MPI -np "$np" $LOOM train $flags --save-every 2 --save "$d/ck_$src" $extra 2>/dev/null
        rm -rf "$d/ck_$src/step_00000004"; echo step_00000002 >"$d/ck_$src/latest"
    done
    for c in "ck_off:" "ck_off:$OFF" "ck_mem:$OFF"; do
        ck=${c%%:*} extra=${c#*:}
        $MPI -np "$np" $LOOM train $flags --resume "$d/$ck" $extra --export "$d/res.st" \
            2>"$d/res.err" || { cat "$d/res.err"; exit 1; }
        cmp -s "$d/full.st" "$d/res.st" ||
            { echo "$label: resume from $ck ${extra:+with --offload} differs from the uninterrupted run"; exit 1; }
        echo "$label: resume from $ck ${extra:+with --offload}: the uninterrupted run's bytes"
        [ -z "$(ls -A "$d/off")" ] ||
            { echo "$label: resume from $ck: scratch files left in --offload-dir"; exit 1; }
    done
}

# peer_addr DIR ID: the address `loom peer` ID (logging to DIR/ID.log) listens at, once it says
# so (waits up to 60 s; otherwise prints its log and fails).
peer_addr() {
    local a=
    for _ in $(seq 600); do
        a=$(sed -n 's/^loom peer .*: others reach it at //p' "$1/$2.log" 2>/dev/null || true)
        [ -n "$a" ] && break
        sleep 0.1
    done
    [ -n "$a" ] || { echo "peer $2 never said where it listens" >&2; cat "$1/$2.log" >&2; return 1; }
    echo "$a"
}

# tp2d_table FILE: the 2D run's summary line in FILE: what its layers received per micro-batch
# (measured) is within 0.2% of the SUMMA table it prints.
tp2d_table() {
    local line
    line=$(grep -F "received per layer and micro-batch" "$1")
    $PY - "$line" <<'PY'
import re, sys
m = re.search(r"micro-batch ([0-9.]+) MiB .* per linear ([0-9.]+) MiB", sys.argv[1])
got, table = float(m.group(1)), float(m.group(2))
assert got > 0 and abs(got - table) <= 0.002 * table, (got, table)
print(f"per layer and micro-batch: measured {got} MiB, table {table} MiB")
PY
}

# metric_cols FILE KEY...: one line per training record of a metrics file: its step, then the
# values of KEY... (None where absent).
metric_cols() {
    $PY - "$@" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "step" in r and "loss" in r:
        print(r["step"], *(r.get(k) for k in sys.argv[2:]))
PY
}

# corpus_vs_fp32 DTYPE DIR: 300 steps on the bundled corpus ($FORTUNES, else data/fortunes) in
# fp32 and in DTYPE on $LOOM's GPU (cuda:fp32, cuda:DTYPE), metrics in DIR; their final
# validation losses within 1% of each other. Says so and returns 0 when there is no corpus.
corpus_vs_fp32() {
    local F=${FORTUNES:-data/fortunes} dt=$1 dir=$2 p
    if [ ! -f "$F/meta.json" ]; then
        echo "no bundled corpus at $F (make demo prepares it): not run"
        return 0
    fi
    local conv="--data $F/train_*.bin --val-data $F/val_*.bin --layers 4 --heads 2 --dim 128
        --vocab 256 --block-size 128 --batch 16 --seq 128 --steps 300 --lr 2e-3 --warmup 20
        --lr-schedule cosine --min-lr 2e-4 --weight-decay 0.1 --grad-clip 1.0 --val-every 0
        --val-windows 20 --progress off --seed 3"
    for p in fp32 "$dt"; do # (p: a caller's d names its folder)
        $LOOM train $conv --device cuda:$p --metrics "$dir/c_$p.jsonl" 2>&1 | grep "loss scale" || true
    done
    $PY - "$dir/c_fp32.jsonl" "$dir/c_$dt.jsonl" "$dt" <<'PY'
import json, sys
v = [[json.loads(l)["val_loss"] for l in open(p) if "val_loss" in l][-1] for p in sys.argv[1:3]]
r = abs(v[1] - v[0]) / v[0]
print(f"val loss after 300 steps: fp32 {v[0]:.4f} {sys.argv[3]} {v[1]:.4f} ({100 * r:.2f}% apart, "
      "bound 1%)")
sys.exit(0 if r <= 0.01 else 1)
PY
}
