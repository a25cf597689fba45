#!/usr/bin/env bash
# shm all-reduce at 512 KiB-2 MiB, 4 ranks on a 2-CPU machine: gyre unbound, gyrerun
# --bind core (ring neighbours share a CPU: 0 0 1 1), the rule --bind core had before
# (r mod k: 0 1 0 1, through a taskset wrapper), Open MPI unbound (its default with
# --oversubscribe) and Open MPI --bind-to core; ROUNDS (5) rounds, the variants alternating.
#   bench/runs/shm_1mib_vs_openmpi.sh [OUT_DIR]     (default bench/results/shm_1mib_vs_openmpi)
# then bench/runs/shm_1mib_vs_openmpi_summary.py OUT_DIR/summary_raw.txt > OUT_DIR/summary.txt
# Needs build/bin (gyrerun, gyre-bench) and the peers' harness's mpi_bench, an
# MPI_Allreduce loop that is not part of gyre (tools/peers_harness.sh): MPI_BENCH, default
# ${PEERS_BUILD:-/tmp/gyre-peers/build}/mpi_bench, built by `make -C "$PEERS_HARNESS"`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/bench/results/shm_1mib_vs_openmpi}
mkdir -p "$out"
bin=$root/build/bin
mpi=${MPI_BENCH:-${PEERS_BUILD:-/tmp/gyre-peers/build}/mpi_bench}
[ -x "$mpi" ] || { echo "shm_1mib_vs_openmpi.sh: no mpi_bench at $mpi (set MPI_BENCH; tools/peers_harness.sh)" >&2; exit 2; }
[ -x "$bin/gyre-bench" ] || { echo "shm_1mib_vs_openmpi.sh: no $bin/gyre-bench (tools/build.sh first)" >&2; exit 2; }
rounds=${ROUNDS:-5}
wrap=$(mktemp)
trap 'rm -f "$wrap"' EXIT
# The earlier rule, r mod k, for comparison: local rank r on CPU r mod 2.
# shellcheck disable=SC2016  # expanded by the wrapper, per rank
printf '#!/bin/sh\nexec taskset -c $((LOCAL_RANK %% 2)) "$@"\n' > "$wrap"
chmod +x "$wrap"
gb=(-b 512K -e 2M -f 2 -n 200 -w 10 -c 1)
mb=(-t default -b 512K -e 2M -f 2 -n 200 -m 3 -B 1G -w 5)
for ((r = 1; r <= rounds; r++)); do
  echo "# round $r $(date -u +%FT%TZ)"
  GYRE_TRANSPORT=shm "$bin/gyrerun" -n 4 "$bin/gyre-bench" "${gb[@]}" > "$out/r${r}_gyre_unbound.txt" 2>&1
  GYRE_TRANSPORT=shm "$bin/gyrerun" -n 4 --bind core "$bin/gyre-bench" "${gb[@]}" > "$out/r${r}_gyre_bind_core.txt" 2>&1
  GYRE_TRANSPORT=shm "$bin/gyrerun" -n 4 "$wrap" "$bin/gyre-bench" "${gb[@]}" > "$out/r${r}_gyre_bind_mod.txt" 2>&1
  mpirun --allow-run-as-root --oversubscribe -np 4 "$mpi" "${mb[@]}" > "$out/r${r}_mpi_unbound.txt" 2>&1
  mpirun --allow-run-as-root --oversubscribe --bind-to core:overload-allowed -np 4 "$mpi" "${mb[@]}" \
    > "$out/r${r}_mpi_bind_core.txt" 2>&1
done | tee "$out/rounds.txt"
# in-place us per size: gyre's in-place column, mpi_bench's time column
for f in "$out"/r*_*.txt; do
  name=$(basename "$f" .txt)
  awk -v n="$name" '/^ +(524288|1048576|2097152) / {
      t = (n ~ /gyre/) ? $10 : $5; printf "%s %s %s\n", n, $1, t }' "$f"
done > "$out/summary_raw.txt"
