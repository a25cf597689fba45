#!/usr/bin/env bash
# Equal run lengths: every peer and gyre time 20 ops at every size (4-64 MiB), 4 hosts x 1
# rank, 2 Gbit/s tbf links; three rounds, each quiet and beside two busy loops (nice 19).
# gyre with its defaults (512 KiB slots where every pipe is tcp) and with GYRE_SLOT_BYTES=128K.
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."  # the repository root; the peers harness is ../shared/peers
base=${FAIR_OUT:-$here}
common=(GYRE_BIN=$PWD/build/bin BUILD=/tmp/gyre-peers/build MINB=4M MAXB=64M ITERS=20 MIN_ITERS=20 ITER_BYTES=2G GYRE_ITERS=20)
for round in 1 2 3; do
  for mode in quiet hogs; do
    hogs=()
    if [ $mode = hogs ]; then
      for i in 1 2; do nice -n 19 sh -c 'while :; do :; done' & hogs+=($!); done
    fi
    echo "== $(date +%H:%M:%S) round $round $mode (load $(cut -d' ' -f1 /proc/loadavg))"
    env "${common[@]}" GYRE_PEERS_OUT=$base/$mode$round-def PEERS="gyre gloo torch mpi_tcp" \
      GLOO_ALGOS="allreduce_ring ring_chunked" ../shared/peers/run_netns.sh 4 2gbit > $base/$mode$round-def.log 2>&1
    env "${common[@]}" GYRE_PEERS_OUT=$base/$mode$round-128k GYRE_SLOT_BYTES=128K PEERS="gyre" \
      ../shared/peers/run_netns.sh 4 2gbit > $base/$mode$round-128k.log 2>&1
    [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}"
    wait 2>/dev/null
  done
done
echo "== $(date +%H:%M:%S) done"
