#!/bin/bash
# tools/rdma_bench.sh <build-dir>: gyre over rdma against perftest and against tcp, side by
# side in one boot of the soft-RoCE VM (tools/rdma_vm.sh, topology "pair": rank 0 on rxe_a,
# rank 1 on rxe_b, traffic across a veth pair). Everything there is emulated (TCG, and rxe
# is itself a software device), so only the ratios mean anything; the rounds interleave
# the compared programs so that a change of host load hits them alike.
#   1. point to point, RDMA_BENCH_ROUNDS rounds (default 2) of: gyre-bench sendrecv 2 ranks
#      64K..16M over rdma; ib_write_bw -b at 64K, 1M, 4M, 16M; the same gyre over tcp
#   2. latency, RDMA_BENCH_ROUNDS rounds: gyre-bench sendrecv 8 B (rdma, tcp; default spin and
#      a 1 s spin, which busy-polls as perftest does) vs ib_write_lat 8 B
#   3. 4-rank all-reduce 256K..4M over rdma vs tcp (ranks 0,1 on rxe_a, 2,3 on rxe_b)
# RDMA_BENCH_PARTS: which of 1 2 3 to run (default "1 2 3"). RDMA_BENCH_MTUS: the veth MTUs
# to run part 1 at, in turn (default 1500: rxe's active MTU 1024; 9000 gives it 4096).
set -uo pipefail
if [ -z "${RDMA_VM:-}" ]; then
  build=$(cd "${1:?usage: rdma_bench.sh <build-dir>}" && pwd -P)
  here=$(cd "$(dirname "$0")" && pwd -P)
  cp "$here/rdma_bench.sh" "$build/rdma_bench.sh"
  exec "$here/rdma_vm.sh" "$build" "RDMA_BENCH_ROUNDS=${RDMA_BENCH_ROUNDS:-2} RDMA_BENCH_PARTS='${RDMA_BENCH_PARTS:-1 2 3}' RDMA_BENCH_MTUS='${RDMA_BENCH_MTUS:-1500}' bash ./rdma_bench.sh ."
fi
bin=$PWD/bin
parts=${RDMA_BENCH_PARTS:-1 2 3}
# Each rank's device by rank: lower half on rxe_a, upper half on rxe_b.
cat > /tmp/hca_by_rank.sh <<'W'
#!/bin/bash
if [ "$RANK" -lt $((WORLD_SIZE / 2)) ]; then d=$RDMA_DEV_A; else d=$RDMA_DEV_B; fi
export GYRE_IB_HCA="=$d"; exec "$@"
W
chmod +x /tmp/hca_by_rank.sh
run() { echo "### $*"; "$@" 2>&1 | grep -v '^#  *[a-z]' ; }
counters() { for d in "$RDMA_DEV_A" "$RDMA_DEV_B"; do
  echo "# $d counters: $(cd /sys/class/infiniband/$d/ports/1/hw_counters && grep -H . * | grep -v ':0$' | tr '\n' ' ')"; done; }
perftest() {  # perftest() <program> <args...>: server on rxe_a, client on rxe_b
  local prog=$1; shift
  "$prog" -d "$RDMA_DEV_A" -x "$RDMA_GID_INDEX_A" -F "$@" > /tmp/perftest_srv.txt 2>&1 & local srv=$!
  sleep 2
  "$prog" -d "$RDMA_DEV_B" -x "$RDMA_GID_INDEX_B" -F "$@" 127.0.0.1 2>&1 | grep -A1 "#bytes" | tail -1
  wait $srv
}
export GYRE_SLOT_BYTES=${GYRE_SLOT_BYTES:-512K} GYRE_TIMEOUT=600
echo "# host load when the VM booted: $(cat /proc/loadavg) (guest's own); GYRE_SLOT_BYTES=$GYRE_SLOT_BYTES"
# gyre-bench sendrecv on 2 ranks moves data both ways at once (rank r sends to r+1 and
# receives from r-1), so perftest runs bidirectional too (-b: its figure is both directions).
setMtu() {
  ip link set "$RDMA_NETDEV_A" mtu "$1" && ip link set "$RDMA_NETDEV_B" mtu "$1"
  sleep 1
  echo "## veth MTU $1: rxe active MTU $(cat /sys/class/infiniband/$RDMA_DEV_A/ports/1/active_mtu 2>/dev/null ||
    ibv_devinfo -d "$RDMA_DEV_A" | awk '/active_mtu/{print $2}')"
}
if [[ " $parts " == *" 1 "* ]]; then
  for mtu in ${RDMA_BENCH_MTUS:-1500}; do
  setMtu "$mtu"
  for ((round = 1; round <= ${RDMA_BENCH_ROUNDS:-2}; round++)); do
    echo "## MTU $mtu round $round"
    GYRE_TRANSPORT=rdma run "$bin/gyrerun" -n 2 /tmp/hca_by_rank.sh "$bin/gyre-bench" sendrecv -b 64K -e 16M -f 4 -n 4 -w 1
    for s in 65536 1048576 4194304 16777216; do
      n=$((s >= 16777216 ? 8 : s >= 4194304 ? 16 : 40))
      echo "### ib_write_bw -b -s $s -n $n ($RDMA_DEV_A <-> $RDMA_DEV_B)"
      perftest ib_write_bw -b -s $s -n $n
    done
    GYRE_TRANSPORT=tcp run "$bin/gyrerun" -n 2 /tmp/hca_by_rank.sh "$bin/gyre-bench" sendrecv -b 64K -e 16M -f 4 -n 4 -w 1
  done
  counters
  done
  setMtu 1500
fi
if [[ " $parts " == *" 2 "* ]]; then
  # Rounds of: gyre with the default spin (then sleep), gyre spinning for up to 1 s per
  # wait (what perftest does: it busy-polls), over rdma and tcp; then ib_write_lat.
  for ((round = 1; round <= ${RDMA_BENCH_ROUNDS:-2}; round++)); do
    echo "## latency round $round"
    for t in rdma tcp; do
      for spin in "" 1000000; do
        echo "### GYRE_TRANSPORT=$t GYRE_SPIN_US=${spin:-default} sendrecv 8 B"
        GYRE_SPIN_US=$spin GYRE_TRANSPORT=$t "$bin/gyrerun" -n 2 /tmp/hca_by_rank.sh "$bin/gyre-bench" sendrecv -b 8 -e 8 -n 200 -w 20 2>&1 | grep -E '^ +8 '
      done
    done
    echo "### ib_write_lat -s 8 -n 500"
    perftest ib_write_lat -s 8 -n 500
  done
fi
if [[ " $parts " == *" 3 "* ]]; then
  for t in rdma tcp; do
    GYRE_TRANSPORT=$t run "$bin/gyrerun" -n 4 /tmp/hca_by_rank.sh "$bin/gyre-bench" all_reduce -b 256K -e 4M -f 4 -n 3 -w 1
  done
  counters
fi
