#!/usr/bin/env bash
# One run of the peers' harness (tools/peers_harness.sh: Gloo, torch's gloo and Open MPI
# beside gyre, all-reduce in place; the harness is not part of gyre) into
# bench/results/NAME/: every table and run.log (the harness's output, the load before and
# after). From anywhere in the checkout, after tools/build.sh:
#   bench/runs/peers.sh NAME netns HOSTS RATE   # HOSTS namespaced hosts x 1 rank, tbf links (root)
#   bench/runs/peers.sh NAME host RANKS         # RANKS on one host: loopback tcp and shm
# The harness's settings pass through the environment (PEERS, GLOO_ALGOS, MINB, MAXB,
# ITERS, MIN_ITERS, ITER_BYTES, GYRE_ITERS). Absolute paths in what it writes become
# $PEERS_HARNESS/, $PEERS_BUILD/ or paths relative to the checkout.
set -euo pipefail
cd "$(dirname "$0")/../.."  # the repository root
source tools/peers_harness.sh
peers_harness_find || exit 2
if [[ $# -lt 3 || ! $2 =~ ^(netns|host)$ ]]; then
  sed -n '6,7p' "$0" >&2
  exit 2
fi
name=$1 kind=$2
shift 2
run=$PEERS_RUN_NETNS
[[ $kind == host ]] && run=$PEERS_HARNESS/run_peers.sh
out=bench/results/$name
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
{
  echo "before: $(date -u +%FT%TZ) $(uptime)"
  rc=0
  GYRE_PEERS_OUT=$tmp "$run" "$@" 2>&1 || rc=$?
  echo "rc=$rc"
  echo "after: $(date -u +%FT%TZ) $(uptime)"
} | tee "$tmp/run.log"
cp "$tmp"/results/*.txt "$tmp/run.log" "$out"/
peers_strip_paths "$out" "$tmp"
