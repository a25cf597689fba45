#!/usr/bin/env bash
# The README's first command: install what is missing, build, and run the main job:
# a 4-rank all-reduce benchmark over loopback (then a short training run, once
# gyre-train exists).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
bin=${BUILD_DIR:-build}/bin
echo "== gyrerun -n 4 gyre-bench -b 8 -e 64M -f 4 -c 1"
"$bin/gyrerun" -n 4 "$bin/gyre-bench" -b 8 -e 64M -f 4 -c 1
if [ -x "$bin/gyre-train" ]; then
  echo "== gyrerun -n 4 gyre-train --epochs 1"
  "$bin/gyrerun" -n 4 "$bin/gyre-train" --epochs 1
fi
