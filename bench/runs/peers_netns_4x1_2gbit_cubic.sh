#!/usr/bin/env bash
# The equal-run-length comparison (bench/runs/peers_netns_4x1_2gbit_fair.sh) under CUBIC
# instead of the host's BBR, gyre with its defaults only, Open MPI (47-52% there) left
# out. Needs root (sysctl; the namespaces take the host's setting when made); the host's
# setting is put back on exit. Writes bench/results/peers_netns_4x1_2gbit_cubic/ (CUBIC_OUT);
# tables: bench/runs/peers_netns_4x1_2gbit_fair_summary.py DIR > DIR/summary.txt.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.." || exit 2  # the repository root
orig=$(cat /proc/sys/net/ipv4/tcp_congestion_control)
trap 'echo "$orig" > /proc/sys/net/ipv4/tcp_congestion_control' EXIT
echo cubic > /proc/sys/net/ipv4/tcp_congestion_control
FAIR_OUT=${CUBIC_OUT:-bench/results/peers_netns_4x1_2gbit_cubic} FAIR_PEERS="gyre gloo torch" \
  FAIR_ALT_SLOT='' "$here/peers_netns_4x1_2gbit_fair.sh"
