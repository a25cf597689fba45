#!/usr/bin/env bash
# DDP on one host, 4 ranks (python/examples/ddp_train.py, the torch 2 venv), launched by
# gyrerun with and without --bind core, for gyre, gloo, local (gloo exchanging nothing)
# and sync (gyre with a 4-byte all-reduce per bucket); ROUNDS rounds, every variant once
# a round, so ratios come from the same minutes.
#   bench/runs/ddp_one_host_bind.sh [OUT_FILE] [ddp_train.py args...]
# OUT_FILE defaults to bench/results/ddp_one_host_bind/runs.txt; ratios:
# bench/runs/ddp_one_host_bind_summary.py OUT_FILE... > DIR/summary.txt.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/bench/results/ddp_one_host_bind/runs.txt}
shift || true
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--model mlp --steps 150)
py=${PY:-$HOME/.cache/gyre/venv-torch2/bin/python}
lib=$(ls -d "$root"/build/gyre_torch/pypi/py/lib.* | head -1)
rounds=${ROUNDS:-3}
: > "$out"
for ((r = 1; r <= rounds; r++)); do
  for bind in none core; do
    for b in gyre gloo local sync; do
      backend=$b hook=()
      [ "$b" = local ] && backend=gloo hook=(--hook local)
      [ "$b" = sync ] && backend=gyre hook=(--hook sync)
      line=$(PYTHONPATH="$lib" OMP_NUM_THREADS=1 timeout -k 10 300 "$root/build/bin/gyrerun" -n 4 \
        --bind "$bind" "$py" "$root/python/examples/ddp_train.py" --backend "$backend" \
        "${hook[@]}" "${args[@]}" 2>/dev/null | grep samples_per_s | head -1)
      sps=$("$py" -c 'import json,sys; print("%.0f" % json.loads(sys.argv[1])["samples_per_s"])' "$line")
      echo "round $r bind $bind $b samples_per_s=$sps $line" | tee -a "$out"
    done
  done
done
