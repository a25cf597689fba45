#!/usr/bin/env bash
# Measures gyre's all-reduce between namespaced "hosts" on shaped links, as on a cluster:
# H network namespaces (gyb0..) on one bridge, each host link (veth) shaped by tbf in both
# directions at RATE, L ranks per host (shm inside a host, tcp across), and
# `gyre-bench --compare-algos` (ring, tree, hier, auto timed in turn, side by side in one
# job; see bench/compare_algos.h), repeated REPEAT times. Root only (ip netns, tc).
#
#   tools/netns_bench.sh H L RATE [gyre-bench args...]
#   e.g. tools/netns_bench.sh 2 4 1gbit -b 1M -e 64M -f 4 -n 6 -w 1 --rounds 3
#
# Env: BIN (directory of gyrerun and gyre-bench, default build/bin), REPEAT (1),
# EXTRA_ENV (e.g. "GYRE_SLOTS=16", passed to every rank), TBF_LATENCY (50ms), RUN_TIMEOUT
# (600 s per run). Prints rank 0's lines, then the bytes each host's qdisc sent (0 means
# the traffic did not cross the links). The namespaces are removed on exit.
set -euo pipefail
H=${1:?hosts} L=${2:?ranks per host} RATE=${3:?rate, e.g. 2gbit}
shift 3
BIN=${BIN:-build/bin} REPEAT=${REPEAT:-1} RUN_TIMEOUT=${RUN_TIMEOUT:-600}
BR=gybr0 NET=10.216.0
[[ $EUID -eq 0 ]] || { echo "netns_bench: needs root (ip netns, tc)" >&2; exit 2; }
[[ -x $BIN/gyrerun && -x $BIN/gyre-bench ]] || { echo "netns_bench: no gyrerun/gyre-bench in $BIN" >&2; exit 2; }
BIN=$(cd "$BIN" && pwd)

down() {
  for ((i = 0; i < H; i++)); do
    ip link del gybh$i 2>/dev/null || true  # the pair with it
    ip netns del gyb$i 2>/dev/null || true
  done
  ip link del $BR 2>/dev/null || true
  # A namespace's links go away after `ip netns del` returns: wait (bounded) so that a run
  # started right after this one does not find them ("RTNETLINK answers: File exists").
  for ((t = 0; t < 100; t++)); do
    ip -br link show 2>/dev/null | grep -qE "^(gybh[0-9]+|$BR)[@ ]" || break
    sleep 0.05
  done
}
trap down EXIT
down
# burst: max(128 KiB, 2 ms of RATE), as the peers' harness shapes its links.
burst=$(awk -v r="${RATE,,}" 'BEGIN {
  m = 1; if (r ~ /gbit$/) m = 1e9; else if (r ~ /mbit$/) m = 1e6; else if (r ~ /kbit$/) m = 1e3
  x = (r + 0) * m / 8 * 0.002; if (x < 131072) x = 131072; printf "%d", x }')
TBF="rate $RATE burst $burst latency ${TBF_LATENCY:-50ms}"
ip link add $BR type bridge stp_state 0 forward_delay 0
ip link set $BR up
for ((i = 0; i < H; i++)); do
  ip netns add gyb$i
  ip link add gybh$i type veth peer name eth0 netns gyb$i
  ip link set gybh$i master $BR up
  ip -n gyb$i link set lo up
  ip -n gyb$i addr add $NET.$((i + 1))/24 dev eth0
  ip -n gyb$i link set eth0 up
  ip netns exec gyb$i tc qdisc add dev eth0 root tbf $TBF
  tc qdisc add dev gybh$i root tbf $TBF
done
for ((t = 0; t < 50; t++)); do
  (( $(bridge link show 2>/dev/null | grep -c "gybh.*state forwarding") == H )) && break
  sleep 0.1
done
echo "# netns_bench: $H hosts x $L ranks, tbf $TBF both directions, ${EXTRA_ENV:-default settings}"

port=29600
for ((r = 1; r <= REPEAT; r++)); do
  echo "# run $r of $REPEAT"
  pids=()
  out=$(mktemp)
  for ((i = H - 1; i >= 0; i--)); do
    log=/dev/null; (( i == 0 )) && log=$out
    timeout -k 10 "$RUN_TIMEOUT" ip netns exec gyb$i env ${EXTRA_ENV:-} "$BIN/gyrerun" \
      --nnodes "$H" --node-rank "$i" --nproc-per-node "$L" --master-addr $NET.1 \
      --master-port $port "$BIN/gyre-bench" "$@" >"$log" 2>"$out.err$i" &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  grep -v '^$' "$out" || true
  if (( rc != 0 )); then echo "# run $r FAILED"; tail -n 5 "$out".err*; fi
  rm -f "$out" "$out".err*
  port=$((port + 1))
done
for ((i = 0; i < H; i++)); do
  echo "# host $i sent $(ip netns exec gyb$i tc -s qdisc show dev eth0 | awk '/Sent/ {print $2}') bytes"
done
