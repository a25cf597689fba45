#!/bin/sh
# Runs one libFuzzer target for a bounded time, as a test: the checked-in corpus seeds it
# (read only); what it finds new goes to a work directory in the build tree. A crash
# leaves its input there (crash-*) and fails the test.
#   run_fuzzer.sh FUZZER SEED_CORPUS WORK_DIR SECONDS
set -eu
fuzzer=$1 seeds=$2 work=$3 seconds=$4
mkdir -p "$work/corpus"
# Lowest priority: the suite's timing-sensitive fault tests share these cores.
exec nice -n 19 "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "$seeds"
