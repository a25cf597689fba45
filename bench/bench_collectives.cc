#include "bench/bench_collectives.h"

#include <algorithm>

#include "base/error.h"

namespace gyre::bench {

const std::vector<CollectiveInfo>& allCollectives() {
  // busbw factors are nccl-tests' (its doc/PERFORMANCE.md): the bytes each rank's
  // busiest link carries per byte of `size`.
  static const std::vector<CollectiveInfo> kAll = {
      {CollectiveId::kAllReduce, "all_reduce", "allreduce", true, false, true, true,
       [](int n) { return 2.0 * (n - 1) / n; }},
      {CollectiveId::kAllGather, "all_gather", "allgather", false, false, true, true,
       [](int n) { return 1.0 * (n - 1) / n; }},
      {CollectiveId::kBroadcast, "broadcast", "broadcast", false, true, false, true,
       [](int) { return 1.0; }},
      {CollectiveId::kReduce, "reduce", "reduce", true, true, true, true, [](int) { return 1.0; }},
      {CollectiveId::kReduceScatter, "reduce_scatter", "reducescatter", true, false, true, true,
       [](int n) { return 1.0 * (n - 1) / n; }},
      {CollectiveId::kAllToAll, "alltoall", "all_to_all", false, false, true, false,
       [](int n) { return 1.0 * (n - 1) / n; }},
      {CollectiveId::kSendRecv, "sendrecv", "send_recv", false, false, true, false,
       [](int) { return 1.0; }},
  };
  return kAll;
}

const CollectiveInfo* findCollective(std::string_view name) {
  for (const CollectiveInfo& c : allCollectives()) {
    if (name == c.name || name == c.alias) return &c;
  }
  return nullptr;
}

Layout layoutFor(const CollectiveInfo& c, size_t bytes, size_t elemSize, int n) {
  const auto ranks = static_cast<size_t>(n);
  Layout l;
  switch (c.id) {
    case CollectiveId::kAllGather:
      l.count = bytes / elemSize / ranks;
      l.sendElems = l.count;
      l.recvElems = l.count * ranks;
      break;
    case CollectiveId::kReduceScatter:
      l.count = bytes / elemSize / ranks;
      l.sendElems = l.count * ranks;
      l.recvElems = l.count;
      break;
    case CollectiveId::kAllToAll:
      l.count = bytes / elemSize / ranks;
      l.sendElems = l.recvElems = l.count * ranks;
      break;
    case CollectiveId::kAllReduce:
    case CollectiveId::kBroadcast:
    case CollectiveId::kReduce:
    case CollectiveId::kSendRecv:
      l.count = bytes / elemSize;
      l.sendElems = l.recvElems = l.count;
      break;
  }
  l.elements = std::max(l.sendElems, l.recvElems);
  l.bytes = l.elements * elemSize;
  return l;
}

CollectiveRunner::CollectiveRunner(Communicator& comm, const CollectiveInfo& c, DataType dtype,
                                   ReduceOp op, int root, std::byte* send, std::byte* recv,
                                   size_t capacity)
    : comm_(comm),
      c_(c),
      dtype_(dtype),
      op_(op),
      root_(root),
      rank_(comm.rank()),
      n_(comm.size()),
      send_(send),
      recv_(recv),
      elemSize_(dtypeSize(dtype)),
      capacityElems_(capacity / dtypeSize(dtype)) {
  if (c_.reduces) {
    pattern_ = makePattern(dtype, op, rank_, n_);
    tile(send_, capacityElems_, pattern_.input, elemSize_);
    guard_ = pattern_.poison;
  } else {
    for (int r = 0; r < n_; ++r) {
      moved_.push_back(movedInput(dtype, r, n_));
      movedPoison_.push_back(complement(moved_.back()));
    }
    tile(send_, capacityElems_, moved_[static_cast<size_t>(rank_)], elemSize_);
    guard_ = movedPoison_[static_cast<size_t>(rank_)];
  }
}

CollectiveRunner::Args CollectiveRunner::args(const Layout& l, Group g) const {
  const size_t share = static_cast<size_t>(rank_) * l.count * elemSize_;
  if (g == Group::kOutOfPlace) return {send_, recv_};
  switch (c_.id) {
    case CollectiveId::kAllGather:
      return {recv_ + share, recv_};
    case CollectiveId::kReduceScatter:
      return {recv_, recv_ + share};
    default:
      return {recv_, recv_};
  }
}

void CollectiveRunner::run(const Layout& l, Group g) {
  const Args a = args(l, g);
  switch (c_.id) {
    case CollectiveId::kAllReduce:
      return comm_.allReduce(a.send, a.recv, l.count, dtype_, op_);
    case CollectiveId::kAllGather:
      return comm_.allGather(a.send, a.recv, l.count, dtype_);
    case CollectiveId::kBroadcast:
      return comm_.broadcast(a.recv, l.count, dtype_, root_);
    case CollectiveId::kReduce:
      return comm_.reduce(a.send, a.recv, l.count, dtype_, op_, root_);
    case CollectiveId::kReduceScatter:
      return comm_.reduceScatter(a.send, a.recv, l.count, dtype_, op_);
    case CollectiveId::kAllToAll:
      return comm_.allToAll(a.send, a.recv, l.count, dtype_);
    case CollectiveId::kSendRecv:
      // nccl-tests' sendrecv: a shift by one round the ring.
      return comm_.sendRecv(a.send, l.count, (rank_ + 1) % n_, a.recv, l.count,
                            (rank_ + n_ - 1) % n_, dtype_);
  }
}

void CollectiveRunner::prepareTimed(const Layout& l, Group g) {
  // Out of place, the ops read the inputs the constructor wrote and never write them.
  if (g == Group::kInPlace && c_.reduces) {
    tile(recv_, std::max(l.sendElems, l.recvElems), pattern_.neutral, elemSize_);
  }
}

void CollectiveRunner::poisonGuard(std::byte* base, size_t elems) const {
  tile(base + elems * elemSize_, kGuardElements, guard_, elemSize_);
}

uint64_t CollectiveRunner::countGuard(const std::byte* base, size_t elems) const {
  return countWrong(base + elems * elemSize_, kGuardElements, guard_, elemSize_);
}

uint64_t CollectiveRunner::check(const Layout& l, Group g) {
  if (l.sendElems > capacityElems_ || l.recvElems > capacityElems_) {
    fail(ErrorCode::kInternal, "rank {}: {}: {} elements do not fit the {}-element buffers", rank_,
         c_.name, std::max(l.sendElems, l.recvElems), capacityElems_);
  }
  return c_.reduces ? checkReduction(l, g) : checkMovement(l, g);
}

// all_reduce, reduce, reduce_scatter: the result is op over ranks of the inputs at the
// same position of the full buffer (reduce-scatter: of this rank's share).
uint64_t CollectiveRunner::checkReduction(const Layout& l, Group g) {
  const bool reduceNonRoot = c_.id == CollectiveId::kReduce && rank_ != root_;
  const size_t sharePhase =
      c_.id == CollectiveId::kReduceScatter ? static_cast<size_t>(rank_) * l.count : 0;
  const Args a = args(l, g);
  uint64_t wrong = 0;
  if (g == Group::kOutOfPlace) {
    tile(recv_, l.recvElems, pattern_.poison, elemSize_);
    poisonGuard(recv_, l.recvElems);
    run(l, g);
    // A non-root's recvbuf is not the reduce's to touch.
    wrong += countWrong(recv_, l.recvElems, reduceNonRoot ? pattern_.poison : pattern_.expected,
                        elemSize_, reduceNonRoot ? 0 : sharePhase);
    wrong += countGuard(recv_, l.recvElems);
    wrong += countWrong(send_, l.sendElems, pattern_.input, elemSize_);
    return wrong;
  }
  tile(recv_, l.sendElems, pattern_.input, elemSize_);
  poisonGuard(recv_, l.sendElems);
  run(l, g);
  if (reduceNonRoot) {
    wrong += countWrong(recv_, l.sendElems, pattern_.input, elemSize_);  // only read
  } else {
    wrong += countWrong(a.recv, l.recvElems, pattern_.expected, elemSize_, sharePhase);
  }
  wrong += countGuard(recv_, l.sendElems);
  return wrong;
}

// all_gather, broadcast, alltoall, sendrecv: rank p's data is moved_[p] laid from
// position 0 of its send buffer; each receive share starts poisoned with the complement
// of what it must end up holding.
uint64_t CollectiveRunner::checkMovement(const Layout& l, Group g) {
  const auto me = static_cast<size_t>(rank_);
  const size_t shareBytes = l.count * elemSize_;
  uint64_t wrong = 0;
  // Expected receive shares: (source rank, period phase) for share 0, 1, ...
  std::vector<std::pair<size_t, size_t>> shares;
  switch (c_.id) {
    case CollectiveId::kAllGather:
      for (size_t p = 0; p < static_cast<size_t>(n_); ++p) shares.push_back({p, 0});
      break;
    case CollectiveId::kAllToAll:
      // Block `me` of rank p's send buffer, which starts at position me * count.
      for (size_t p = 0; p < static_cast<size_t>(n_); ++p) shares.push_back({p, me * l.count});
      break;
    case CollectiveId::kBroadcast:
      shares.push_back({static_cast<size_t>(root_), 0});
      break;
    case CollectiveId::kSendRecv:
      shares.push_back({static_cast<size_t>((rank_ + n_ - 1) % n_), 0});
      break;
    default:
      fail(ErrorCode::kInternal, "rank {}: {} is not a data-movement check", rank_, c_.name);
  }
  for (size_t s = 0; s < shares.size(); ++s) {
    const auto [from, phase] = shares[s];
    const bool mine = g == Group::kInPlace && from == me;  // this rank's own input in place
    tile(recv_ + s * shareBytes, l.count, mine ? moved_[from] : movedPoison_[from], elemSize_,
         phase);
  }
  poisonGuard(recv_, l.recvElems);
  run(l, g);
  for (size_t s = 0; s < shares.size(); ++s) {
    const auto [from, phase] = shares[s];
    wrong += countWrong(recv_ + s * shareBytes, l.count, moved_[from], elemSize_, phase);
  }
  wrong += countGuard(recv_, l.recvElems);
  if (g == Group::kOutOfPlace) wrong += countWrong(send_, l.sendElems, moved_[me], elemSize_);
  return wrong;
}

}  // namespace gyre::bench
