#!/usr/bin/env bash
# Training as users run it, across namespaced hosts: PyTorch DDP (python/examples/
# ddp_train.py) on H hosts x L ranks joined by RATE links (tools/netns_hosts.sh), launched
# on each host by torchrun, once per backend and round, so the backends' ratios come from
# the same minutes:
#   gyre    init_process_group("gyre")
#   gloo    init_process_group("gloo")
#   local   gloo with --hook local: the same steps exchanging nothing (the ceiling)
#   sync    gyre with --hook sync: a 4-byte all-reduce per bucket instead of the
#           gradients (not in the default list): the ceiling of ranks that meet every
#           step, which on shared cores wait for the slowest one
#
#   tools/ddp_netns_bench.sh H L RATE [ddp_train.py args...]
#   e.g. tools/ddp_netns_bench.sh 2 4 1gbit --model mlp --steps 150
#
# Env: PY (a python whose torch has torch.distributed.run; default the torch 2 venv of
# tools/torch_venv.sh), GYRE_TORCH_PATH (where gyre_torch is built: put on PYTHONPATH;
# default the first build/gyre_torch/*/py/lib.* that PY imports), BACKENDS ("gyre gloo local"), ROUNDS
# (2), RUN_TIMEOUT (300 s per run), EXTRA_ENV (passed to every rank), BIND (unset: each
# host launches with torchrun, as users do; `core`: with gyrerun --bind core from BIN,
# default build/bin, ranks pinned to the host's CPUs, neighbours together), NETNS_CC and
# the rest of tools/netns_hosts.sh's settings. Prints one line per
# run and a summary: samples/s per backend and round, gyre / gloo and gyre / local within
# each round. Root only.
set -euo pipefail
H=${1:?hosts} L=${2:?ranks per host} RATE=${3:?rate, e.g. 1gbit}
shift 3
cd "$(dirname "$0")/.."
PY=${PY:-$HOME/.cache/gyre/venv-torch2/bin/python}
BACKENDS=${BACKENDS:-gyre gloo local} ROUNDS=${ROUNDS:-2} RUN_TIMEOUT=${RUN_TIMEOUT:-300}
[[ $EUID -eq 0 ]] || { echo "ddp_netns_bench: needs root (ip netns, tc)" >&2; exit 2; }
"$PY" -c "import torch.distributed.run" 2>/dev/null ||
  { echo "ddp_netns_bench: $PY has no torch (tools/torch_venv.sh makes the venv)" >&2; exit 2; }
# The build must be one that PY's torch can load: the suite builds gyre_torch against
# both torch lines (build/gyre_torch/debian and .../pypi), and an extension built against
# the other one aborts every rank at import.
# import_error DIR: succeeds where PY imports gyre_torch from DIR; else fails, printing
# the import's last lines on one line.
import_error() {
  local out
  out=$({ PYTHONPATH=$1 "$PY" -c "import gyre_torch" 2>&1; } 2>/dev/null) && return 0
  tail -3 <<<"$out" | tr -s ' \n' ' '; return 1
}
if [ -z "${GYRE_TORCH_PATH:-}" ]; then
  for d in build/gyre_torch/*/py/lib.*; do
    [ -d "$d/gyre_torch" ] && import_error "$d" >/dev/null && GYRE_TORCH_PATH=$d && break
  done
  [ -n "${GYRE_TORCH_PATH:-}" ] || { echo "ddp_netns_bench: no build/gyre_torch/*/py/lib.* that" \
    "$PY can import (build one against its torch: python/tests/run_suite.sh, or set GYRE_TORCH_PATH)" >&2; exit 2; }
elif ! [ -d "$GYRE_TORCH_PATH/gyre_torch" ]; then
  echo "ddp_netns_bench: GYRE_TORCH_PATH=$GYRE_TORCH_PATH has no gyre_torch" >&2; exit 2
elif ! err=$(import_error "$GYRE_TORCH_PATH"); then
  echo "ddp_netns_bench: $PY cannot import gyre_torch from $GYRE_TORCH_PATH: $err" >&2; exit 2
