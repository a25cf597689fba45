#!/bin/bash
# tools/rdma_bench.sh <build-dir>: gyre over rdma against perftest and against tcp, side by
# side in one boot of the soft-RoCE VM (tools/rdma_vm.sh, topology "pair": rank 0 on rxe_a,
# rank 1 on rxe_b, traffic across a veth pair). Everything there is emulated (TCG, and rxe
# is itself a software device), so only the ratios mean anything.
#   1. point to point: gyre-bench sendrecv 2 ranks 64K..4M vs ib_write_bw -b at 64K, 1M, 4M
#   2. latency: gyre-bench sendrecv 8 B vs ib_write_lat 8 B
#   3. 4-rank all-reduce 256K..4M over rdma vs tcp (ranks 0,1 on rxe_a, 2,3 on rxe_b)
set -uo pipefail
if [ -z "${RDMA_VM:-}" ]; then
  build=$(cd "${1:?usage: rdma_bench.sh <build-dir>}" && pwd -P)
  here=$(cd "$(dirname "$0")" && pwd -P)
  cp "$here/rdma_bench.sh" "$build/rdma_bench.sh"
  exec "$here/rdma_vm.sh" "$build" "bash ./rdma_bench.sh ."
fi
bin=$PWD/bin
# Each rank's device by rank: lower half on rxe_a, upper half on rxe_b.
cat > hca_by_rank.sh <<'W'
#!/bin/bash
if [ "$RANK" -lt $((WORLD_SIZE / 2)) ]; then d=$RDMA_DEV_A; else d=$RDMA_DEV_B; fi
export GYRE_IB_HCA="=$d"; exec "$@"
W
chmod +x hca_by_rank.sh
run() { echo "### $*"; "$@" 2>&1 | grep -v '^#  *[a-z]' ; }
counters() { for d in "$RDMA_DEV_A" "$RDMA_DEV_B"; do
  echo "# $d counters: $(cd /sys/class/infiniband/$d/ports/1/hw_counters && grep -H . * | grep -v ':0$' | tr '\n' ' ')"; done; }
export GYRE_SLOT_BYTES=${GYRE_SLOT_BYTES:-512K} GYRE_TIMEOUT=600
# gyre-bench sendrecv on 2 ranks moves data both ways at once (rank r sends to r+1 and
# receives from r-1), so perftest runs bidirectional too (-b: its figure is both directions).
for t in rdma tcp; do
  GYRE_TRANSPORT=$t run "$bin/gyrerun" -n 2 ./hca_by_rank.sh "$bin/gyre-bench" sendrecv -b 64K -e 4M -f 4 -n 10 -w 2
done
for s in 65536 1048576 4194304; do
  echo "### ib_write_bw -b -s $s -n 40 ($RDMA_DEV_A <-> $RDMA_DEV_B)"
  ib_write_bw -b -d "$RDMA_DEV_A" -x "$RDMA_GID_INDEX_A" -s $s -n 40 -F > /tmp/bw_srv.txt 2>&1 & srv=$!
  sleep 2
  ib_write_bw -b -d "$RDMA_DEV_B" -x "$RDMA_GID_INDEX_B" -s $s -n 40 -F 127.0.0.1 2>&1 | grep -A1 "#bytes"
  wait $srv
done
counters
for t in rdma tcp; do
  GYRE_TRANSPORT=$t run "$bin/gyrerun" -n 2 ./hca_by_rank.sh "$bin/gyre-bench" sendrecv -b 8 -e 8 -n 200 -w 20
done
GYRE_SPIN_US=1000000 GYRE_TRANSPORT=rdma run "$bin/gyrerun" -n 2 ./hca_by_rank.sh "$bin/gyre-bench" sendrecv -b 8 -e 8 -n 200 -w 20
echo "### ib_write_lat -s 8 -n 500"
ib_write_lat -d "$RDMA_DEV_A" -x "$RDMA_GID_INDEX_A" -s 8 -n 500 -F > /tmp/lat_srv.txt 2>&1 & srv=$!
sleep 2
ib_write_lat -d "$RDMA_DEV_B" -x "$RDMA_GID_INDEX_B" -s 8 -n 500 -F 127.0.0.1 2>&1 | grep -A1 "#bytes"
wait $srv
for t in rdma tcp; do
  GYRE_TRANSPORT=$t run "$bin/gyrerun" -n 4 ./hca_by_rank.sh "$bin/gyre-bench" all_reduce -b 256K -e 4M -f 4 -n 3 -w 1
done
counters
