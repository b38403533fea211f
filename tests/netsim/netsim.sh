#!/bin/bash
# (A copy of the project's shared netsim script, kept in the repo so CI on a clean clone has it.)
# netsim.sh — a fake cluster of hosts in Linux network namespaces, for tests
# that must cross a real network stack. Nothing leaves this machine: every
# address lives inside namespaces created here.
#
# Each host <P>hN has two NICs: mgmt0 (10.<M>.0.N/24) and data0 (10.<D>.0.N/24),
# joined by bridges that live in their own "switch" namespace <P>sw, so the
# root namespace is untouched. Each host gets its own /etc/hosts
# (/etc/netns/<P>hN/hosts) naming nodeN (mgmt) and nodeN-data (data).
#
# Needs root, iproute2, and for `block` iptables. Names are prefixed so that
# several test runs can coexist: set NETSIM_PREFIX (default "ls") and
# NETSIM_NET (second octet base, default 60: mgmt 10.60.0.x, data 10.61.0.x).
# NETSIM_DATA_NICS=K (default 1) gives each host K data NICs: data1 on
# 10.<D+1>.0.N, data2 on 10.<D+2>.0.N, ... each with its own bridge
# (a host with several data networks, for striping tests).
#
# usage:
#   netsim.sh up [N]                 create N hosts (default 3)
#   netsim.sh down                   remove everything with this prefix
#   netsim.sh status
#   netsim.sh exec N cmd...          run cmd inside host N (ip netns exec)
#   netsim.sh shape N IF RATE        egress rate limit (tbf), e.g. shape 2 data0 1gbit
#   netsim.sh unshape N IF
#   netsim.sh block N PORT[:PORT] drop|reject   firewall inbound TCP on host N
#   netsim.sh unblock N
#   netsim.sh hosts N 'LINE'         append a line to host N's /etc/hosts
#   netsim.sh mtu N IF MTU
set -euo pipefail
P=${NETSIM_PREFIX:-ls}
B=${NETSIM_NET:-60}
M=$B; D=$((B + 1))

need_root() { [[ $(id -u) == 0 ]] || { echo "netsim: needs root" >&2; exit 2; }; }
count() { ip netns list | awk '{print $1}' | grep -c "^${P}h[0-9]*$" || true; }

up() {
  need_root
  local n=${1:-3}
  ip netns add "${P}sw"
  ip -n "${P}sw" link set lo up
  local extra=$((${NETSIM_DATA_NICS:-1} - 1)) k
  for br in br-mgmt br-data $(for ((k = 1; k <= extra; ++k)); do echo "br-data$k"; done); do
    ip -n "${P}sw" link add "$br" type bridge
    ip -n "${P}sw" link set "$br" up
  done
  for i in $(seq 1 "$n"); do
    local h=${P}h$i
    ip netns add "$h"
    ip -n "$h" link set lo up
    for net in mgmt data; do
      local sub=$M; [[ $net == data ]] && sub=$D
      ip link add "${net}0" netns "$h" type veth peer name "${net}-h$i" netns "${P}sw"
      ip -n "${P}sw" link set "${net}-h$i" master "br-$net" up
      ip -n "$h" addr add "10.$sub.0.$i/24" dev "${net}0"
      ip -n "$h" link set "${net}0" up
    done
    for ((k = 1; k <= extra; ++k)); do
      ip link add "data$k" netns "$h" type veth peer name "data$k-h$i" netns "${P}sw"
      ip -n "${P}sw" link set "data$k-h$i" master "br-data$k" up
      ip -n "$h" addr add "10.$((D + k)).0.$i/24" dev "data$k"
      ip -n "$h" link set "data$k" up
    done
    mkdir -p "/etc/netns/$h"
    {
      echo "127.0.0.1 localhost"
      for j in $(seq 1 "$n"); do
        echo "10.$M.0.$j node$j"
        echo "10.$D.0.$j node$j-data"
      done
    } >"/etc/netns/$h/hosts"
  done
  echo "netsim: $n hosts up (prefix $P): mgmt 10.$M.0.0/24, data 10.$D.0.0/24" \
    "$( ((extra > 0)) && echo "+ $extra more data NIC(s) on 10.$((D + 1))..$((D + extra)).0.0/24")"
}

down() {
  need_root
  for ns in $(ip netns list | awk '{print $1}' | grep "^${P}h[0-9]*$" || true); do
    # a process still inside keeps the namespace alive: end only what runs there
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  ip netns del "${P}sw" 2>/dev/null || true
  rmdir /etc/netns 2>/dev/null || true
}

status() {
  echo "hosts: $(count)"
  for ns in $(ip netns list | awk '{print $1}' | grep "^${P}h[0-9]*$" | sort || true); do
    echo "== $ns"; ip -n "$ns" -br addr; tc -n "$ns" qdisc show | grep tbf || true
  done
}

cmd=${1:-}; shift || true
case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  status) status ;;
  exec) h=$1; shift; exec ip netns exec "${P}h$h" "$@" ;;
  shape) need_root; tc -n "${P}h$1" qdisc replace dev "$2" root tbf rate "$3" burst 256kb latency 50ms ;;
  unshape) need_root; tc -n "${P}h$1" qdisc del dev "$2" root 2>/dev/null || true ;;
  block)
    need_root
    case "$3" in
      drop) ip netns exec "${P}h$1" iptables -A INPUT -p tcp --dport "$2" -j DROP ;;
      reject) ip netns exec "${P}h$1" iptables -A INPUT -p tcp --dport "$2" -j REJECT --reject-with tcp-reset ;;
      *) echo "netsim: block N PORT drop|reject" >&2; exit 2 ;;
    esac ;;
  unblock) need_root; ip netns exec "${P}h$1" iptables -F INPUT ;;
  hosts) need_root; echo "$2" >>"/etc/netns/${P}h$1/hosts" ;;
  mtu) need_root; ip -n "${P}h$1" link set "$2" mtu "$3" ;;
  *) sed -n '2,30p' "$0"; exit 2 ;;
esac
