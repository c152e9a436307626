#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces PREFIX-0 and PREFIX-1 joined by a veth pair (iproute2), for
# multi-node tests over a real network stack (tests/multirank/check_netns_ddp.py, docs/reliability.md).
#
#   scripts/netns.sh up                  makes the namespaces; node i gets 10.231.0.(i+1)/24 on PREFIX-vi, and lo
#   scripts/netns.sh down                removes them (and the veth pair with them); no error when they are gone
#   scripts/netns.sh netem ARGS...       applies `tc qdisc ... netem ARGS` (e.g. delay 5ms loss 1%) on both ends;
#                                        fails, saying so, where the kernel has no netem qdisc
#   scripts/netns.sh netem off           removes it
#   scripts/netns.sh rate RATE           limits each end's sending rate with the tbf qdisc (RATE as tc writes it:
#                                        100mbit, 1gbit); kernels without netem have tbf. `rate off` removes it
#   scripts/netns.sh loss PERCENT        drops PERCENT% of the packets leaving each end, at random (nftables in the
#                                        namespaces: loss without netem, for kernels that lack it); `loss off` removes it
#   scripts/netns.sh dropped             prints how many packets the loss rules dropped (both ends)
#   scripts/netns.sh addr I              prints node I's address
#   scripts/netns.sh exec I CMD...       runs CMD in node I's namespace
#   scripts/netns.sh check               exits 0 when namespaces can be made here, else prints why and exits 1
#
# NETNS_PREFIX (default strata) names the namespaces and the veth ends (at most 12 characters), so several tests
# can each have their own pair. Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN). Only the namespaces' own addresses are
# used; nothing is routed outside them.
set -euo pipefail
prefix=${NETNS_PREFIX:-strata}
ns=("$prefix-0" "$prefix-1")
veth=("$prefix-v0" "$prefix-v1")
addrs=(10.231.0.1 10.231.0.2)

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ ${#prefix} -le 12 ] || { echo "NETNS_PREFIX '$prefix' is longer than 12 characters (interface names)" >&2; exit 2; }

down() {
  local n
  for n in "${ns[@]}"; do
    if ip netns list 2> /dev/null | grep -qw -- "$n"; then ip netns del "$n"; fi
  done
  # A veth end left in the root namespace by an interrupted `up`.
  ip link del "${veth[0]}" 2> /dev/null || true
}

up() {
  down
  # Undo a half-made pair on failure.
  trap 'down' ERR
  local i
  for i in 0 1; do ip netns add "${ns[$i]}"; done
  ip link add "${veth[0]}" type veth peer name "${veth[1]}"
  for i in 0 1; do
    ip link set "${veth[$i]}" netns "${ns[$i]}"
    ip -n "${ns[$i]}" addr add "${addrs[$i]}/24" dev "${veth[$i]}"
    ip -n "${ns[$i]}" link set "${veth[$i]}" up
    ip -n "${ns[$i]}" link set lo up
  done
  trap - ERR
  # The link carries traffic once both ends report LOWER_UP.
  for _ in $(seq 50); do
    if ip -n "${ns[0]}" link show "${veth[0]}" | grep -q LOWER_UP &&
       ip -n "${ns[1]}" link show "${veth[1]}" | grep -q LOWER_UP; then
      return 0
    fi
    sleep 0.1
  done
  echo "netns: the link ${veth[0]} - ${veth[1]} did not come up" >&2
  down
  exit 1
}

check() {
  command -v ip > /dev/null || { echo "iproute2's ip is not installed"; exit 1; }
  [ "$(id -u)" -eq 0 ] || { echo "network namespaces need root (running as uid $(id -u))"; exit 1; }
  local probe="$prefix-probe"
  if ! err=$(ip netns add "$probe" 2>&1); then echo "ip netns add failed: $err"; exit 1; fi
  ip netns del "$probe"
}

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
case "$cmd" in
  up) up ;;
  down) down ;;
  check) check ;;
  addr) echo "${addrs[$1]}" ;;
  exec) i=$1; shift; exec ip netns exec "${ns[$i]}" "$@" ;;
  netem)
    [ $# -ge 1 ] || usage
    for i in 0 1; do
      if [ "$1" = off ]; then
        ip netns exec "${ns[$i]}" tc qdisc del dev "${veth[$i]}" root 2> /dev/null || true
      elif ! err=$(ip netns exec "${ns[$i]}" tc qdisc replace dev "${veth[$i]}" root netem "$@" 2>&1); then
        echo "tc netem $* on ${veth[$i]} failed: $err (this kernel has no netem qdisc: CONFIG_NET_SCH_NETEM)" >&2
        exit 1
      fi
    done
    ;;
  rate)
    [ $# -eq 1 ] || usage
    for i in 0 1; do
      if [ "$1" = off ]; then
        ip netns exec "${ns[$i]}" tc qdisc del dev "${veth[$i]}" root 2> /dev/null || true
      # A bucket of 1 ms at the rate (at least 64 KiB, above one TSO burst) and 50 ms of queue: a link's shape,
      # not a policer's drops.
      elif ! err=$(ip netns exec "${ns[$i]}" tc qdisc replace dev "${veth[$i]}" root tbf rate "$1" burst 64kb \
          latency 50ms 2>&1); then
        echo "tc tbf rate $1 on ${veth[$i]} failed: $err (this kernel has no tbf qdisc: CONFIG_NET_SCH_TBF)" >&2
        exit 1
      fi
    done
    ;;
  loss)
    [ $# -eq 1 ] || usage
    command -v nft > /dev/null || { echo "nft is not installed (Debian's nftables)" >&2; exit 1; }
    for i in 0 1; do
      ip netns exec "${ns[$i]}" nft delete table inet strata_loss 2> /dev/null || true
      [ "$1" = off ] && continue
      ip netns exec "${ns[$i]}" nft add table inet strata_loss
      ip netns exec "${ns[$i]}" nft add chain inet strata_loss out '{ type filter hook output priority 0; }'
      ip netns exec "${ns[$i]}" nft add rule inet strata_loss out oifname "${veth[$i]}" \
        numgen random mod 100 '<' "$1" counter drop
    done
    ;;
  dropped)
    total=0
    for i in 0 1; do
      n=$(ip netns exec "${ns[$i]}" nft list table inet strata_loss 2> /dev/null |
          sed -nE 's/.*counter packets ([0-9]+).*/\1/p' | head -1)
      total=$((total + ${n:-0}))
    done
    echo "$total"
    ;;
  *) usage ;;
esac
