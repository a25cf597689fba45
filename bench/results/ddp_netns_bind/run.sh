#!/usr/bin/env bash
# DDP MLP on 2 namespaced hosts x 4 ranks at 1 Gbit/s, each host launched by torchrun
# (unbound) and by gyrerun --bind core, alternating round by round; gyre, gloo, local and
# sync in each. Root; the torch 2 venv and a gyre_torch build (tools/ddp_netns_bench.sh).
#   bench/results/ddp_netns_bind/run.sh [OUT_DIR] [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${1:-$here}
rounds=${2:-3}
for ((r = 1; r <= rounds; r++)); do
  for bind in "" core; do
    BIND=$bind BACKENDS="gyre gloo local sync" ROUNDS=1 "$root/tools/ddp_netns_bench.sh" 2 4 1gbit \
      --model mlp --steps 100 > "$out/r${r}_${bind:-torchrun}.txt" 2>&1
  done
done
