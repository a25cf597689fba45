#!/usr/bin/env bash
# gyre before (OLD_BIN: build/bin of the commit before) and after (NEW_BIN, default this
# checkout's build/bin) on one host, 4 ranks, shm and tcp loopback, 8 B-4 MiB, 200 ops;
# Open MPI's mpi_bench from the peers' harness build (PEERS_BUILD) in each of 3 rounds,
# the variants alternating; MODE=hogs adds two nice-19 busy loops. Writes
# bench/results/spin_backoff/host_<MODE>.txt (or OUT_FILE): one line per run and size,
# "r<round> <old|new|mpi> <shm|tcp|default> size out-of-place-us in-place-us";
# tables: bench/runs/spin_backoff_host_summary.py FILE.
set -u
cd "$(dirname "$0")/../.." || exit 2  # the repository root
NEW=${NEW_BIN:-$PWD/build/bin} OLD=${OLD_BIN:?set OLD_BIN to the build/bin of the commit before}
source tools/peers_harness.sh  # busy_loops_start/stop
mode=${MODE:-quiet}
out=${OUT_FILE:-bench/results/spin_backoff/host_$mode.txt}
trap busy_loops_stop EXIT
[ "$mode" = hogs ] && busy_loops_start 2
{
  echo "# $mode"
  date -u +%FT%TZ
  for r in 1 2 3; do
    for v in old new; do
      B=$NEW; [ $v = old ] && B=$OLD
      for t in shm tcp; do
        GYRE_TRANSPORT=$t timeout 120 "$B/gyrerun" --nproc-per-node 4 "$B/gyre-bench" -b 8 -e 4M -f 4 -n 200 -w 10 -c 1 2>&1 | grep -E '^ +[0-9]' | awk -v t="r$r $v $t" '{printf "%s %s %s %s\n", t, $1,$6,$10}'
      done
    done
    timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 "${PEERS_BUILD:-/tmp/gyre-peers/build}/mpi_bench" -t default -b 8 -e 4M -f 4 -n 200 -w 5 2>&1 | grep -E '^ +[0-9]' | awk -v t="r$r mpi default" '{printf "%s %s %s %s\n", t, $1,$5,$5}'
  done
} > "$out"
