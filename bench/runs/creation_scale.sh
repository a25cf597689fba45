#!/usr/bin/env bash
# Creation at scale on one host: how long N ranks take to start, create their
# communicator and run a first all-reduce, and what each rank holds meanwhile (file
# descriptors, threads, resident memory), for gyre, Gloo's C++ full mesh and Open MPI,
# in the same run, alternating their order per round.
#
#   PEERS_HARNESS=<the peers' harness: run_peers.sh, gloo_bench, mpi_bench> bench/runs/creation_scale.sh
#
# Per N (NS, default "8 64 256 1024") and round (ROUNDS, default 1), each peer runs:
#   small: an 8 B all-reduce, 5 timed ops (gyre-bench -b 8 -e 8 -n 5; gloo_bench and
#          mpi_bench with the same sweep and no pre-warm): its wall time is the launch,
#          creation and first all-reduces, the figure compared;
#   1mib:  a 1 MiB all-reduce, 5 ops: the same, with every pipe carrying data.
# Results are checked exactly by each benchmark (a wrong result is a failed row).
# Every launch runs under `timeout` (LAUNCH_TIMEOUT, default 300 s); a launch that
# fails or times out is a row with its status and the last line it printed. Before each
# launch, and while it runs, the host's available memory is read: below MIN_AVAIL_GIB
# (default 4) nothing more is started and a running launch is stopped (row "low-memory").
#
#   GYRE_BINS   "label=dir ..." gyre builds to compare (default "gyre=build/bin"); each dir
#               holds gyrerun and gyre-bench
#   PEERS       which to run (default "gloo mpi" plus every GYRE_BINS label)
#   GLOO_MAX_N / MPI_MAX_N / GYRE_MAX_N   skip a peer above this N (default: none)
#   OUT         results folder (default bench/results/creation_scale_1host)
#   APPEND=1    add to the rows already there (meta.json lists each invocation)
#   HOSTS       split each N over this many namespaced hosts (default 1: one host, no
#               namespaces; root only), their links shaped to NETNS_RATE (default 2gbit)
#               by tools/netns_hosts.sh; bench/runs/creation_scale_hosts.sh starts each peer
# Output: $OUT/meta.json and $OUT/rows.jsonl (one object per launch: peer, n, run, round,
# status, wall_s, and per sampled rank the largest fds, threads and RSS seen);
# bench/runs/creation_scale_summary.py prints the table.
set -uo pipefail
cd "$(dirname "$0")/../.."
source tools/peers_harness.sh
peers_harness_find || exit 2

NS=${NS:-"8 64 256 1024"}
ROUNDS=${ROUNDS:-1}
LAUNCH_TIMEOUT=${LAUNCH_TIMEOUT:-300}
MIN_AVAIL_GIB=${MIN_AVAIL_GIB:-4}
GYRE_BINS=${GYRE_BINS:-"gyre=build/bin"}
export HOSTS=${HOSTS:-1}
export NETNS_RATE=${NETNS_RATE:-2gbit}
if ((HOSTS == 1)); then OUT=${OUT:-bench/results/creation_scale_1host}
else OUT=${OUT:-bench/results/creation_scale_${HOSTS}hosts}
fi
mkdir -p "$OUT"
ROWS=$OUT/rows.jsonl
[[ ${APPEND:-0} == 1 ]] || : >"$ROWS"
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT
if ((HOSTS > 1)); then
  [[ $EUID -eq 0 ]] || { echo "creation_scale: HOSTS=$HOSTS needs root (ip netns, tc)" >&2; exit 2; }
  source tools/netns_hosts.sh
  trap 'netns_hosts_down "$HOSTS"; rm -rf "$LOGS"' EXIT
  netns_hosts_up "$HOSTS" "$NETNS_RATE" || exit 2
  export NETNS_TBF NETNS_TAG NETNS_NET
fi

declare -A GYRE_DIR
gyre_labels=()
for pair in $GYRE_BINS; do
  GYRE_DIR[${pair%%=*}]=$(cd "${pair#*=}" && pwd)
  gyre_labels+=("${pair%%=*}")
done
PEERS=${PEERS:-"${gyre_labels[*]} gloo mpi"}

make -s BUILD="$BUILD" -C "$PEERS_HARNESS" >/dev/null || { echo "peers' build failed" >&2; exit 1; }

avail_gib() { awk '/^MemAvailable:/ {printf "%d", $2 / 1048576}' /proc/meminfo; }

# The rank processes (named $2) below pid $1, at most 3, spread over the ranks.
rank_pids() {
  ps -e -o pid=,ppid=,comm= | awk -v root="$1" -v name="$2" '
    { parent[$1] = $2; comm[$1] = $3 }
    END {
      for (p in parent) {
        if (comm[p] != name) continue
        for (q = parent[p]; q > 1; q = parent[q]) if (q == root) { print p; break }
      }
    }' | sort -n | awk '{ a[NR] = $1 } END { if (NR) { print a[1]; if (NR > 2) print a[int(NR / 2)]; if (NR > 1) print a[NR] } }'
}

