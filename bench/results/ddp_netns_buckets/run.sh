#!/usr/bin/env bash
# DDP MLP on 2 namespaced hosts x 4 ranks at 1 Gbit/s, torchrun on each host, with
# torch's default buckets (the 2.1 MB of gradients in one) and with --bucket-cap-mb 0.25
# (two: 0.54 MB, whose exchange can overlap the first layer's backward, then 1.6 MB),
# alternating round by round; gyre, gloo, local and sync in each. Root; the torch 2 venv
# and a gyre_torch build (tools/ddp_netns_bench.sh).
#   bench/results/ddp_netns_buckets/run.sh [OUT_DIR] [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=$(cd "${1:-$here}" && pwd)
rounds=${2:-2}
cd "$root"
for ((r = 1; r <= rounds; r++)); do
  for cap in 0 0.25; do
    BACKENDS="gyre gloo local sync" ROUNDS=1 tools/ddp_netns_bench.sh 2 4 1gbit \
      --model mlp --steps 100 --bucket-cap-mb $cap > "$out/r${r}_cap${cap}.txt" 2>&1
  done
done
