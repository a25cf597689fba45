#!/usr/bin/env bash
# gyre before (OLD_BIN: build/bin of the commit before) and after (NEW_BIN) on one host,
# 4 ranks, shm and tcp loopback, 8 B-4 MiB, 200 ops; Open MPI from the peers harness build
# (PEERS_BUILD);
# 3 rounds alternating, Open MPI (default) in each; MODE=hogs adds two nice-19 busy loops.
set -u
NEW=${NEW_BIN:?} OLD=${OLD_BIN:?}
cd "$(dirname "$0")/../../.." || exit 2  # the repository root
source tools/peers_harness.sh  # busy_loops_start/stop
trap busy_loops_stop EXIT
[ "${MODE:-quiet}" = hogs ] && busy_loops_start 2
for r in 1 2 3; do
  for v in old new; do
    B=$NEW; [ $v = old ] && B=$OLD
    for t in shm tcp; do
      GYRE_TRANSPORT=$t timeout 120 "$B/gyrerun" --nproc-per-node 4 "$B/gyre-bench" -b 8 -e 4M -f 4 -n 200 -w 10 -c 1 2>&1 | grep -E '^ +[0-9]' | awk -v t="r$r $v $t" '{printf "%s %s %s %s\n", t, $1,$6,$10}'
    done
  done
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 "${PEERS_BUILD:-/tmp/gyre-peers/build}/mpi_bench" -t default -b 8 -e 4M -f 4 -n 200 -w 5 2>&1 | grep -E '^ +[0-9]' | awk -v t="r$r mpi default" '{printf "%s %s %s %s\n", t, $1,$5,$5}'
done
