#!/usr/bin/env bash
# GYRE_TCP_CONGESTION under the host's BBR: 64 MiB all-reduce, 4 hosts x 1 rank, 2 Gbit/s
# tbf links (tools/netns_bench.sh; the namespaces take the host's congestion control),
# gyre-bench timing 60 ops out of place then 60 in place (about 25 s of steady transfer
# each), gyre's defaults against GYRE_TCP_CONGESTION=cubic, alternating, three rounds.
# Needs root. Writes bench/results/tcp_congestion_4x1_2gbit/round<R>-<default|cubic>.txt
# (CC_OUT); then bench/runs/tcp_congestion_4x1_2gbit_summary.py > DIR/summary.txt.
set -eu
cd "$(dirname "$0")/../.."  # the repository root
out=${CC_OUT:-bench/results/tcp_congestion_4x1_2gbit}
mkdir -p "$out"
for round in 1 2 3; do
  for setting in default cubic; do
    extra=""
    [[ $setting == cubic ]] && extra="GYRE_TCP_CONGESTION=cubic"
    echo "== $(date -u +%H:%M:%S) round $round $setting"
    EXTRA_ENV=$extra tools/netns_bench.sh 4 1 2gbit -b 64M -e 64M -n 60 -w 2 \
      > "$out/round$round-$setting.txt" 2>&1
  done
done
echo "== $(date -u +%H:%M:%S) done"
