#!/usr/bin/env bash
# Equal run lengths: every peer and gyre time 20 ops at every size (4-64 MiB), 4 hosts x 1
# rank, 2 Gbit/s tbf links; three rounds, each quiet and beside two busy loops (nice 19).
# gyre with its defaults (512 KiB slots where every pipe is tcp) and with GYRE_SLOT_BYTES=128K.
#   bench/runs/peers_netns_4x1_2gbit_fair.sh          (root; from anywhere in the checkout)
# Writes bench/results/peers_netns_4x1_2gbit_fair/<quiet|hogs><round>-<def|128k>/ and a log
# per run; then bench/runs/peers_netns_4x1_2gbit_fair_summary.py DIR > DIR/summary.txt.
# FAIR_OUT (output folder), FAIR_PEERS ("gyre gloo torch mpi_tcp"), FAIR_ALT_SLOT (128K; empty:
# no second gyre run): bench/runs/peers_netns_4x1_2gbit_cubic.sh runs this with other values.
# Needs the peers' harness (tools/peers_harness.sh: PEERS_HARNESS, PEERS_BUILD).
set -u
cd "$(dirname "$0")/../.." || exit 2  # the repository root
source tools/peers_harness.sh
peers_harness_find || exit 2
base=${FAIR_OUT:-bench/results/peers_netns_4x1_2gbit_fair}
mkdir -p "$base"
base=$(cd "$base" && pwd)
peers=${FAIR_PEERS-gyre gloo torch mpi_tcp}
alt=${FAIR_ALT_SLOT-128K}
common=(MINB=4M MAXB=64M ITERS=20 MIN_ITERS=20 ITER_BYTES=2G GYRE_ITERS=20)
trap busy_loops_stop EXIT
for round in 1 2 3; do
  for mode in quiet hogs; do
    [ $mode = hogs ] && busy_loops_start 2
    echo "== $(date +%H:%M:%S) round $round $mode (load $(cut -d' ' -f1 /proc/loadavg))"
    env "${common[@]}" GYRE_PEERS_OUT="$base/$mode$round-def" PEERS="$peers" \
      GLOO_ALGOS="allreduce_ring ring_chunked" "$PEERS_RUN_NETNS" 4 2gbit > "$base/$mode$round-def.log" 2>&1
    if [ -n "$alt" ]; then
      env "${common[@]}" GYRE_PEERS_OUT="$base/$mode$round-${alt,,}" GYRE_SLOT_BYTES=$alt PEERS="gyre" \
        "$PEERS_RUN_NETNS" 4 2gbit > "$base/$mode$round-${alt,,}.log" 2>&1
    fi
    busy_loops_stop
  done
done
peers_strip_paths "$base"
echo "== $(date +%H:%M:%S) done"
