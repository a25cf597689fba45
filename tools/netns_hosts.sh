# shellcheck shell=bash
# Namespaced "hosts" on shaped links, sourced by tools/netns_bench.sh and
# tools/ddp_netns_bench.sh: H network namespaces gyb0.. (10.216.0.1..H) on one bridge
# gybr0, each host link a veth shaped by tbf in both directions at RATE (burst max(128
# KiB, 2 ms of RATE), as the peers' harness shapes its links; TBF_LATENCY, default 50ms).
# NETNS_TAG (default gyb, at most 8 characters) and NETNS_NET (default 10.216.0) name
# another set, so that a second run does not tear down the first's (the suite's
# sim_validation uses the defaults). NETNS_CC (e.g. cubic) sets each namespace's TCP
# congestion control; unset, the namespaces take the host's when made (docs/tcp_links.md:
# BBR's drains cost long runs 1.5-4 points of these links). Root only (ip netns, tc).
#
#   netns_hosts_up H RATE     sets NETNS_TBF (the qdisc's settings), NETNS_NET and
#                             NETNS_CC_USED (host 0's congestion control, for headers)
#   netns_hosts_down H        bounded wait until the links are gone
#   netns_hosts_sent H        "# host I sent N bytes" per host (0: nothing crossed)
NETNS_TAG=${NETNS_TAG:-gyb} NETNS_NET=${NETNS_NET:-10.216.0}
NETNS_BR=${NETNS_TAG}br0

netns_hosts_down() {
  local h=$1 i t
  for ((i = 0; i < h; i++)); do
    ip link del "${NETNS_TAG}h$i" 2>/dev/null || true  # the pair with it
    ip netns del "${NETNS_TAG}$i" 2>/dev/null || true
  done
  ip link del "$NETNS_BR" 2>/dev/null || true
  # A namespace's links go away after `ip netns del` returns: wait (bounded) so that a run
  # started right after this one does not find them ("RTNETLINK answers: File exists").
  for ((t = 0; t < 100; t++)); do
    ip -br link show 2>/dev/null | grep -qE "^(${NETNS_TAG}h[0-9]+|$NETNS_BR)[@ ]" || break
    sleep 0.05
  done
}

netns_hosts_up() {
  local h=$1 rate=$2 i t burst
  if [[ -n ${NETNS_CC:-} ]] &&
    ! grep -qw -- "$NETNS_CC" /proc/sys/net/ipv4/tcp_available_congestion_control; then
    echo "netns_hosts: NETNS_CC=$NETNS_CC is not available here (available:" \
      "$(cat /proc/sys/net/ipv4/tcp_available_congestion_control); modprobe tcp_$NETNS_CC?)" >&2
    return 2
  fi
  # A namespace other than the host's may only take what the host allows (the kernel
  # answers anything else with EPERM, which `echo` reports as an I/O error).
  if [[ -n ${NETNS_CC:-} ]] &&
    ! grep -qw -- "$NETNS_CC" /proc/sys/net/ipv4/tcp_allowed_congestion_control; then
    echo "netns_hosts: NETNS_CC=$NETNS_CC is available but not allowed in a namespace" \
      "(net.ipv4.tcp_allowed_congestion_control: $(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control));" \
      "as root on the host: sysctl -w net.ipv4.tcp_allowed_congestion_control=\"$(
        cat /proc/sys/net/ipv4/tcp_allowed_congestion_control) $NETNS_CC\"" >&2
    return 2
  fi
  netns_hosts_down "$h"
  burst=$(awk -v r="${rate,,}" 'BEGIN {
    m = 1; if (r ~ /gbit$/) m = 1e9; else if (r ~ /mbit$/) m = 1e6; else if (r ~ /kbit$/) m = 1e3
    x = (r + 0) * m / 8 * 0.002; if (x < 131072) x = 131072; printf "%d", x }')
  NETNS_TBF="rate $rate burst $burst latency ${TBF_LATENCY:-50ms}"
  ip link add "$NETNS_BR" type bridge stp_state 0 forward_delay 0
  ip link set "$NETNS_BR" up
  for ((i = 0; i < h; i++)); do
    ip netns add "${NETNS_TAG}$i"
    ip link add "${NETNS_TAG}h$i" type veth peer name eth0 netns "${NETNS_TAG}$i"
    ip link set "${NETNS_TAG}h$i" master "$NETNS_BR" up
    ip -n "${NETNS_TAG}$i" link set lo up
    ip -n "${NETNS_TAG}$i" addr add "$NETNS_NET.$((i + 1))"/24 dev eth0
    ip -n "${NETNS_TAG}$i" link set eth0 up
    # shellcheck disable=SC2086  # the settings are words
    ip netns exec "${NETNS_TAG}$i" tc qdisc add dev eth0 root tbf $NETNS_TBF
    if [[ -n ${NETNS_CC:-} ]]; then
      # /proc/sys/net is the reading process's namespace's (no sysctl: procps may be absent)
      # shellcheck disable=SC2016  # $1 is the inner shell's
      if ! ip netns exec "${NETNS_TAG}$i" sh -c \
        'echo "$1" > /proc/sys/net/ipv4/tcp_congestion_control' sh "$NETNS_CC"; then
        echo "netns_hosts: namespace ${NETNS_TAG}$i refused NETNS_CC=$NETNS_CC" >&2
        netns_hosts_down "$h"
        return 2
      fi
    fi
    # shellcheck disable=SC2086
    tc qdisc add dev "${NETNS_TAG}h$i" root tbf $NETNS_TBF
  done
  # shellcheck disable=SC2034  # read by the scripts that source this file
  NETNS_CC_USED=$(ip netns exec "${NETNS_TAG}0" cat /proc/sys/net/ipv4/tcp_congestion_control)
  for ((t = 0; t < 50; t++)); do
    (( $(bridge link show 2>/dev/null | grep -c "${NETNS_TAG}h.*state forwarding") == h )) && break
    sleep 0.1
  done
}

netns_hosts_sent() {
  local h=$1 i
  for ((i = 0; i < h; i++)); do
    echo "# host $i sent $(ip netns exec "${NETNS_TAG}$i" tc -s qdisc show dev eth0 |
      awk '/Sent/ {print $2; exit}') bytes"
  done
}
