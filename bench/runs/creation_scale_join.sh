#!/usr/bin/env bash
# The join alone at scale (ring/join.h: check-in and the barriers of creation, no pipes, no shared
# memory), N ranks as threads of one process, each with its own connection to a real
# store: wall time, store calls in all and claim reads, per build of the join.
#
#   JOIN_TEST_BINS="main=/tmp/main/join_aggregate_test new=build/bin/join_aggregate_test" \
#     bench/runs/creation_scale_join.sh
#
#   JOIN_TEST_BINS  "label=path ..." builds of tests/unit/join_aggregate_test (default
#                   "gyre=build/bin/join_aggregate_test")
#   JOIN_NS         rank counts (default "64 256 1024"); JOIN_TIMEOUT per run (default 300 s)
#   OUT             results folder (default bench/results/creation_scale_1host)
# Appends to OUT/join_scale.jsonl: label, n, status, seconds, store_calls, claim_gets.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-bench/results/creation_scale_1host}
JOIN_NS=${JOIN_NS:-"64 256 1024"}
JOIN_TIMEOUT=${JOIN_TIMEOUT:-300}
mkdir -p "$OUT"
for n in $JOIN_NS; do
  for pair in ${JOIN_TEST_BINS:-gyre=build/bin/join_aggregate_test}; do
    label=${pair%%=*} bin=${pair#*=}
    line=$(JOIN_RANKS=$n timeout --kill-after=10 "$JOIN_TIMEOUT" "$bin" \
      --gtest_also_run_disabled_tests --gtest_filter='*JoinAtScale*' 2>&1 | grep '^\[join-scale\]')
    rc=$?
    python3 - "$label" "$n" "$line" "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/join_scale.jsonl" <<'EOF'
import json, re, sys, time
label, n, line, load = sys.argv[1:]
row = {"label": label, "n": int(n), "status": "ok" if line else "failed-or-timeout",
       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "load": load}
for k, v in re.findall(r"(\w+)=([\d.]+)", line):
    if k != "ranks":
        row[k] = float(v) if "." in v else int(v)
print(json.dumps(row))
EOF
    tail -n 1 "$OUT/join_scale.jsonl" >&2
    : "$rc"
  done
done
