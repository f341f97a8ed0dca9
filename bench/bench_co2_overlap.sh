#!/usr/bin/env bash
# bench_co2_overlap.sh — is CO2's outer all-reduce really hidden behind computation?
# Runs 2 ranks on this machine with an emulated slow link (LOOM_COMM_DELAY=S: every collective
# of >= 4096 floats completes no sooner than S seconds after it starts; no CPU is used while
# waiting, so compute is not disturbed) and compares median step times:
#   local only (CO2 with tau larger than the run: no outer all-reduce during it)
#   CO2 tau 4, no delay / with delay      — should stay within 10% of local only
#   synchronous DP, no delay / with delay — pays the delay every step
# Usage: bench/bench_co2_overlap.sh [--delay S] [--steps N]   (prints a markdown table)
set -eu
cd "$(dirname "$0")/.."
delay=0.6 steps=16
while [ $# -gt 0 ]; do case $1 in --delay) delay=$2; shift 2;; --steps) steps=$2; shift 2;; *) echo "unknown $1"; exit 2;; esac; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
/usr/bin/python3 tests/torch_gpt.py tokens --vocab 50257 --n 400000 --out "$d/tok.bin"
flags="--data $d/tok.bin --layers 4 --heads 4 --dim 128 --vocab 50257 --block-size 128 --batch 4
       --seq 128 --steps $steps --progress off --dp 2 --threads 1"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(getconf _NPROCESSORS_ONLN) cores; $(date -u +%F); loom $(git rev-parse --short HEAD)"
echo "config: L4 H4 C128 V50257 T128 B4 per rank (6.9M params; 27.5 MB per all-reduce), 2 ranks x 1 thread, delay $delay s"
echo
echo "| run | emulated delay | median step ms | vs local only | exposed comm ms/step |"
echo "|---|---|---|---|---|"
base=""
run() {  # name, delay, extra flags
    LOOM_COMM_DELAY=$2 mpirun -np 2 --bind-to none -x LOOM_COMM_DELAY ./loom train $flags $3 \
        --metrics "$d/m.jsonl" 2>/dev/null
    /usr/bin/python3 - "$d/m.jsonl" "$1" "$2" "${base:-0}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "step_ms" in l][2:]
med = statistics.median(r["step_ms"] for r in rows)
exp = statistics.mean(r.get("comm_exposed_ms", 0) for r in rows)
base = float(sys.argv[4]) or med
print(f"| {sys.argv[2]} | {sys.argv[3]} s | {med:.0f} | {med / base:.2f}x | {exp:.0f} |")
print(f"MEDIAN {med}", file=sys.stderr)
PY
}
base=$(run "local only (no outer all-reduce)" 0 "--co2 --tau 100000" 2>&1 >/dev/null | sed -n 's/MEDIAN //p')
run "local only (no outer all-reduce)" 0 "--co2 --tau 100000" 2>/dev/null
run "CO2 tau 4" 0 "--co2 --tau 4" 2>/dev/null
run "CO2 tau 4" "$delay" "--co2 --tau 4" 2>/dev/null
run "synchronous DP" 0 "" 2>/dev/null
run "synchronous DP" "$delay" "" 2>/dev/null
