#include "collectives/collective_table.h"

#include "base/error.h"
#include "collectives/all_gather.h"
#include "collectives/all_to_all.h"
#include "collectives/hierarchical_allgather.h"
#include "collectives/hierarchical_broadcast.h"
#include "collectives/reduce_scatter.h"
#include "collectives/ring_broadcast.h"
#include "collectives/ring_reduce.h"

namespace gyre {
namespace {

bool twoLevel(const ScheduleArgs& a) {
  return a.call.algo == static_cast<uint8_t>(AllReduceAlgo::kHierarchical);
}

void allReduceByAlgo(const ScheduleArgs& a) {
  for (const AllReduceRow* row : kAllReduceAlgorithms) {
    if (static_cast<uint8_t>(row->algo) == a.call.algo) return row->run(a);
  }
  fail(ErrorCode::kInternal, "rank {}: {} has no all-reduce algorithm {}", a.rank,
       describe(a.call), a.call.algo);
}

constexpr CollectiveRow kCollectives[] = {
    // kind, name, buffers, reduces, schedule
    {CollectiveKind::kAllReduce, "allreduce", BufferShape::kWhole, true, allReduceByAlgo},
    // A one-byte max all-reduce: nobody leaves before everyone's byte went round.
    {CollectiveKind::kBarrier, "barrier", BufferShape::kNone, false, allReduceByAlgo},
    // Broadcast, reduce, all-gather: call.algo kHierarchical runs the two-level form.
    {CollectiveKind::kBroadcast, "broadcast", BufferShape::kOneBuffer, false,
     [](const ScheduleArgs& a) {
       if (twoLevel(a)) {
         return hierarchicalBroadcast(a.ctx, a.pipes, a.topology, a.rank, a.call, a.recvbuf);
       }
       ringBroadcast(a.ctx, a.rank, a.size, a.call, a.recvbuf);
     }},
    {CollectiveKind::kReduce, "reduce", BufferShape::kToRoot, true,
     [](const ScheduleArgs& a) {
       if (twoLevel(a)) {
         return hierarchicalReduce(a.ctx, a.pipes, a.topology, a.rank, a.call, a.sendbuf,
                                   a.recvbuf);
       }
       ringReduce(a.ctx, a.rank, a.size, a.call, a.sendbuf, a.recvbuf);
     }},
    {CollectiveKind::kAllGather, "allgather", BufferShape::kGather, false,
     [](const ScheduleArgs& a) {
       if (twoLevel(a)) {
         return hierarchicalAllGather(a.ctx, a.pipes, a.topology, a.rank, a.call, a.sendbuf,
                                      a.recvbuf);
       }
       ringAllGather(a.ctx, a.rank, a.size, a.call, a.sendbuf, a.recvbuf);
     }},
    {CollectiveKind::kReduceScatter, "reducescatter", BufferShape::kScatter, true,
     [](const ScheduleArgs& a) {
       ringReduceScatter(a.ctx, a.rank, a.size, a.call, a.sendbuf, a.recvbuf);
     }},
    {CollectiveKind::kSendRecv, "send/recv", BufferShape::kPointToPoint, false, nullptr},
    {CollectiveKind::kAllToAll, "alltoall", BufferShape::kPerPeer, false,
     [](const ScheduleArgs& a) {
       pairwiseAllToAll(a.ctx, a.pipes, a.rank, a.size, a.call, a.sendbuf, a.recvbuf);
     }},
    {CollectiveKind::kAllToAllv, "alltoallv", BufferShape::kPerPeerSized, false,
     [](const ScheduleArgs& a) {
       pairwiseAllToAllv(a.ctx, a.pipes, a.rank, a.size, a.call, *a.blocks, a.sendbuf, a.recvbuf);
     }},
};

}  // namespace

const CollectiveRow* findCollectiveRow(CollectiveKind kind) {
  for (const CollectiveRow& row : kCollectives) {
    if (row.kind == kind) return &row;
  }
  return nullptr;
}

const CollectiveRow& collectiveRow(CollectiveKind kind) {
  if (const CollectiveRow* row = findCollectiveRow(kind)) return *row;
  fail(ErrorCode::kInternal, "collective kind {} has no row", static_cast<int>(kind));
}

const AllReduceRow& allReduceRow(AllReduceAlgo algo) {
  for (const AllReduceRow* row : kAllReduceAlgorithms) {
    if (row->algo == algo) return *row;
  }
  fail(ErrorCode::kInternal, "no all-reduce algorithm {}", static_cast<int>(algo));
}

bool rooted(BufferShape shape) {
  return shape == BufferShape::kOneBuffer || shape == BufferShape::kToRoot;
}

void runSchedule(const ScheduleArgs& args) {
  const CollectiveRow& row = collectiveRow(args.call.kind);
  if (!row.run) {
    fail(ErrorCode::kInternal, "rank {}: {} has no schedule", args.rank, describe(args.call));
  }
  row.run(args);
}

}  // namespace gyre
