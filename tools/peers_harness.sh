# shellcheck shell=bash
# The peers' harness: Gloo, Open MPI and torch.distributed run beside gyre on the same
# namespaced, tbf-shaped hosts (its run_netns.sh) or on one host (run_peers.sh). It is not
# part of gyre; the scripts under bench/runs/ that run it source this file from the
# repository root and write into bench/results/.
#   PEERS_HARNESS   the directory holding run_netns.sh (required)
#   PEERS_BUILD     the harness's build of the peers (its BUILD; default /tmp/gyre-peers/build)
# Sets PEERS_RUN_NETNS and exports GYRE_BIN (this checkout's build/bin) and BUILD; returns 2
# naming what is missing.
peers_harness_find() {
  if [[ -z ${PEERS_HARNESS:-} || ! -x ${PEERS_HARNESS}/run_netns.sh ]]; then
    echo "peers_harness: set PEERS_HARNESS to the directory of the peers' harness" \
      "(run_netns.sh; not part of gyre)${PEERS_HARNESS:+: none in $PEERS_HARNESS}" >&2
    return 2
  fi
  if [[ ! -x build/bin/gyre-bench ]]; then
    echo "peers_harness: no build/bin/gyre-bench here (tools/build.sh first)" >&2
    return 2
  fi
  # shellcheck disable=SC2034  # for the scripts that source this file
  PEERS_RUN_NETNS=$PEERS_HARNESS/run_netns.sh
  export GYRE_BIN=$PWD/build/bin BUILD=${PEERS_BUILD:-/tmp/gyre-peers/build}
}

# The load of the "beside busy processes" runs: N (default 2) shell busy loops at nice 19.
# busy_loops_start sets BUSY_LOOPS (their pids); busy_loops_stop kills and reaps them (safe
# to call twice, and from an EXIT trap).
busy_loops_start() {
  BUSY_LOOPS=()
  local i
  for ((i = 0; i < ${1:-2}; i++)); do
    nice -n 19 sh -c 'while :; do :; done' &
    BUSY_LOOPS+=($!)
  done
}
busy_loops_stop() {
  if [[ -n ${BUSY_LOOPS[*]:-} ]]; then
    kill "${BUSY_LOOPS[@]}" 2>/dev/null
    wait "${BUSY_LOOPS[@]}" 2>/dev/null
  fi
  BUSY_LOOPS=()
}

# What a run leaves in DIR (its tables and logs, recursively) names paths of the machine it
# ran on: peers_strip_paths DIR [PREFIX...] drops each PREFIX/ and the checkout's root/,
# and writes $PEERS_HARNESS/, $PEERS_BUILD/ and $GLOO_STORE for the harness's own paths,
# so that committed results hold no absolute paths.
peers_strip_paths() {
  local dir=$1 p
  shift
  local -a exprs=()
  for p in "$@" "$PWD"; do exprs+=(-e "s|$(_peers_sed_escape "$p")/||g"); done
  [[ -n ${PEERS_HARNESS:-} ]] && exprs+=(-e "s|$(_peers_sed_escape "${PEERS_HARNESS%/}")/|\$PEERS_HARNESS/|g")
  [[ -n ${BUILD:-} ]] && exprs+=(-e "s|$(_peers_sed_escape "${BUILD%/}")/|\$PEERS_BUILD/|g")
  exprs+=(-e 's|/tmp/gloo_netns_store\.[A-Za-z0-9]*|$GLOO_STORE|g')
  find "$dir" -type f \( -name '*.txt' -o -name '*.log' \) -exec sed -i "${exprs[@]}" {} +
}
_peers_sed_escape() { printf '%s' "$1" | sed 's/[][\.*^$|]/\\&/g'; }
