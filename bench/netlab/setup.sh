#!/bin/bash
# setup.sh N [RATE] -- N host namespaces ${NETLAB_NS}0..${NETLAB_NS}{N-1} (NETLAB_NS defaults to "mpi")
# on a bridge in namespace ${NETLAB_NS}sw. Addresses 10.77.0.(10+i)/24 exist only inside these
# namespaces (nothing in the root namespace, no route out of the machine). RATE (e.g. 1gbit,
# 100mbit) shapes each host's veth in both directions with tbf (this kernel has no netem).
# Adapted from shared/netlab/setup.sh (namespace prefix added).
set -e
N=${1:-2}; RATE=${2:-}; NS=${NETLAB_NS:-mpi}
ip netns add ${NS}sw
ip -n ${NS}sw link set lo up
ip -n ${NS}sw link add br0 type bridge
ip -n ${NS}sw link set br0 up
for i in $(seq 0 $((N-1))); do
  ip netns add $NS$i
  ip -n $NS$i link set lo up
  ip link add ve0 netns $NS$i type veth peer name sw$i netns ${NS}sw
  ip -n $NS$i addr add 10.77.0.$((10+i))/24 dev ve0
  ip -n $NS$i link set ve0 up
  ip -n ${NS}sw link set sw$i master br0
  ip -n ${NS}sw link set sw$i up
  if [ -n "$RATE" ]; then
    # host upload (egress of ve0) and host download (egress of the switch port)
    ip netns exec $NS$i tc qdisc add dev ve0 root tbf rate $RATE burst 256kb latency 100ms
    ip netns exec ${NS}sw tc qdisc add dev sw$i root tbf rate $RATE burst 256kb latency 100ms
  fi
done
