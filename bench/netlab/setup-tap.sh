#!/bin/bash
# setup-tap.sh N RATE_bps DELAY_us [MTU] -- N namespaces ${NETLAB_NS}0..${NETLAB_NS}{N-1}
# (NETLAB_NS defaults to "mpi"), each with a TAP "tp0" (10.77.0.(10+i)/24) attached to the
# userspace wire emulator wirelay (per-link rate + one-way delay). WIRELAY_DIR (default: this
# directory) is where the wirelay binary is built and where wirelay.pid / wirelay.log go.
# Adapted from shared/netlab/setup-tap.sh (namespace prefix, build/run directory added).
set -e
N=$1; RATE=$2; DELAY=$3; MTU=${4:-9000}; NS=${NETLAB_NS:-mpi}
SRC="$(cd "$(dirname "$0")" && pwd)"; DIR=${WIRELAY_DIR:-$SRC}
mkdir -p "$DIR"
[ -x "$DIR/wirelay" ] || cc -O2 -o "$DIR/wirelay" "$SRC/wirelay.c"
NSL=""
for i in $(seq 0 $((N-1))); do ip netns add $NS$i; ip -n $NS$i link set lo up; NSL="$NSL $NS$i"; done
"$DIR/wirelay" -r $RATE -d $DELAY -t 3600 $NSL > "$DIR/wirelay.log" 2>&1 &
echo $! > "$DIR/wirelay.pid"
for k in $(seq 1 50); do ip -n $NS$((N-1)) link show tp0 >/dev/null 2>&1 && break; sleep 0.1; done
for i in $(seq 0 $((N-1))); do
  ip -n $NS$i link set tp0 mtu $MTU
  ip -n $NS$i addr add 10.77.0.$((10+i))/24 dev tp0
  ip -n $NS$i link set tp0 up
done
