#!/usr/bin/env bash
# serial: waits on short sleeps around a failing save
# t_ckpt_savefail.sh — a checkpoint save that fails does not end the run. Runs of 16 steps save
# every 4; the step-8 save fails; at the start of the step-12 save (LOOM_SAVE_GATE holds it
# there) the script checks that step_00000008.partial is gone, step_00000004 and `latest` are as
# they were and the metrics hold {"step": 8, "save_failed": "<reason>"} after step 8's row.
# The run then ends normally: its step-12 save works, a run resumed from it matches an
# uninterrupted run bit for bit (losses and exported weights), and so does the run's own final
# export (the failed save left the training state alone). Cases:
#   * one process, the step-8 commit failing (LOOM_FAULT_SAVE=step:8);
#   * dp 2 ZeRO 1 under MPI, rank 1's shard failing: every rank agrees, rank 0 reports rank 1's
#     reason; CO2 with 2 workers, worker 1 failing after its co2 state file;
#   * a real ENOSPC: a tmpfs holding the checkpoints, filled after the step-4 save and emptied
#     before the step-12 one (as root; without a tmpfs that part says so and is skipped);
#   * --save-on-error stop, and a failed final save: exit 5, the same state on disk.
set -eu
. "$(dirname "$0")/lib.sh"
d=$(mktemp -d)
mnt=
cleanup() { # a gated run left behind by a failed check is ended first
    if [ -f "$d/run.pid" ]; then kill "$(cat "$d/run.pid")" 2>/dev/null && sleep 1 || true; fi
    if [ -n "$mnt" ]; then umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true; fi
    rm -rf "$d"
}
trap cleanup EXIT
mkshard "$d/train.bin" 64 20000 1
flags="--data $d/train.bin --layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 4
       --seq 16 --grad-accum 2 --steps 16 --lr 3e-3 --warmup 2 --lr-schedule cosine --min-lr 1e-4
       --shuffle on --seed 13 --progress off"

# run_gated NAME ACTION CMD...: runs CMD in the background with LOOM_SAVE_GATE; as each save
# begins, calls "ACTION STEP" and then lets the save go on. Sets rc to CMD's exit status.
run_gated() {
    local name=$1 action=$2
    shift 2
    rm -f "$d/gate" "$d/$name.rc"
    (
        export LOOM_SAVE_GATE=$d/gate
        "$@" 2>"$d/$name.err" &
        echo $! >"$d/run.pid"
        wait $! && r=0 || r=$?
        echo $r >"$d/$name.rc"
    ) &
    while [ ! -f "$d/$name.rc" ]; do
        if [ -f "$d/gate" ]; then
            "$action" "$(cat "$d/gate")"
            rm -f "$d/gate"
        fi
        sleep 0.02
    done
    wait
    rm -f "$d/run.pid"
    rc=$(cat "$d/$name.rc")
}

# kept CK METRICS FAILED PREV PATTERN: after the failed save of step FAILED, nothing of it is
# left in CK, step PREV is complete and `latest` still names it, and the metrics hold the
# failure (its reason containing PATTERN) after FAILED's own row.
kept() {
    $PY - "$@" <<'PY'
import json, os, sys
ck, metrics, failed, prev, pattern = sys.argv[1:]
failed, prev = int(failed), int(prev)
names = sorted(os.listdir(ck))
errors = []
if [n for n in names if n.endswith(".partial")]: errors.append(f"a partial directory is left: {names}")
if f"step_{failed:08d}" in names: errors.append(f"step {failed} exists: {names}")
if not os.path.exists(f"{ck}/step_{prev:08d}/checkpoint.json"): errors.append(f"step {prev} is gone: {names}")
latest = open(f"{ck}/latest").read()
if latest != f"step_{prev:08d}\n": errors.append(f"latest is {latest!r}")
rows = [json.loads(l) for l in open(metrics) if l.strip()]
rec = [i for i, r in enumerate(rows) if "save_failed" in r]
own = [i for i, r in enumerate(rows) if r.get("step") == failed and "loss" in r]
if len(rec) != 1 or set(rows[rec[0]]) != {"step", "save_failed"} or rows[rec[0]]["step"] != failed \
        or pattern not in rows[rec[0]]["save_failed"] or not own or own[0] > rec[0]:
    errors.append(f"metrics records {[rows[i] for i in rec]}, step {failed}'s row at {own}")
if errors:
    print("FAILED:", "; ".join(errors)); sys.exit(1)
print(f"after the failed step-{failed} save: {names}, latest {latest.strip()}, record {rows[rec[0]]}")
PY
}

