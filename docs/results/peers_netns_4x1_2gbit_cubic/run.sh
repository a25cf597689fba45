#!/usr/bin/env bash
# The equal-run-length comparison (../peers_netns_4x1_2gbit_fair) under CUBIC instead of
# the host's BBR: every peer and gyre time 20 ops at every size (4-64 MiB), 4 hosts x 1
# rank, 2 Gbit/s tbf links; three rounds, each quiet and beside two busy loops (nice 19);
# gyre with its defaults. Needs root (sysctl; the namespaces take the host's setting when
# made); the host's setting is put back on exit. Open MPI (47-52% here) is left out.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."  # the repository root; the peers harness is ../shared/peers
base=${CUBIC_OUT:-$here}
orig=$(sysctl -n net.ipv4.tcp_congestion_control)
hogs=()
trap 'sysctl -qw net.ipv4.tcp_congestion_control=$orig; [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null' EXIT
sysctl -qw net.ipv4.tcp_congestion_control=cubic
common=(GYRE_BIN=$PWD/build/bin BUILD=/tmp/gyre-peers/build MINB=4M MAXB=64M ITERS=20 MIN_ITERS=20 ITER_BYTES=2G GYRE_ITERS=20)
for round in 1 2 3; do
  for mode in quiet hogs; do
    hogs=()
    if [ $mode = hogs ]; then
      for i in 1 2; do nice -n 19 sh -c 'while :; do :; done' & hogs+=($!); done
    fi
    echo "== $(date +%H:%M:%S) round $round $mode (load $(cut -d' ' -f1 /proc/loadavg))"
    env "${common[@]}" GYRE_PEERS_OUT=$base/$mode$round-def PEERS="gyre gloo torch" \
      GLOO_ALGOS="allreduce_ring ring_chunked" ../shared/peers/run_netns.sh 4 2gbit > $base/$mode$round-def.log 2>&1
    [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}"
    wait 2>/dev/null
    hogs=()
  done
done
echo "== $(date +%H:%M:%S) done"
