#!/usr/bin/env bash
# Training styles (FSDP2, tensor parallelism, DDP: bench/runs/torch_styles.py) on backend
# gyre against gloo and against no communication at all (torch's fake backend), in
# alternating rounds: every round runs each (world, style) on every backend (in BACKENDS'
# order in odd rounds, reversed in even ones), so the ratios come from the same minutes. Each run is one launch per
# host; rank 0's JSON line, with the round, the time and the 1-minute load average read
# just before the launch, goes to OUT/r<round>.jsonl; OUT/meta.json records the command,
# commit, machine, date and load. docs/pytorch.md ("Training styles: measured") is made
# from them by tools/bench_tables.py.
#
#   bench/runs/torch_styles.sh host  [OUT]   torchrun on this host, WORLDS ranks
#                                            (default bench/results/torch_styles_1host)
#   bench/runs/torch_styles.sh netns [OUT]   2 namespaced hosts x 2 ranks on 1 Gbit/s tbf
#                                            links (tools/netns_hosts.sh), torchrun in each;
#                                            root (default bench/results/torch_styles_netns_2x2_1gbit)
#
# Env: ROUNDS (3), STYLES ("fsdp tp ddp"), BACKENDS ("gyre gloo fake": fake is torch's
# FakeProcessGroup, the steps without communication, the floor no backend can beat), WORLDS ("2 4", host only), HOSTS and RANKS
# (2 2, netns only), RATE (1gbit), RUN_TIMEOUT (300 s a launch), PY (the torch 2 venv's
# python), GYRE_TORCH_PATH (default build/gyre_torch/pypi/py/lib.*), ARGS (more
# torch_styles.py arguments, e.g. "--steps 30"), EXTRA_ENV (variables for every rank),
# PROFILE=1 (one more round with --profile and GYRE_TIMELINE into OUT/profile/, not in
# the rounds' files; with ROUNDS=0 only that round, leaving the rounds and meta.json).
set -euo pipefail
mode=${1:?host or netns}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
PY=${PY:-$HOME/.cache/gyre/venv-torch2/bin/python}
ROUNDS=${ROUNDS:-3} STYLES=${STYLES:-fsdp tp ddp} BACKENDS=${BACKENDS:-gyre gloo fake} RUN_TIMEOUT=${RUN_TIMEOUT:-300}
RATE=${RATE:-1gbit} HOSTS=${HOSTS:-2} RANKS=${RANKS:-2}
case $mode in
  host) out=${2:-$root/bench/results/torch_styles_1host} worlds=${WORLDS:-2 4} ;;
  netns) out=${2:-$root/bench/results/torch_styles_netns_2x2_1gbit} worlds=$((HOSTS * RANKS))
         [[ $EUID -eq 0 ]] || { echo "torch_styles: netns needs root (ip netns, tc)" >&2; exit 2; } ;;
  *) echo "torch_styles: mode is host or netns, got '$mode'" >&2; exit 2 ;;
esac
if [ -z "${GYRE_TORCH_PATH:-}" ]; then
  for d in build/gyre_torch/pypi/py/lib.*; do GYRE_TORCH_PATH=$d; break; done
fi
[ -d "${GYRE_TORCH_PATH:-}/gyre_torch" ] || { echo "torch_styles: no gyre_torch build (python/tests/run_suite.sh" \
  "pypi \$PWD/build/gyre_torch/pypi \"\" version builds one; or set GYRE_TORCH_PATH)" >&2; exit 2; }
GYRE_TORCH_PATH=$(cd "$GYRE_TORCH_PATH" && pwd)
mkdir -p "$out"
script=$root/bench/runs/torch_styles.py
read -ra extra_args <<<"${ARGS:-}"
read -ra extra_env <<<"${EXTRA_ENV:-}"

if [ "$mode" = netns ]; then
  # A set of namespaces of its own, so that another run's teardown leaves it alone.
  NETNS_TAG=${NETNS_TAG:-gyts} NETNS_NET=${NETNS_NET:-10.217.0}
  # shellcheck source=tools/netns_hosts.sh
  source tools/netns_hosts.sh
  trap 'netns_hosts_down "$HOSTS"' EXIT
  netns_hosts_up "$HOSTS" "$RATE"
fi

