#!/bin/bash
# teardown.sh -- stop wirelay (if WIRELAY_DIR or this directory holds a wirelay.pid), print its
# stats, and delete namespaces ${NETLAB_NS}sw and ${NETLAB_NS}<digits> (veths, bridge and TAPs go
# with them). Only this prefix is touched. Adapted from shared/netlab/teardown{,-tap}.sh.
NS=${NETLAB_NS:-mpi}
DIR=${WIRELAY_DIR:-"$(cd "$(dirname "$0")" && pwd)"}
if [ -f "$DIR/wirelay.pid" ]; then
  pid=$(cat "$DIR/wirelay.pid")
  if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
    for k in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$DIR/wirelay.pid"
  cat "$DIR/wirelay.log" 2>/dev/null
fi
for ns in $(ip netns list | awk '{print $1}' | grep -E "^${NS}(sw|[0-9]+)\$"); do ip netns del "$ns"; done
exit 0
