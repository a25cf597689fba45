#!/usr/bin/env bash
# The numbers of docs/security.md: what the job's secret and GYRE_ENCRYPT cost, gyre-bench
# and gyrerun from BUILD_DIR (default build).
#
#   tools/auth_bench.sh [reps]           on loopback, ranks started by hand (RANK/WORLD_SIZE/MASTER_*):
# 1. creation: wall time of a whole job of N ranks (launch to exit) that runs one 8-byte
#    all-reduce, without and with a secret, N = 4 and 8 (the difference is creation's:
#    the handshakes and the store's authentication; process start is in both);
# 2. 8-byte all-reduce latency over tcp, 4 ranks, without and with a secret;
# 3. busbw at 1-64 MiB over tcp, 4 ranks, with a secret, plaintext and GYRE_ENCRYPT=1.
#
#   tools/auth_bench.sh shaped [rounds] [rate]     root only
# busbw at 1-64 MiB, ring all-reduce, with a secret, plaintext and GYRE_ENCRYPT=1 taking
# turns ROUNDS times (default 4), each a job of 4 ranks on tools/netns_bench.sh's shaped
# namespaces (4 hosts x 1 rank: every pipe is tcp over a veth shaped by tbf at RATE,
# default 2gbit, both ways). Prints each run's rows (bytes busbw_out busbw_in, GB/s), then
# per size the range of each mode and the ratio of the medians (encrypted / plaintext).
set -euo pipefail
cd "$(dirname "$0")/.."
bench=${BUILD_DIR:-build}/bin/gyre-bench
secret_file=$(mktemp)
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$secret_file"
chmod 600 "$secret_file"
trap 'rm -f "$secret_file"' EXIT

if [ "${1:-}" = shaped ]; then
  rounds=${2:-4} rate=${3:-2gbit}
  [[ $EUID -eq 0 ]] || { echo "auth_bench shaped: needs root (tools/netns_bench.sh)" >&2; exit 2; }
  rows=$(mktemp)
  trap 'rm -f "$secret_file" "$rows"' EXIT
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(uptime | sed 's/.*load/load/'), $(nproc) cores"
  echo "# tools/netns_bench.sh 4 1 $rate -b 1M -e 64M -f 4 -n 5 -w 1 -A ring, $rounds rounds"
  for ((i = 1; i <= rounds; i++)); do
    for mode in plain encrypt; do
      extra="GYRE_TOKEN_FILE=$secret_file"
      [ "$mode" = encrypt ] && extra+=" GYRE_ENCRYPT=1"
      out=$(EXTRA_ENV="$extra" BIN=${BUILD_DIR:-build}/bin RUN_TIMEOUT=300 \
            tools/netns_bench.sh 4 1 "$rate" -b 1M -e 64M -f 4 -n 5 -w 1 -A ring)
      if grep -q FAILED <<<"$out" || ! grep -qE '^ +67108864 ' <<<"$out"; then
        echo "$out"; echo "auth_bench shaped: round $i $mode failed" >&2; exit 1
      fi
      echo "busbw shaped n=4 $mode round $i (bytes busbw_out busbw_in), $(uptime | sed 's/.*load average: //'):"
      now=$(awk '/^ +[0-9]+ /{print $1, $8, $12}' <<<"$out")
      sed 's/^/  /' <<<"$now"
      sed "s/^/$mode /" <<<"$now" >> "$rows"
      grep '^# host' <<<"$out" | sed 's/^/  /'
    done
  done
  echo "summary (GB/s, min-max over rounds, out of place / in place; ratio of medians):"
  python3 - "$rows" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    mode, size, out, inp = line.split()
    runs.setdefault((int(size), mode), []).append((float(out), float(inp)))
def rng(v):
    return "%.3f-%.3f" % (min(v), max(v))
print("| size | plaintext | GYRE_ENCRYPT=1 | encrypted / plaintext |")
print("|---|---|---|---|")
for size in sorted({s for s, _ in runs}):
    p, e = runs[(size, "plain")], runs[(size, "encrypt")]
    col = lambda r: "%s / %s" % (rng([x[0] for x in r]), rng([x[1] for x in r]))
    ratio = ["%.0f%%" % (100 * statistics.median([x[k] for x in e]) /
                         statistics.median([x[k] for x in p])) for k in (0, 1)]
    print("| %d MiB | %s | %s | %s / %s |" % (size >> 20, col(p), col(e), ratio[0], ratio[1]))
PY
  exit 0
fi
reps=${1:-5}

port=$((30000 + RANDOM % 20000))
job() {  # job N ENV... -- gyre-bench args: runs N ranks, prints rank 0's stdout
  local n=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  port=$((port + 1))
  local pids=() out
  out=$(mktemp)
  for ((r = 0; r < n; r++)); do
    if [ "$r" -eq 0 ]; then
      env RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "${envs[@]}" \
        timeout 300 "$bench" "$@" > "$out" &
    else
      env RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "${envs[@]}" \
        timeout 300 "$bench" "$@" > /dev/null &
    fi
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  cat "$out"
  rm -f "$out"
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
for n in 4 8; do
  for mode in none secret; do
    env=(GYRE_TRANSPORT=tcp)
    [ "$mode" = secret ] && env+=(GYRE_TOKEN_FILE="$secret_file")
    times=()
    for ((i = 0; i < reps; i++)); do
      t0=$(date +%s%N)
      job "$n" "${env[@]}" -- -b 8 -e 8 -n 1 -w 0 > /dev/null
      t1=$(date +%s%N)
      times+=($(( (t1 - t0) / 1000000 )))
    done
    echo "creation n=$n $mode: ms ${times[*]}"
  done
done
for mode in none secret; do
  env=(GYRE_TRANSPORT=tcp)
  [ "$mode" = secret ] && env+=(GYRE_TOKEN_FILE="$secret_file")
  for ((i = 0; i < 3; i++)); do
    line=$(job 4 "${env[@]}" -- -b 8 -e 8 -n 500 -w 50 | grep -E '^ +8 ')
    echo "latency 8B tcp n=4 $mode: $(echo "$line" | awk '{print $6 " us out-of-place, " $10 " us in-place"}')"
  done
done
for mode in plain encrypt; do
  env=(GYRE_TRANSPORT=tcp GYRE_TOKEN_FILE="$secret_file")
  [ "$mode" = encrypt ] && env+=(GYRE_ENCRYPT=1)
  for ((i = 0; i < 2; i++)); do
    echo "busbw tcp n=4 $mode run $i (bytes busbw_out busbw_in):"
    job 4 "${env[@]}" -- -b 1M -e 64M -f 4 -n 5 -w 2 | awk '/^ +[0-9]+ /{print "  " $1, $8, $12}'
  done
done
