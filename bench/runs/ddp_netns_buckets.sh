#!/usr/bin/env bash
# DDP MLP on 2 namespaced hosts x 4 ranks at 1 Gbit/s, torchrun on each host, with
# torch's default buckets (the 2.1 MB of gradients in one) and with --bucket-cap-mb 0.25
# (two: 0.54 MB, whose exchange can overlap the first layer's backward, then 1.6 MB),
# alternating round by round; gyre, gloo, local and sync in each. Root; the torch 2 venv
# and a gyre_torch build (tools/ddp_netns_bench.sh).
#   bench/runs/ddp_netns_buckets.sh [OUT_DIR] [ROUNDS]   (default bench/results/ddp_netns_buckets, 2)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/bench/results/ddp_netns_buckets}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rounds=${2:-2}
cd "$root"
for ((r = 1; r <= rounds; r++)); do
  for cap in 0 0.25; do
    BACKENDS="gyre gloo local sync" ROUNDS=1 tools/ddp_netns_bench.sh 2 4 1gbit \
      --model mlp --steps 100 --bucket-cap-mb $cap > "$out/r${r}_cap${cap}.txt" 2>&1
  done
done
# ddp_netns_bench.sh's header names the python it ran: no absolute paths in the results.
sed -i -e "s|$HOME/|~/|g" -e "s|$root/||g" "$out"/r*_*.txt