fi
GYRE_TORCH_PATH=$(cd "$GYRE_TORCH_PATH" && pwd)
script=$PWD/python/examples/ddp_train.py
# The launcher of each host: torchrun, or gyrerun --bind core (it runs a .py with the
# python3 first on PATH: the venv's).
launch=("$PY" -m torch.distributed.run) launch_path=$PATH
case ${BIND:-} in
  "") ;;
  core)
    BIN=$(cd "${BIN:-build/bin}" && pwd)
    [ -x "$BIN/gyrerun" ] || { echo "ddp_netns_bench: BIND=core needs $BIN/gyrerun" >&2; exit 2; }
    launch=("$BIN/gyrerun" --bind core) launch_path=$(dirname "$PY"):$PATH ;;
  *) echo "ddp_netns_bench: BIND wants core or nothing, got '$BIND'" >&2; exit 2 ;;
esac

# shellcheck source=tools/netns_hosts.sh
source tools/netns_hosts.sh
trap 'netns_hosts_down "$H"' EXIT
netns_hosts_up "$H" "$RATE"
echo "# ddp_netns_bench: $H hosts x $L ranks, tbf $NETNS_TBF both directions," \
  "tcp congestion control $NETNS_CC_USED; $PY; launcher ${launch[*]};" \
  "ddp_train.py $*; ${EXTRA_ENV:-default settings}"

port=29700
results=$(mktemp)
trap 'rm -f "$results"; netns_hosts_down "$H"' EXIT
for ((r = 1; r <= ROUNDS; r++)); do
  for b in $BACKENDS; do
    backend=$b hook=()
    [ "$b" = local ] && backend=gloo hook=(--hook local)
    [ "$b" = sync ] && backend=gyre hook=(--hook sync)
    out=$(mktemp)
    pids=()
    for ((i = H - 1; i >= 0; i--)); do
      log=/dev/null; (( i == 0 )) && log=$out
      # shellcheck disable=SC2086  # EXTRA_ENV is words
      timeout -k 10 "$RUN_TIMEOUT" ip netns exec "${NETNS_TAG}$i" env PYTHONPATH="$GYRE_TORCH_PATH" \
        PATH="$launch_path" OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 ${EXTRA_ENV:-} "${launch[@]}" --nnodes "$H" \
        --node-rank "$i" --nproc-per-node "$L" --master-addr $NETNS_NET.1 \
        --master-port $port "$script" --backend "$backend" "${hook[@]}" "$@" \
        >"$log" 2>"$out.err$i" &
      pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    line=$(grep '^{' "$out" | tail -1 || true)
    if (( rc != 0 )) || [ -z "$line" ]; then
      echo "# round $r $b FAILED"; tail -n 5 "$out".err*
    else
      sps=$("$PY" -c 'import json,sys; print("%.0f" % json.loads(sys.argv[1])["samples_per_s"])' "$line")
      echo "round $r $b samples_per_s=$sps $line"
      echo "$r $b $sps" >>"$results"
    fi
    rm -f "$out" "$out".err*
    port=$((port + 2))  # gyrerun's store takes MASTER_PORT+1
  done
done
netns_hosts_sent "$H"
# Ratios within each round.
awk '{ v[$1, $2] = $3; rounds[$1] = 1 }
  END {
    for (r in rounds) {
      line = "summary: round " r
      if (v[r, "gyre"] && v[r, "gloo"]) line = line sprintf(" gyre/gloo=%.2f", v[r, "gyre"] / v[r, "gloo"])
      if (v[r, "gyre"] && v[r, "local"]) line = line sprintf(" gyre/local=%.2f", v[r, "gyre"] / v[r, "local"])
      if (v[r, "gloo"] && v[r, "local"]) line = line sprintf(" gloo/local=%.2f", v[r, "gloo"] / v[r, "local"])
      if (v[r, "gyre"] && v[r, "sync"]) line = line sprintf(" gyre/sync=%.2f", v[r, "gyre"] / v[r, "sync"])
      if (v[r, "sync"] && v[r, "local"]) line = line sprintf(" sync/local=%.2f", v[r, "sync"] / v[r, "local"])
      print line
    }
  }' "$results" | sort
