#!/usr/bin/env bash
# The cost of the flight recorder and the timeline (docs/observability.md, "Measured
# cost"): 4-rank gyre-bench all-reduce at 8 B and 1 MiB, configurations alternated round
# by round (the order rotating) so that load from other jobs falls on all of them:
#   base      a build without them (BASE_BIN, e.g. a build of the parent commit; optional)
#   off       GYRE_TRACE_BUFFER=0
#   recorder  the default (64 entries, no GYRE_TRACE_DIR)
#   timeline  the default plus GYRE_TIMELINE
# Prints one line per run: round config size out-of-place-us in-place-us.
# RANKS=1 measures the call's own overhead (no peer to wait for: 8 B only, 200000 ops).
# Usage: tools/observability_cost.sh [ROUNDS] (BUILD_DIR=build, BASE_BIN=dir, RANKS=4,
# GYRE_TRANSPORT apply)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-6}
ranks=${RANKS:-4}
bin=${BUILD_DIR:-build}/bin
tl=$(mktemp -d)
trap 'rm -rf "$tl"' EXIT
configs=(off recorder timeline)
[ -n "${BASE_BIN:-}" ] && configs=(base "${configs[@]}")
run() {  # config size iters
  local dir=$bin
  local env=()
  case $1 in
    base) dir=$BASE_BIN ;;
    off) env=(GYRE_TRACE_BUFFER=0) ;;
    recorder) ;;
    timeline) env=(GYRE_TIMELINE="$tl/t-{rank}.json") ;;
  esac
  env "${env[@]}" timeout -k 5 120 "$dir/gyrerun" -n "$ranks" "$dir/gyre-bench" -b "$2" -e "$2" \
    -n "$3" -w 50 -c 0 2>/dev/null | awk '!/^#/ && NF == 13 {print $6, $10}'
}
n=${#configs[@]}
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < n; i++)); do
    c=${configs[(i + r) % n]}
    if [ "$ranks" -eq 1 ]; then
      echo "$r $c 8 $(run "$c" 8 200000)"
      continue
    fi
    echo "$r $c 8 $(run "$c" 8 20000)"
    echo "$r $c 1M $(run "$c" 1M 500)"
  done
done
