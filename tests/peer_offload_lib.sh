# peer_offload_lib.sh — what t_peer_offload.sh and t_peer_offload_same.sh share: a small
# model, the offload flags, and helpers that start peers and swarms of `loom peer` on 127.0.0.1
# and compare their records and exported anchors. Sourced after `set -eu`; PT (default 2) is
# the peers' --peer-timeout.
. "$(dirname "$0")/lib.sh"
need_mpi
need_torch
REF="$PY $(dirname "$0")/torch_ref.py"
d=${PEER_TEST_DIR:-$(mktemp -d)}
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; [ -n "${PEER_TEST_DIR:-}" ] || rm -rf "$d"; }
trap cleanup EXIT
mkshard "$d/d.bin" 64 60000 3
$LOOM keygen -o "$d/secret" 2>/dev/null
mkdir -p "$d/off"
model="--layers 2 --heads 2 --dim 32 --vocab 64 --block-size 32 --batch 2 --seq 16"
opt="--lr 3e-3 --weight-decay 0.1 --grad-clip 0.5 --lr-schedule constant --grad-accum 2"
outer="--tau 3 --outer-lr 0.9 --outer-momentum 0.6 --gap-mode constant --gap-penalty 1.7 --outer-clip 0.004"
# (explicit units: no start-up profiling, so a restarted peer is back within a second)
OFF="--offload disk --offload-dir $d/off --fast-mem 96M --offload-units [[0,0],[1,1],[2,2],[3,3]]"
export OMP_NUM_THREADS=1
WRAP= # (section 5: a parent that reports the peer's whole-process peak RSS)
peer() { # peer ID BOOT [flags...]: a peer in the background (pid in $!), port picked by the system
    local id=$1 boot=$2; shift 2
    rm -f "$d/$id.log"
    $WRAP $LOOM peer --data "$d/d.bin" $model $opt --peer-id "$id" --listen 127.0.0.1:0 \
        ${boot:+--bootstrap $boot} --secret "$d/secret" --progress off \
        --peer-timeout "${PT:-2}" "$@" > "$d/$id.log" 2>&1 &
    pids+=($!)
}
addr() { peer_addr "$d" "$1"; } # the address peer ID listens at (tests/lib.sh)
waitall() { local rc=0; for p in "$@"; do wait "$p" || rc=$?; done; return $rc; }
logs() { for f in "$d"/$1*.log; do echo "== $f"; tail -n 8 "$f"; done; }
# the numbers of a peer's records: loss, lr, norm, local loss, round, averaged (timing aside)
numbers() { sed -E 's/,"step_ms".*"local_loss"/,"local_loss"/; s/,"view":[0-9]+//; s/,"wait_ms".*//' "$1"; }
clean() { [ -z "$(ls -A "$d/off")" ] || { echo "$1: scratch files left in --offload-dir"; ls -R "$d/off"; exit 1; }; }
swarm() { # swarm NAME N [flags...]: N peers NAME0.. started together; metrics, exports NAME$i.*
    local name=$1 n=$2; shift 2
    local started=() boot=
    for i in $(seq 0 $((n - 1))); do
        local f=$(eval echo "\${F$i:-}")
        peer "$name$i" "$boot" $outer --min-peers $n --metrics "$d/$name$i.jsonl" \
            --export "$d/$name$i.st" $f "$@"
        started+=($!)
        if [ $i = 0 ]; then boot=$(addr "${name}0"); fi
    done
    waitall "${started[@]}" || { logs "$name"; exit 1; }
}
same_peer() { # same_peer WHAT A B: identical peer records (numbers) and exported anchors
    diff <(numbers "$d/$2.jsonl") <(numbers "$d/$3.jsonl") > /dev/null ||
        { echo "$1: records differ"; diff <(numbers "$d/$2.jsonl") <(numbers "$d/$3.jsonl") | head; exit 1; }
    cmp -s "$d/$2.st" "$d/$3.st" || { echo "$1: exported anchors differ"; exit 1; }
}