# survives NAME PATTERN LAUNCH...: a reference run of LAUNCH, then one whose step-8 save fails
# (the caller's LOOM_FAULT_SAVE or disk) with a reason containing PATTERN; checks what it kept
# (kept, above), and that it and its resume from step 12 trained what the reference trained
# (same, tests/lib.sh).
survives() {
    local name=$1 pattern=$2
    shift 2
    LOOM_SAVE_GATE=$d/gate "$@" --metrics "$d/$name.ref.jsonl" --export "$d/$name.ref.st" 2>/dev/null
    at_save() {
        case $1 in
        8) [ -z "${fill:-}" ] || dd if=/dev/zero of="$fill" bs=64k 2>/dev/null || true ;;
        12)
            kept "${ck:-$d/$name.ck}" "$d/$name.jsonl" 8 4 "$pattern" || {
                cat "$d/$name.err"
                exit 1
            }
            [ -z "${fill:-}" ] || rm -f "$fill"
            ;;
        esac
    }
    run_gated "$name" at_save "$@" --save "${ck:-$d/$name.ck}" --save-every 4 --keep 0 \
        --metrics "$d/$name.jsonl" --export "$d/$name.st"
    [ "$rc" = 0 ] || { cat "$d/$name.err"; echo "FAILED: $name exited $rc"; exit 1; }
    grep -q "WARNING: the checkpoint of step 8 was NOT saved: .*$pattern" "$d/$name.err" ||
        { cat "$d/$name.err"; echo "FAILED: no warning"; exit 1; }
    grep -q "next save is at step 12" "$d/$name.err"
    test "$(cat "${ck:-$d/$name.ck}/latest")" = step_00000016
    same "$name: the run itself" "$d/$name.jsonl" "$d/$name.ref.jsonl" \
        "$d/$name.st" "$d/$name.ref.st"
    LOOM_SAVE_GATE=$d/gate "$@" --resume "${ck:-$d/$name.ck}/step_00000012" --metrics "$d/$name.res.jsonl" \
        --export "$d/$name.res.st" 2>/dev/null
    same --part "$name: resumed from step 12" "$d/$name.res.jsonl" "$d/$name.ref.jsonl" \
        "$d/$name.res.st" "$d/$name.ref.st"
    $LOOM plot "$d/$name.jsonl" -o "$d/$name.svg"
}

echo "== one process, the step-8 commit fails"
LOOM_FAULT_SAVE=step:8 survives one "injected fault (LOOM_FAULT_SAVE)" $LOOM train $flags

echo "== --save-on-error stop, and a failed final save: exit 5, the previous checkpoint kept"
LOOM_FAULT_SAVE=step:8 $LOOM train $flags --save "$d/stop" --save-every 4 --keep 0 \
    --metrics "$d/stop.jsonl" --save-on-error stop 2>"$d/stop.err" && rc=0 || rc=$?
[ "$rc" = 5 ] || { cat "$d/stop.err"; echo "FAILED: --save-on-error stop exited $rc"; exit 1; }
grep -q "stopping (--save-on-error stop)" "$d/stop.err"
kept "$d/stop" "$d/stop.jsonl" 8 4 "injected fault"
test "$(grep -c '"loss"' "$d/stop.jsonl")" = 8
LOOM_FAULT_SAVE=step:16 $LOOM train $flags --save "$d/fin" --save-every 4 --keep 0 \
    --metrics "$d/fin.jsonl" 2>"$d/fin.err" && rc=0 || rc=$?
[ "$rc" = 5 ] || { cat "$d/fin.err"; echo "FAILED: a failed final save exited $rc"; exit 1; }
grep -q "stopping (the final save failed)" "$d/fin.err"
kept "$d/fin" "$d/fin.jsonl" 16 12 "injected fault"

echo "== a real ENOSPC: a tmpfs filled between the step-4 and step-8 saves"
mnt=$d/mnt
mkdir "$mnt"
if mount -t tmpfs -o size=2m tmpfs "$mnt" 2>"$d/mount.err"; then
    fill=$mnt/fill ck=$mnt/ck survives disk "No space left on device" $LOOM train $flags
    ls -a "$mnt/ck"
    umount "$mnt"
else
    echo "SKIP (the ENOSPC part): cannot mount a tmpfs: $(cat "$d/mount.err")"
fi
mnt=

command -v mpirun >/dev/null || { echo "SKIP (MPI part): mpirun not installed"; exit 0; }
need_mpi
echo "== dp 2 ZeRO 1: rank 1's shard fails, every rank agrees"
LOOM_FAULT_SAVE=rank:1:step:8 survives dp2 "injected fault on rank 1" \
    $MPI -np 2 -x LOOM_FAULT_SAVE -x LOOM_SAVE_GATE $LOOM train $flags --dp 2 --zero 1
echo "== CO2, 2 workers: worker 1 fails after writing its CO2 state"
LOOM_FAULT_SAVE=rank:1:step:8 survives co2 "injected fault on rank 1" \
    $MPI -np 2 -x LOOM_FAULT_SAVE -x LOOM_SAVE_GATE $LOOM train $flags --dp 2 --co2 --tau 2
echo "all failed saves: the run went on and saved again"
