#!/usr/bin/env bash
# Two builds of gyre side by side, alternating within each round: gyre-bench all-reduce at
# 8 B (out-of-place time) and 64 MiB (out-of-place busbw), and gyre-train (GradSync's
# data-parallel training, one epoch of 16384 samples), 4 ranks on one host under gyrerun.
#   bench/runs/house_before_after.sh BASE_BIN NEW_BIN [OUT_FILE]
# BASE_BIN/NEW_BIN: folders holding gyrerun, gyre-bench, gyre-train (a build's bin/).
# OUT_FILE defaults to bench/results/house_before_after/rounds_ddp.txt; one line a
# measurement: round, build, 8 B us, 64 MiB GB/s, train samples/s, load average.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
base=$1 new=$2
out=${3:-$root/bench/results/house_before_after/rounds_ddp.txt}
rounds=${ROUNDS:-6}
echo "# round build us_8b busbw_64m_gbs train_samples_per_s load1" > "$out"
for ((r = 1; r <= rounds; r++)); do
  order=(base new)
  ((r % 2 == 0)) && order=(new base)
  for b in "${order[@]}"; do
    bin=$base
    [ "$b" = new ] && bin=$new
    small=$(timeout -k 5 120 "$bin/gyrerun" -n 4 "$bin/gyre-bench" -b 8 -e 8 -n 2000 -w 200 |
            awk '!/^#/ && NF >= 8 {print $6; exit}')
    large=$(timeout -k 5 300 "$bin/gyrerun" -n 4 "$bin/gyre-bench" -b 64M -e 64M -n 10 -w 2 |
            awk '!/^#/ && NF >= 8 {print $8; exit}')
    train=$(timeout -k 5 300 "$bin/gyrerun" -n 4 "$bin/gyre-train" --epochs 1 --max-samples 16384 \
              --progress none 2>&1 | awk '/^# final/ {print $NF; exit}')
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "$r $b $small $large $train $load" | tee -a "$out"
  done
done
