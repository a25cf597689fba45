#!/usr/bin/env bash
# gyre-sim against the real thing, on one configuration that runs in seconds: 4 namespaced
# hosts x 1 rank on 500 Mbit/s tbf links (tools/netns_bench.sh), gyre-bench
# --compare-algos timing ring, tree and auto at 128-512 KiB, and gyre-sim with the
# same links (one NIC a host, the tbf's rate and burst) running gyre-bench's own sequence
# of calls (--as-bench 3 -n 6 -w 1: the buckets carried from call to call).
# tools/sim_validate.py fails when a prediction is more than 10% from the faster of two
# measured runs. The sizes are the link-bound ones, where the model's terms are the
# link's and not the host's scheduling (docs/simulator.md, "Validation", has the wider
# comparison). Not 2 MiB: the tree there runs slower than the model, since a link is one
# FIFO in the model (docs/simulator.md, "Limits"), by over 10% on a loaded host.
# Usage: sim_validation_test.sh BUILD_DIR SOURCE_DIR. Root only (exit 77 otherwise).
set -euo pipefail
build=$1
src=$2
[[ $EUID -eq 0 ]] || { echo "SKIP: needs root (ip netns, tc)"; exit 77; }
command -v tc >/dev/null || { echo "SKIP: no tc"; exit 77; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
BIN="$build/bin" REPEAT=2 RUN_TIMEOUT=120 "$src/tools/netns_bench.sh" 4 1 500mbit \
  --compare-algos -b 128K -e 512K -f 2 -n 6 -w 1 --rounds 3 | tee "$out"
grep -q "FAILED" "$out" && { echo "FAIL: a measured run failed"; exit 1; }
(( $(grep -c '^compare: bytes=' "$out") == 6 )) || { echo "FAIL: expected 3 sizes x 2 runs"; exit 1; }
python3 "$src/tools/sim_validate.py" "$out" --sim "$build/bin/gyre-sim" --algos ring,tree,auto \
  --check -- --hosts 4 --ranks-per-host 1 --nic host --link 500mbit --link-burst 131072 \
  --alpha-us 15 --as-bench 3 -n 6 -w 1
