#!/usr/bin/env bash
# DDP on one host, 4 ranks launched by torch 2's torchrun (which places nothing), gyre
# with and without GYRE_BIND=core, beside gloo and the no-exchange reference (gloo with
# --hook local), ROUNDS rounds, every variant once a round (the order turning), so ratios
# come from the same minutes.
#   bench/runs/gyre_bind_torchrun.sh [OUT_FILE] [ddp_train.py args...]
# OUT_FILE defaults to bench/results/gyre_bind_torchrun/runs.txt; the ratios follow it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/bench/results/gyre_bind_torchrun/runs.txt}
shift || true
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--model mlp --steps 150)
venv=${VENV:-$HOME/.cache/gyre/venv-torch2}
lib=$(ls -d "$root"/build/gyre_torch/pypi/py/lib.* | head -1)
rounds=${ROUNDS:-4}
variants=(gyre gyre_bind local gloo)
: > "$out"
port=29650
for ((r = 1; r <= rounds; r++)); do
  for ((i = 0; i < ${#variants[@]}; i++)); do
    v=${variants[$(((i + r - 1) % ${#variants[@]}))]}
    backend=gyre hook=() env=()
    [ "$v" = gyre_bind ] && env=(GYRE_BIND=core)
    [ "$v" = local ] && backend=gloo hook=(--hook local)
    [ "$v" = gloo ] && backend=gloo
    port=$((port + 1))
    line=$(env "${env[@]}" PYTHONPATH="$lib" OMP_NUM_THREADS=1 timeout -k 10 300 "$venv/bin/torchrun" \
      --nproc-per-node 4 --master-port $port "$root/python/examples/ddp_train.py" \
      --backend "$backend" "${hook[@]}" "${args[@]}" 2>/dev/null | grep samples_per_s | head -1)
    sps=$("$venv/bin/python" -c 'import json,sys; print("%.0f" % json.loads(sys.argv[1])["samples_per_s"])' "$line")
    echo "round $r $v samples_per_s=$sps" | tee -a "$out"
  done
done
"$venv/bin/python" - "$out" <<'PY'
import re, statistics, sys
rounds = {}
for line in open(sys.argv[1]):
    m = re.match(r"round (\d+) (\S+) samples_per_s=(\d+)", line)
    if m:
        rounds.setdefault(int(m.group(1)), {})[m.group(2)] = int(m.group(3))
def show(name, num, den):
    xs = [r[num] / r[den] for r in rounds.values() if num in r and den in r]
    if xs:
        print(f"{name:22s} {min(xs):.2f}-{max(xs):.2f} median {statistics.median(xs):.2f}  "
              f"per round {', '.join(f'{x:.2f}' for x in xs)}")
show("bound/unbound gyre", "gyre_bind", "gyre")
show("gyre bound / local", "gyre_bind", "local")
show("gyre unbound / local", "gyre", "local")
show("gyre bound / gloo", "gyre_bind", "gloo")
show("gyre unbound / gloo", "gyre", "gloo")
PY