# Samples the ranks of launch $1 (rank program $2) every 0.2 s into $3 until it ends;
# stops it (TERM to the launcher we started) when memory runs low.
sample() {
  local launcher=$1 name=$2 out=$3 pid fds thr rss
  : >"$out"
  while kill -0 "$launcher" 2>/dev/null; do
    if (($(avail_gib) < MIN_AVAIL_GIB)); then
      echo "low-memory" >"$out.low"
      kill -TERM "$launcher" 2>/dev/null
      break
    fi
    for pid in $(rank_pids "$launcher" "$name"); do
      fds=$(ls /proc/"$pid"/fd 2>/dev/null | wc -l)
      thr=$(awk '/^Threads:/ {print $2}' /proc/"$pid"/status 2>/dev/null)
      rss=$(awk '/^VmRSS:/ {print $2}' /proc/"$pid"/status 2>/dev/null)
      [[ -n $thr && -n $rss ]] && echo "$fds $thr $rss" >>"$out"
    done
    sleep 0.2
  done
}

# run_one PEER N RUN ROUND RANKPROGRAM COMMAND...
run_one() {
  local peer=$1 n=$2 run=$3 round=$4 prog=$5
  shift 5
  local log=$LOGS/$peer.$n.$run.$round status wall last low=0
  if (($(avail_gib) < MIN_AVAIL_GIB)); then
    status=low-memory
    wall=null
    last="not started: $(avail_gib) GiB available"
  else
    local t0 t1 launcher rc
    t0=$(date +%s.%N)
    timeout --kill-after=10 "$LAUNCH_TIMEOUT" "$@" >"$log" 2>&1 &
    launcher=$!
    sample "$launcher" "$prog" "$log.samples" &
    local sampler=$!
    wait "$launcher"
    rc=$?
    t1=$(date +%s.%N)
    wait "$sampler"
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
    [[ -f $log.samples.low ]] && low=1
    if ((low)); then status=low-memory
    elif ((rc == 124 || rc == 137)); then status=timeout
    elif ((rc != 0)); then status="exit-$rc"
    else status=ok
    fi
    last=$(grep -v '^\s*$' "$log" | grep -iE "Out of bounds|#wrong" | tail -n 1 | cut -c1-200)
    if [[ $status != ok ]]; then
      last=$(grep -v '^\s*$' "$log" | grep -iE "error|fail|abort|killed|cannot|refused|signal|memory" | head -n 3 | tr '\n' ' ' | cut -c1-500)
      [[ -n $last ]] || last=$(grep -v '^\s*$' "$log" | tail -n 3 | tr '\n' ' ' | cut -c1-500)
    fi
  fi
  local fds thr rss
  read -r fds thr rss < <(awk 'BEGIN {f = t = r = 0} {if ($1 > f) f = $1; if ($2 > t) t = $2; if ($3 > r) r = $3}
    END {if (NR) printf "%d %d %.1f\n", f, t, r / 1024; else print "null null null"}' "$log.samples" 2>/dev/null || echo "null null null")
  python3 - "$peer" "$n" "$run" "$round" "$status" "$wall" "$fds" "$thr" "$rss" "$last" "$*" >>"$ROWS" <<'EOF'
import json, os, sys
peer, n, run, rnd, status, wall, fds, thr, rss, last, cmd = sys.argv[1:]
num = lambda s: None if s in ("null", "") else float(s)
print(json.dumps({"peer": peer, "n": int(n), "hosts": int(os.environ["HOSTS"]), "run": run, "round": int(rnd), "status": status,
                  "wall_s": num(wall), "rank_fds_max": num(fds), "rank_threads_max": num(thr),
                  "rank_rss_mib_max": num(rss), "said": last.strip(), "command": cmd}))
EOF
  printf '%-10s n=%-5s %-5s round %s: %-10s %8s s  fds %s threads %s rss %s MiB\n' \
    "$peer" "$n" "$run" "$round" "$status" "$wall" "$fds" "$thr" "$rss" >&2
}

launch() {  # PEER N RUN ROUND
  local peer=$1 n=$2 run=$3 round=$4 b e
  if [[ $run == small ]]; then b=8 e=8; else b=1M e=1M; fi
  if ((HOSTS > 1)); then
    local max=${peer^^}_MAX_N dir=$BUILD prog=${peer}_bench
    [[ $peer == gloo || $peer == mpi ]] || { max=GYRE_MAX_N dir=${GYRE_DIR[$peer]:?unknown peer $peer} prog=gyre-bench; }
    [[ -n ${!max:-} && $n -gt ${!max} ]] && return
    run_one "$peer" "$n" "$run" "$round" "$prog" bench/runs/creation_scale_hosts.sh "${peer/#gyre*/gyre}" \
      "$dir" "$HOSTS" $((n / HOSTS)) "$b"
    return
  fi
  case $peer in
    gloo)
      [[ -n ${GLOO_MAX_N:-} && $n -gt $GLOO_MAX_N ]] && return
      run_one gloo "$n" "$run" "$round" gloo_bench "$BUILD/gloo_bench" -N "$n" -a ring_chunked \
        --addr 127.0.0.1 -b "$b" -e "$e" -n 5 -m 5 -w 1 -p 0 --timeout "$LAUNCH_TIMEOUT" ;;
    mpi)
      [[ -n ${MPI_MAX_N:-} && $n -gt $MPI_MAX_N ]] && return
      run_one mpi "$n" "$run" "$round" mpi_bench mpirun --allow-run-as-root --oversubscribe \
        -np "$n" "$BUILD/mpi_bench" -t default -b "$b" -e "$e" -n 5 -m 5 -w 1 -p 0 ;;
    *)
      [[ -n ${GYRE_MAX_N:-} && $n -gt $GYRE_MAX_N ]] && return
      local dir=${GYRE_DIR[$peer]:?unknown peer $peer}
      run_one "$peer" "$n" "$run" "$round" gyre-bench "$dir/gyrerun" -n "$n" "$dir/gyre-bench" \
        -b "$b" -e "$e" -n 5 -w 1 ;;
  esac
}

