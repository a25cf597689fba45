#!/bin/bash
# tools/rdma_bench.sh <build-dir>: gyre over rdma against perftest and against tcp, side by
# side in one boot of the soft-RoCE VM (tools/rdma_vm.sh, topology "pair": rank 0 on rxe_a,
# rank 1 on rxe_b, traffic across a veth pair). Everything there is emulated (TCG, and rxe
# is itself a software device), so only the ratios mean anything.
#   1. point to point: gyre-bench sendrecv 2 ranks 64K..16M vs ib_write_bw at 64K, 1M, 16M
#   2. latency: gyre-bench sendrecv 8 B vs ib_write_lat 8 B
#   3. 4-rank all-reduce 1M..16M over rdma vs tcp (ranks 0,1 on rxe_a, 2,3 on rxe_b)
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
export GYRE_SLOT_BYTES=${GYRE_SLOT_BYTES:-512K} GYRE_TIMEOUT=600
for t in rdma tcp; do
  GYRE_TRANSPORT=$t run "$bin/gyrerun" -n 2 ./hca_by_rank.sh "$bin/gyre-bench" sendrecv -b 64K -e 16M -f 4 -n 10 -w 2
done
for s in 65536 1048576 16777216; do
  n=$(( s >= 16777216 ? 20 : 200 ))
  echo "### ib_write_bw -s $s -n $n ($RDMA_DEV_A <- $RDMA_DEV_B)"
  ib_write_bw -d "$RDMA_DEV_A" -x "$RDMA_GID_INDEX_A" -s $s -n $n -F > /tmp/bw_srv.txt 2>&1 & srv=$!
  sleep 2
  ib_write_bw -d "$RDMA_DEV_B" -x "$RDMA_GID_INDEX_B" -s $s -n $n -F 127.0.0.1 2>&1 | grep -A1 "#bytes"
  wait $srv
done
for t in rdma tcp; do
  GYRE_TRANSPORT=$t run "$bin/gyrerun" -n 2 ./hca_by_rank.sh "$bin/gyre-bench" sendrecv -b 8 -e 8 -n 500 -w 20
done
echo "### ib_write_lat -s 8 -n 500"
ib_write_lat -d "$RDMA_DEV_A" -x "$RDMA_GID_INDEX_A" -s 8 -n 500 -F > /tmp/lat_srv.txt 2>&1 & srv=$!
sleep 2
ib_write_lat -d "$RDMA_DEV_B" -x "$RDMA_GID_INDEX_B" -s 8 -n 500 -F 127.0.0.1 2>&1 | grep -A1 "#bytes"
wait $srv
for t in rdma tcp; do
  GYRE_TRANSPORT=$t run "$bin/gyrerun" -n 4 ./hca_by_rank.sh "$bin/gyre-bench" all_reduce -b 1M -e 16M -f 4 -n 5 -w 1
done
