#!/usr/bin/env bash
# Two builds of gyre side by side at N ranks on one host (default 8), alternating within
# each round: the wall time of a launch that creates the communicator and runs five 8 B
# all-reduces (gyrerun start to exit: creation dominates), gyre-bench's 8 B all-reduce time
# (out of place, 2,000 ops) and its 64 MiB busbw (out of place).
#   bench/runs/creation_before_after.sh BASE_BIN NEW_BIN [OUT_FILE]
# BASE_BIN/NEW_BIN: folders holding gyrerun and gyre-bench (a build's bin/). ROUNDS (4), N.
# OUT_FILE (default bench/results/creation_before_after_8ranks/rounds.txt) starts with
# '#' lines naming the command, both builds' commits, the machine and the date; then one
# line a measurement: round, build, launch s, 8 B us, 64 MiB GB/s, load average.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
base=$1 new=$2
n=${N:-8} rounds=${ROUNDS:-4}
out=${3:-$root/bench/results/creation_before_after_${n}ranks/rounds.txt}
mkdir -p "$(dirname "$out")"
commit() { "$1/gyrerun" --version 2>/dev/null | grep -o 'commit [0-9a-f]*' | head -1; }
{
  echo "# command: ROUNDS=$rounds N=$n bench/runs/creation_before_after.sh BASE NEW"
  echo "# base: $(commit "$base"); new: $(commit "$new")"
  echo "# machine: $(nproc)-core $(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo), Linux $(uname -r)"
  echo "# date: $(date -u +%FT%TZ); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# round build launch_s us_8b busbw_64m_gbs load1"
} > "$out"
for ((r = 1; r <= rounds; r++)); do
  order=(base new)
  ((r % 2 == 0)) && order=(new base)
  for b in "${order[@]}"; do
    bin=$base
    [ "$b" = new ] && bin=$new
    t0=$(date +%s.%N)
    timeout -k 5 120 "$bin/gyrerun" -n "$n" "$bin/gyre-bench" -b 8 -e 8 -n 5 -w 0 >/dev/null
    launch=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.3f", b - a}')
    small=$(timeout -k 5 120 "$bin/gyrerun" -n "$n" "$bin/gyre-bench" -b 8 -e 8 -n 2000 -w 200 |
            awk '!/^#/ && NF >= 8 {print $6; exit}')
    large=$(timeout -k 5 300 "$bin/gyrerun" -n "$n" "$bin/gyre-bench" -b 64M -e 64M -n 10 -w 2 |
            awk '!/^#/ && NF >= 8 {print $8; exit}')
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "$r $b $launch $small $large $load" | tee -a "$out"
  done
done