port=29900
# run_one ROUND STYLE BACKEND WORLD [more torch_styles.py args]: one launch (per host);
# appends rank 0's line to OUT/r<ROUND>.jsonl (ROUND "p": the profile round, to a log).
run_one() {
  local round=$1 style=$2 backend=$3 world=$4
  shift 4
  local load started log err line rc=0 pids=() i env=()
  load=$(cut -d' ' -f1 /proc/loadavg) started=$(date -u +%H:%M:%S)
  log=$(mktemp) err=$(mktemp)
  port=$((port + 1))
  [ "$round" = p ] && env=("GYRE_TIMELINE=$out/profile/timeline_${style}_${backend}_w${world}_{rank}.json")
  if [ "$mode" = host ]; then
    env "${env[@]}" "${extra_env[@]}" PYTHONPATH="$GYRE_TORCH_PATH" OMP_NUM_THREADS=1 \
      timeout -k 10 "$RUN_TIMEOUT" "$PY" -m torch.distributed.run --nproc-per-node "$world" \
      --master-port $port "$script" --style "$style" --backend "$backend" "${extra_args[@]}" "$@" \
      >"$log" 2>"$err" || rc=$?
  else
    for ((i = HOSTS - 1; i >= 0; i--)); do
      local to=/dev/null; ((i == 0)) && to=$log
      timeout -k 10 "$RUN_TIMEOUT" ip netns exec "${NETNS_TAG}$i" env "${env[@]}" "${extra_env[@]}" \
        PYTHONPATH="$GYRE_TORCH_PATH" OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 \
        "$PY" -m torch.distributed.run --nnodes "$HOSTS" --node-rank "$i" --nproc-per-node "$RANKS" \
        --master-addr "$NETNS_NET.1" --master-port $port "$script" --style "$style" \
        --backend "$backend" "${extra_args[@]}" "$@" >"$to" 2>>"$err" &
      pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || rc=1; done
  fi
  line=$(grep '^{' "$log" | tail -1 || true)
  if ((rc != 0)) || [ -z "$line" ]; then
    echo "torch_styles: round $round $style $backend world $world FAILED (rc $rc):" >&2
    tail -n 8 "$err" >&2
    line="{\"style\": \"$style\", \"backend\": \"$backend\", \"world\": $world, \"failed\": true}"
  fi
  line="{\"round\": \"$round\", \"started\": \"$started\", \"load1\": $load, ${line#\{}"
  echo "$line"
  if [ "$round" = p ]; then echo "$line" >>"$out/profile/runs.jsonl"; else echo "$line" >>"$out/r$round.jsonl"; fi
  rm -f "$log" "$err"
}

first=$(date -u +%Y-%m-%dT%H:%M:%SZ) load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 1; r <= ROUNDS; r++)); do
  : >"$out/r$r.jsonl"
  for w in $worlds; do
    for s in $STYLES; do
      # Odd rounds in BACKENDS' order, even rounds reversed: none always gets the
      # warmer (or the quieter) minute.
      order=$BACKENDS
      ((r % 2)) || order=$(echo "$BACKENDS" | tr ' ' '\n' | tac | tr '\n' ' ')
      for b in $order; do run_one "$r" "$s" "$b" "$w"; done
    done
  done
done
last=$(date -u +%Y-%m-%dT%H:%M:%SZ)
if [ "${PROFILE:-0}" = 1 ]; then
  rm -rf "$out/profile"; mkdir -p "$out/profile"
  for w in $worlds; do
    for s in $STYLES; do
      for b in gyre gloo; do run_one p "$s" "$b" "$w" --profile "$out/profile"; done
    done
  done
  gzip -9f "$out"/profile/timeline_*.json  # 10-20x smaller; gunzip for tools/gyre_timeline.py
fi

((ROUNDS > 0)) || exit 0
# meta.json: what ran, where and under what load (the per-run load is in each line).
commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain -- python capi ring collectives transport bench/runs/torch_styles.py 2>/dev/null | head -1)
cpu=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
"$PY" - "$out" "$mode" "$commit${dirty:+ (uncommitted changes)}" "$first" "$last" "$load_before" \
  "$(nproc)" "$cpu" "$(uname -r)" "${NETNS_TBF:-}" "${NETNS_CC_USED:-}" "$ROUNDS" "$STYLES" "$worlds" \
  "${ARGS:-}" "${EXTRA_ENV:-}" "$("$PY" -c 'import torch; print(torch.__version__)')" "$BACKENDS" <<'PY'