read -ra peer_list <<<"$PEERS"
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for n in $NS; do
  for ((round = 0; round < ROUNDS; round++)); do
    # Alternating order: round r starts at peer (r + index of n) mod count.
    k=${#peer_list[@]}
    shift_by=$(((round + $(echo "$NS" | tr ' ' '\n' | grep -n "^$n$" | cut -d: -f1)) % k))
    for ((i = 0; i < k; i++)); do
      peer=${peer_list[$(((i + shift_by) % k))]}
      launch "$peer" "$n" small "$round"
      # A peer that could not create at this N is not tried again with more data.
      if tail -n 1 "$ROWS" | grep -q "\"peer\": \"$peer\", \"n\": $n, \"run\": \"small\", \"round\": $round, \"status\": \"\(timeout\|low-memory\)\""; then
        continue
      fi
      launch "$peer" "$n" 1mib "$round"
    done
  done
done

python3 - "$OUT/meta.json" "$started" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" \
  "$NS" "$ROUNDS" "$LAUNCH_TIMEOUT" "$PEERS" "$GYRE_BINS" <<'EOF'
import json, os, platform, subprocess, sys
out, started, load0, load1, ns, rounds, limit, peers, bins = sys.argv[1:]
hosts = int(os.environ["HOSTS"])
hosts_env = "HOSTS=%d NETNS_RATE=%s " % (hosts, os.environ["NETNS_RATE"]) if hosts > 1 else ""
def sh(*c):
    try: return subprocess.run(c, capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception: return ""
meta = {
    "command": "PEERS_HARNESS=<peers' harness> NS='%s' ROUNDS=%s GYRE_BINS='%s' %s"
               "bench/runs/creation_scale.sh" % (ns, rounds, bins, hosts_env),
    "commit": sh("git", "rev-parse", "--short", "HEAD"),
    "dirty": bool(sh("git", "status", "--porcelain", "--untracked-files=no")),
    "machine": "%d CPUs (%s), %.0f GiB, Linux %s" % (
        os.cpu_count(), next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                              if l.startswith("model name")), "?"),
        os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, platform.release()),
    "limits": {"nofile_hard": sh("sh", "-c", "ulimit -Hn"),
               "somaxconn": open("/proc/sys/net/core/somaxconn").read().strip()},
    "date": started, "load_before": load0, "load_after": load1,
    "ns": ns.split(), "rounds": int(rounds), "launch_timeout_s": int(limit), "peers": peers.split(),
    "gyre_bins": bins.split(),
    "hosts": hosts,
    "host_links": ("network namespaces on one bridge, each link tbf " + os.environ.get("NETNS_TBF", "")
                   + " both directions") if hosts > 1 else "one host, no namespaces",
    "runs": {"small": "8 B all-reduce, 5 timed ops, 1 warm-up", "1mib": "1 MiB all-reduce, 5 timed ops"},
    "measures": {"wall_s": "launch to exit of the launcher (start, creation, the ops, exit)",
                 "rank_*_max": "largest value seen over 0.2 s samples of up to 3 ranks' /proc"},
    "gloo": sh("sh", "-c", "dpkg-query -W -f '${Version}' libgloo-dev"),
    "openmpi": sh("sh", "-c", "mpirun --version | head -1"),
}
invocation = {k: meta.pop(k) for k in ("command", "commit", "dirty", "date", "load_before",
                                        "load_after", "ns", "rounds", "launch_timeout_s",
                                        "peers", "gyre_bins", "hosts")}
try:
    old = json.load(open(out)) if os.environ.get("APPEND") == "1" else None
except Exception:
    old = None
if old:
    old.setdefault("invocations", []).append(invocation)
    meta = old
else:
    meta = {**invocation, **meta, "invocations": [invocation]}
json.dump(meta, open(out, "w"), indent=1)
EOF
echo "rows: $ROWS" >&2
