#!/usr/bin/env bash
# DDP MLP on 2 namespaced hosts x 4 ranks at 1 Gbit/s, each host launched by torchrun
# (unbound) and by gyrerun --bind core, alternating round by round; gyre, gloo, local and
# sync in each. Root; the torch 2 venv and a gyre_torch build (tools/ddp_netns_bench.sh).
#   bench/runs/ddp_netns_bind.sh [OUT_DIR] [ROUNDS]   (default bench/results/ddp_netns_bind, 3)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/bench/results/ddp_netns_bind}
mkdir -p "$out"
rounds=${2:-3}
for ((r = 1; r <= rounds; r++)); do
  for bind in "" core; do
    BIND=$bind BACKENDS="gyre gloo local sync" ROUNDS=1 "$root/tools/ddp_netns_bench.sh" 2 4 1gbit \
      --model mlp --steps 100 > "$out/r${r}_${bind:-torchrun}.txt" 2>&1
  done
done
# ddp_netns_bench.sh's header names the python it ran: no absolute paths in the results.
sed -i -e "s|$HOME/|~/|g" -e "s|$root/||g" "$out"/r*_*.txt
