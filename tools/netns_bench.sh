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
# EXTRA_ENV (e.g. "GYRE_SLOTS=16", passed to every rank), RUN_TIMEOUT (600 s per run),
# TBF_LATENCY, NETNS_CC and the rest of tools/netns_hosts.sh's settings. Prints rank 0's
# lines, then the bytes each host's qdisc sent (0 means the traffic did not cross the
# links). The namespaces are removed on exit.
set -euo pipefail
H=${1:?hosts} L=${2:?ranks per host} RATE=${3:?rate, e.g. 2gbit}
shift 3
BIN=${BIN:-build/bin} REPEAT=${REPEAT:-1} RUN_TIMEOUT=${RUN_TIMEOUT:-600}
[[ $EUID -eq 0 ]] || { echo "netns_bench: needs root (ip netns, tc)" >&2; exit 2; }
[[ -x $BIN/gyrerun && -x $BIN/gyre-bench ]] || { echo "netns_bench: no gyrerun/gyre-bench in $BIN" >&2; exit 2; }
BIN=$(cd "$BIN" && pwd)

# shellcheck source=tools/netns_hosts.sh
source "$(dirname "$0")/netns_hosts.sh"
trap 'netns_hosts_down "$H"' EXIT
netns_hosts_up "$H" "$RATE"
echo "# netns_bench: $H hosts x $L ranks, tbf $NETNS_TBF both directions, tcp congestion control $NETNS_CC_USED, ${EXTRA_ENV:-default settings}"

port=29600
for ((r = 1; r <= REPEAT; r++)); do
  echo "# run $r of $REPEAT"
  pids=()
  out=$(mktemp)
  for ((i = H - 1; i >= 0; i--)); do
    log=/dev/null; (( i == 0 )) && log=$out
    timeout -k 10 "$RUN_TIMEOUT" ip netns exec "${NETNS_TAG}$i" env ${EXTRA_ENV:-} "$BIN/gyrerun" \
      --nnodes "$H" --node-rank "$i" --nproc-per-node "$L" --master-addr $NETNS_NET.1 \
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
netns_hosts_sent "$H"
