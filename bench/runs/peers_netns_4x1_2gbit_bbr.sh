#!/usr/bin/env bash
# Long transfers under BBR and CUBIC: 64 MiB all-reduce, 4 hosts x 1 rank, 2 Gbit/s tbf,
# gyre (defaults) and Gloo allreduce_ring each timing 60 ops (about 25 s of continuous
# transfer) and 3 ops, two rounds; the namespaces take the host's congestion control
# when made. Needs root; the host's setting is put back on exit.
# Writes bench/results/peers_netns_4x1_2gbit_bbr/<cc><round>-<ops>/ (BBR_OUT); then
# bench/runs/peers_netns_4x1_2gbit_bbr_summary.py DIR > DIR/summary.txt.
set -u
cd "$(dirname "$0")/../.." || exit 2  # the repository root
source tools/peers_harness.sh  # PEERS_HARNESS, PEERS_BUILD
peers_harness_find || exit 2
base=${BBR_OUT:-bench/results/peers_netns_4x1_2gbit_bbr}
mkdir -p "$base"
base=$(cd "$base" && pwd)
cc_file=/proc/sys/net/ipv4/tcp_congestion_control
orig=$(cat $cc_file)
trap 'echo "$orig" > $cc_file' EXIT
common=(MINB=64M MAXB=64M ITER_BYTES=8G)
for round in 1 2; do
  for cc in bbr cubic; do
    echo $cc > $cc_file
    echo "== $(date +%H:%M:%S) round $round $cc"
    env "${common[@]}" ITERS=60 MIN_ITERS=60 GYRE_ITERS=60 GYRE_PEERS_OUT="$base/$cc$round-60" \
      PEERS="gyre gloo" GLOO_ALGOS=allreduce_ring "$PEERS_RUN_NETNS" 4 2gbit > "$base/$cc$round-60.log" 2>&1
    env "${common[@]}" ITERS=3 MIN_ITERS=3 GYRE_ITERS=3 GYRE_PEERS_OUT="$base/$cc$round-3" \
      PEERS="gyre gloo" GLOO_ALGOS=allreduce_ring "$PEERS_RUN_NETNS" 4 2gbit > "$base/$cc$round-3.log" 2>&1
  done
done
peers_strip_paths "$base"
echo "== $(date +%H:%M:%S) done"
