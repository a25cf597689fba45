#!/usr/bin/env bash
# One launch of bench/runs/creation_scale.sh across namespaced hosts (HOSTS > 1 there):
# the ranks split evenly over H network namespaces made by tools/netns_hosts.sh, each
# peer started as its users start it on a cluster. Returns non-zero when any part fails.
#
#   creation_scale_hosts.sh gyre DIR H L BYTES     gyrerun per host (--nnodes H --node-rank i
#                                                  --nproc-per-node L), gyre-bench -b/-e BYTES
#   creation_scale_hosts.sh gloo BUILD H L BYTES   gloo_bench per rank (--rank --size --store
#                                                  on a shared FileStore, --addr the host's)
#   creation_scale_hosts.sh mpi BUILD H L BYTES    one mpirun in host 0, each rank exec'd into
#                                                  its host's namespace; btl tcp,self (Open MPI
#                                                  sees one hostname, so vader would cross hosts)
# NETNS_TAG and NETNS_NET name the namespaces (tools/netns_hosts.sh); LAUNCH_TIMEOUT bounds
# gloo's rendezvous. Every rank checks its result exactly (the benchmarks do).
set -uo pipefail
NETNS_TAG=${NETNS_TAG:-gyb} NETNS_NET=${NETNS_NET:-10.216.0}
what=${1:?gyre|gloo|mpi|mpi-rank} dir=${2:-} H=${3:-} L=${4:-} bytes=${5:-}
ops=(-b "$bytes" -e "$bytes" -n 5)

case $what in
  mpi-rank)  # mpirun's program: rank R runs in host R / L's namespace
    shift 5
    exec ip netns exec "${NETNS_TAG}$((OMPI_COMM_WORLD_RANK / L))" "$@" ;;
  gyre)
    port=$((29700 + RANDOM % 200))
    pids=()
    for ((i = H - 1; i >= 0; i--)); do
      ip netns exec "${NETNS_TAG}$i" "$dir/gyrerun" --nnodes "$H" --node-rank "$i" \
        --nproc-per-node "$L" --master-addr "$NETNS_NET.1" --master-port "$port" \
        "$dir/gyre-bench" "${ops[@]}" -w 1 &
      pids+=($!)
    done ;;
  gloo)
    store=$(mktemp -d)
    trap 'rm -rf "$store"' EXIT
    pids=()
    for ((r = 0; r < H * L; r++)); do
      cmd=(ip netns exec "${NETNS_TAG}$((r / L))" "$dir/gloo_bench" --rank "$r" --size $((H * L))
        --store "$store" --addr "$NETNS_NET.$((r / L + 1))" -a ring_chunked "${ops[@]}" -m 5
        -w 1 -p 0 --timeout "${LAUNCH_TIMEOUT:-300}")
      if ((r == 0)); then "${cmd[@]}" & else "${cmd[@]}" >/dev/null & fi  # errors from any rank
      pids+=($!)
    done ;;
  mpi)
    PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=$NETNS_NET.0/24 \
      exec ip netns exec "${NETNS_TAG}0" mpirun --allow-run-as-root --oversubscribe \
      -np $((H * L)) --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$NETNS_NET.0/24" \
      --mca oob_tcp_if_include "$NETNS_NET.0/24" "$0" mpi-rank - "$H" "$L" - \
      "$dir/mpi_bench" -t default "${ops[@]}" -m 5 -w 1 -p 0 ;;
  *) echo "creation_scale_hosts.sh: unknown '$what'" >&2; exit 2 ;;
esac

rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit "$rc"
