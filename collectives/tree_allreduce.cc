#include "collectives/tree_allreduce.h"

#include <algorithm>
#include <optional>

#include "base/error.h"
#include "base/options.h"
#include "collectives/double_tree.h"
#include "collectives/tree_clock.h"

// NCCL's runTreeUpDown, for two trees on one thread: per tree and role a few primitives,
// run on the clock of collectives/tree_clock.h (which says why it cannot deadlock).
//
//   role    up (towards the root)                   down (from the root)
//   leaf    send(own)                               recv(-> recvbuf)
//   inner   recvReduceSend(children + own -> parent) recvCopySend(parent -> recvbuf, children)
//   root    recvReduceCopySend(children + own -> recvbuf, children): up and down at once
//
// An inner rank's partial sum goes straight into its parent's send slot: it writes
// recvbuf once, with the final value.
//
// Why direct sends are safe. A send may read user memory until the slice has left (tcp
// writes from it). A leaf's up send reads sendbuf, whose slice the rank next writes (in
// place) with the final value from its parent, which exists only after the parent
// received our slice. Down sends read recvbuf's final value, never written again.

namespace gyre {
namespace {

enum class Role { kLeaf, kInner, kRoot };

// This rank in one tree: its half of the buffer, its clock and its primitives.
class TreeRank {
 public:
  TreeRank(const TreeLinks& links, int maxDepth, const PrimitiveContext& base,
           const PeerPipes& pipes, const CollectiveCall& call, uint32_t divisor)
      : links_(links),
        role_(links.childCount() == 0 ? Role::kLeaf
              : links.parent < 0      ? Role::kRoot
                                      : Role::kInner),
        maxDepth_(maxDepth) {
    auto make = [&](int from, int to, int from2, int to2) {
      return Primitives(linked(base, pipes, from, to, from2, to2), call, divisor);
    };
    const int c0 = links.children[0], c1 = links.children[1], parent = links.parent;
    switch (role_) {
      case Role::kLeaf: up_.emplace(make(parent, parent, -1, -1)); break;
      case Role::kInner:
        up_.emplace(make(c0, parent, c1, -1));
        down_.emplace(make(parent, c0, -1, c1));
        break;
      case Role::kRoot: up_.emplace(make(c0, c0, c1, c1)); break;
    }
  }

  size_t sliceElems() const {
    return std::min(up_->sliceElems(), down_ ? down_->sliceElems() : up_->sliceElems());
  }

  // Elements [begin, begin + count) of the buffer, `slice` at a time (at least one).
  void assign(size_t begin, size_t count, size_t slice) {
    begin_ = begin;
    count_ = count;
    slice_ = slice;
    clock_.emplace(maxDepth_, links_.depth, std::max<size_t>(1, (count + slice - 1) / slice));
  }
  long lastTick() const { return clock_->lastTick(); }

  // This tree's part of `phase` at `tick`.
  void step(TreePhase phase, long tick, const std::byte* in, std::byte* out, size_t elem) {
    auto at = [&](long j) { return (begin_ + std::min(j * slice_, count_)) * elem; };
    auto len = [&](long j) { return std::min(slice_, count_ - std::min(j * slice_, count_)); };
    const long up = clock_->upSlice(tick), down = clock_->downSlice(tick);
    // The timeline's phase: which direction moves a slice at this tick.
    const bool upward = phase == TreePhase::kUp || phase == TreePhase::kLeafSend;
    if ((upward ? up : down) >= 0 && up_) up_->phase(upward ? "tree up" : "tree down");
    switch (role_) {
      case Role::kLeaf:
        if (phase == TreePhase::kLeafRecv && down >= 0) up_->recv(out + at(down), len(down));
        if (phase == TreePhase::kLeafSend && up >= 0) up_->send(in + at(up), len(up));
        break;
      case Role::kInner:
        if (phase == TreePhase::kUp && up >= 0) up_->recvReduceSend(in + at(up), len(up));
        if (phase == TreePhase::kInnerDown && down >= 0) {
          down_->recvCopySend(out + at(down), len(down));
        }
        break;
      case Role::kRoot:
        if (phase == TreePhase::kUp && up >= 0) {
          up_->recvReduceCopySend(in + at(up), out + at(up), len(up));
        }
        break;
    }
  }

  void flush() {
    up_->flush();
    if (down_) down_->flush();
  }

 private:
  TreeLinks links_;
  Role role_;
  int maxDepth_;
  size_t begin_ = 0, count_ = 0, slice_ = 1;
  std::optional<TreeClock> clock_;
  std::optional<Primitives> up_;    // leaf: to and from the parent; root: both directions
  std::optional<Primitives> down_;  // inner only
};

}  // namespace

void treeAllReduce(const PrimitiveContext& base, const PeerPipes& pipes, int rank, int size,
                   const CollectiveCall& call, const void* sendbuf, void* recvbuf) {
  const DoubleTree dt = doubleBinaryTree(rank, size);
  const uint32_t divisor = static_cast<uint32_t>(size);
  TreeRank trees[2] = {TreeRank(dt.tree[0], dt.maxDepth, base, pipes, call, divisor),
                       TreeRank(dt.tree[1], dt.maxDepth, base, pipes, call, divisor)};
  // One slice size for both trees, so that every rank cuts every half alike, and at most
  // the default slot whatever the pipes hold: a slice climbs and comes down the tree's
  // depth before the pipeline runs full, so the tree pays its size per level (4 x 1
  // ranks, 2 Gbit/s tcp, 2-8 MiB: 63-68% of the link with 512 KiB slices, 71% with 128 KiB).
  // The cost model's tree assumes the same (topology_choice.cc, kPipelineSlotBytes).
  const size_t slice = std::min({trees[0].sliceElems(), trees[1].sliceElems(),
                                 std::max<size_t>(1, Options::kSlotBytes / dtypeSize(call.dtype))});
  if (slice == 0) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: a slot holds no {} element", rank,
         describe(call), dtypeName(call.dtype));
  }
  // Tree 0 takes the first ceil(count / 2) elements, tree 1 the rest.
  const size_t half = (call.count + 1) / 2;
  trees[0].assign(0, half, slice);
  trees[1].assign(half, call.count - half, slice);

  const auto* in = static_cast<const std::byte*>(sendbuf);
  auto* out = static_cast<std::byte*>(recvbuf);
  const size_t elem = dtypeSize(call.dtype);
  const long last = std::max(trees[0].lastTick(), trees[1].lastTick());
  for (long tick = 0; tick <= last; ++tick) {
    for (TreePhase phase : kTreePhases) {
      for (TreeRank& tree : trees) tree.step(phase, tick, in, out, elem);
    }
  }
  for (TreeRank& tree : trees) tree.flush();
}

}  // namespace gyre
