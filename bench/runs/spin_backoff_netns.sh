#!/usr/bin/env bash
# The spin's backoff (transport/spin_pause.h): gyre built from the commit before (OLD_BIN, its
# build/bin) against this checkout's build, with Gloo's allreduce_ring beside, 4 hosts x 1
# rank at 2 Gbit/s, 16 B-64 MiB, 20 ops a size; three rounds, each quiet and beside two
# busy loops (nice 19). Under CUBIC (set for the run through /proc/sys, the host's put back
# on exit) so that BBR's drains do not decide the long sizes. Needs root and the peers'
# harness (tools/peers_harness.sh). Writes bench/results/spin_backoff/netns/ (SPIN_OUT);
# tables: bench/runs/spin_backoff_netns_summary.py [DIR]. One host: spin_backoff_host.sh.
set -u
cd "$(dirname "$0")/../.." || exit 2  # the repository root
source tools/peers_harness.sh
peers_harness_find || exit 2
[[ -x ${OLD_BIN:-}/gyre-bench ]] || { echo "spin_backoff_netns.sh: set OLD_BIN to the build/bin of the commit before" >&2; exit 2; }
NEW_BIN=$GYRE_BIN
base=${SPIN_OUT:-bench/results/spin_backoff/netns}
mkdir -p "$base"
base=$(cd "$base" && pwd)
orig=$(cat /proc/sys/net/ipv4/tcp_congestion_control)
trap 'echo "$orig" > /proc/sys/net/ipv4/tcp_congestion_control; busy_loops_stop' EXIT
echo cubic > /proc/sys/net/ipv4/tcp_congestion_control
common=(MINB=16 MAXB=64M FACTOR=4 ITERS=20 MIN_ITERS=20 ITER_BYTES=2G GYRE_ITERS=20)
for round in 1 2 3; do
  for mode in quiet hogs; do
    [ $mode = hogs ] && busy_loops_start 2
    for v in old new gloo; do
      echo "== $(date +%H:%M:%S) round $round $mode $v (load $(cut -d' ' -f1 /proc/loadavg))"
      case $v in
        old) vars=(GYRE_BIN="$OLD_BIN" PEERS=gyre) ;;
        new) vars=(GYRE_BIN="$NEW_BIN" PEERS=gyre) ;;
        gloo) vars=(PEERS=gloo GLOO_ALGOS=allreduce_ring) ;;
      esac
      env "${common[@]}" "${vars[@]}" GYRE_PEERS_OUT="$base/$mode$round-$v" \
        "$PEERS_RUN_NETNS" 4 2gbit > "$base/$mode$round-$v.log" 2>&1
    done
    busy_loops_stop
  done
done
peers_strip_paths "$base"
echo "== $(date +%H:%M:%S) done"