import glob, json, os, sys
(out, mode, commit, first, last, load_before, ncpu, cpu, kernel, tbf, cc, rounds, styles, worlds,
 args, extra_env, torch_version, backends) = sys.argv[1:]
loads = [json.loads(l)["load1"] for f in sorted(glob.glob(os.path.join(out, "r*.jsonl")))
         for l in open(f) if l.strip()]
cmd = f"bench/runs/torch_styles.sh {mode}" + ("" if out.endswith(("torch_styles_1host", "torch_styles_netns_2x2_1gbit")) else f" {os.path.relpath(out)}")
env = " ".join(x for x in (f"ROUNDS={rounds}" if rounds != "3" else "",
                           f"ARGS='{args}'" if args else "",
                           f"BACKENDS='{backends}'" if backends != "gyre gloo fake" else "",
                           f"STYLES='{styles}'" if styles != "fsdp tp ddp" else "",
                           f"EXTRA_ENV='{extra_env}'" if extra_env else "") if x)
meta = {
    "title": ("Training styles (FSDP2, tensor parallelism, DDP) on backend gyre against gloo, "
              + ("one host, torchrun, " + " and ".join(worlds.split()) + " ranks" if mode == "host"
                 else "2 namespaced hosts x 2 ranks on 1 Gbit/s links, torchrun per host")),
    "command": (env + " " if env else "") + cmd,
    "commit": commit,
    "machine": f"{ncpu}-core VM",
    "machine_details": f"{ncpu}-core x86-64 VM ({cpu}), Linux {kernel}"
                       + ("; the hosts are network namespaces on it" if mode == "netns" else ""),
    "date": first[:10],
    "time": f"{first[11:16]}-{last[11:16]} UTC",
    "conditions": {
        "workload": ("bench/runs/torch_styles.py: MLP of 4 blocks Linear(512, 2048)-ReLU-Linear(2048, 512)-ReLU "
                     "(8.4 M parameters), cross-entropy, SGD with momentum, synthetic data, batch 32 per rank "
                     "(tp: 32 shared by the ranks), 3 warm-up and 20 timed steps; torch " + torch_version
                     + ", OMP_NUM_THREADS=1" + (f"; {args}" if args else "")),
        "styles": "fsdp: fully_shard per block and on the model; tp: parallelize_module, ColwiseParallel "
                  "then RowwiseParallel per block; ddp: DistributedDataParallel, default buckets",
        "backends": "gyre, gloo, and fake: torch's FakeProcessGroup, whose collectives return at once "
                    "without moving data (ddp on fake: the bare model): the steps' computation alone",
        "rounds": f"{rounds}, each running every world and style on every backend ({backends}), in that order in odd rounds and reversed in even ones",
        "load": (f"shared machine: other jobs (builds) run beside; load average {load_before} before the "
                 f"first round; the 1-minute load read before each launch is each line's load1 "
                 f"({min(loads):.2f}-{max(loads):.2f}); compare within a round" if loads else "unknown"),
        **({"link": f"tbf {tbf} both directions", "tcp_congestion": cc} if mode == "netns" else {}),
    },
    "files": {
        "r<round>.jsonl": "one line per launch: round, start time (UTC), load1, then rank 0's line of "
                          "torch_styles.py (samples_per_s over the timed steps, step_ms: median step "
                          "time of rank 0, min and max, final loss)",
        "profile/": "where present (PROFILE=1 ROUNDS=0 bench/runs/torch_styles.sh MODE): one more launch "
                    "per world, style and backend with --profile (rank 0's torch profiler table) and "
                    "GYRE_TIMELINE (timeline_*.json.gz: gyre's spans per collective, every rank; gunzip for "
                    "tools/gyre_timeline.py; runs.jsonl: their lines)",
    },
}
with open(os.path.join(out, "meta.json"), "w") as f:
    json.dump(meta, f, indent=2)
    f.write("\n")
PY
"$PY" "$root/bench/runs/torch_styles_summary.py" "$out"
