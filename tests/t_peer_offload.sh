#!/usr/bin/env bash
# serial: peers killed, dropped after --peer-timeout
# t_peer_offload.sh — loom peer --offload disk (a peer whose model — parameters, gradients,
# AdamW moments — is swapped through the slow tier) when peers die or diverge, real processes on
# 127.0.0.1 (the equalities with the in-memory swarm: t_peer_offload_same.sh):
#   2. kill -9 of an offloaded peer mid-run, restarted with the same id (and --offload): it
#      downloads the swarm's state into its tier and rejoins; a late offloaded joiner likewise;
#      all end with the in-memory peer's anchor;
#   3. an offloaded peer whose anchor diverges (LOOM_FAULT_DIVERGE) re-syncs: every anchor equal.
# The tier's scratch files are gone after every run.
# asan: skip
set -eu
. "$(dirname "$0")/peer_offload_lib.sh"

echo "== 2. an offloaded peer killed and restarted rejoins; a late offloaded joiner"
model="--layers 2 --heads 2 --dim 64 --vocab 64 --block-size 32 --batch 4 --seq 32 --peak-gflops 1"
peer j0 "" --tau 4 --steps 600 --min-peers 2 --export "$d/j0.st"
j0=$!
boot=$(addr j0)
LOOM_FAULT_KILL=0:150 peer j1 $boot --tau 4 --steps 600 --min-peers 2 --export "$d/j1.st" $OFF
j1=$!
rc=0; wait $j1 || rc=$?
[ "$rc" = 137 ] || { echo "j1 should have been killed (exit $rc)"; cat "$d/j1.log"; exit 1; }
peer j1 $boot --tau 4 --steps 600 --export "$d/j1.st" $OFF
j1=$!
peer j2 $boot --tau 4 --steps 600 --export "$d/j2.st" $OFF
j2=$!
waitall $j0 $j1 $j2 || { logs j; exit 1; }
grep -h "joined the swarm" "$d/j1.log" "$d/j2.log"
cmp "$d/j0.st" "$d/j1.st" && cmp "$d/j0.st" "$d/j2.st" || { echo "anchors differ after joins"; exit 1; }
clean "joins"
echo "offloaded j1 (killed at step 150, restarted) and late offloaded j2 ended with j0's anchor"

echo "== 3. an offloaded peer whose anchor diverges re-syncs into its tier"
started=() boot=
for i in 0 1 2; do
    div=$([ $i = 1 ] && echo 5 || true)
    LOOM_FAULT_DIVERGE=$div peer v$i "$boot" --tau 4 --steps 60 --min-peers 3 --export "$d/v$i.st" \
        $([ $i = 0 ] || echo "$OFF")
    started+=($!)
    if [ $i = 0 ]; then boot=$(addr v0); fi
done
waitall "${started[@]}" || { logs v; exit 1; }
grep -q "re-synced with the swarm" "$d/v1.log" || { echo "v1 did not re-sync"; cat "$d/v1.log"; exit 1; }
cmp "$d/v0.st" "$d/v1.st" && cmp "$d/v0.st" "$d/v2.st" || { echo "anchors differ after the re-sync"; exit 1; }
clean "re-sync"
echo "offloaded v1 diverged, re-synced; all three anchors identical"

