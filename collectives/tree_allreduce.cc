#include "collectives/tree_allreduce.h"

#include <algorithm>
#include <optional>

#include "base/error.h"
#include "collectives/collective_table.h"
#include "collectives/cost_model.h"
#include "collectives/double_tree.h"
#include "collectives/schedule_math.h"
#include "collectives/tree_clock.h"
#include "transport/transport_options.h"

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
  // The cost model's tree assumes the same (kPipelineSlotBytes, collectives/cost_model.h).
  const size_t slice = std::min({trees[0].sliceElems(), trees[1].sliceElems(),
                                 std::max<size_t>(1, TransportOptions::kSlotBytes / dtypeSize(call.dtype))});
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

namespace {

// 2 floor(log2 n) + 2 steps (up, down, and the pipeline's fill); the ring's bytes times
// the measured ratio for this rank count (collectives/tuning.h).
double treeOneHost(size_t bytes, int size, const LinkCost& cost) {
  const double s = static_cast<double>(bytes) / cost.bytesPerUs;
  const double n = size;
  const double ringBytes = 2 * (n - 1) / n * s;
  return cost.alphaUs * (2 * floorLog2(size) + 2) +
         cost.treeBytesRatio[std::min(size, 8)] * ringBytes;
}

// Each tree edge carries its tree's half both ways.
double treeHostLinkBytes(size_t bytes, const HostTopology& t, int nicsPerHost) {
  const int n = t.size();
  const double s = static_cast<double>(bytes);
  HostLoad load(t, nicsPerHost);
  for (int r = 0; r < n; ++r) {
    const DoubleTree dt = doubleBinaryTree(r, n);
    for (const TreeLinks& links : dt.tree) {
      if (links.parent < 0) continue;
      load.edge(r, links.parent, s / 2);  // up: this tree's half
      load.edge(links.parent, r, s / 2);  // down
    }
  }
  return load.busiest();
}

// The critical chain: the path from the deepest rank up to the root (tree 0; tree 1
// mirrors it), which a slice climbs and then descends. Its summed alpha and how many of
// its hops cross hosts: near the leaves the hops stay inside a host, near the root they
// cross, so the mean over all edges would undercount the crossings.
struct TreePath {
  double alpha = 0;  // one way
  int hops = 0;
  int crossings = 0;
};
TreePath treePath(const HostTopology& t, const TwoLevelCost& c) {
  const int n = t.size();
  int deepest = 0, depth = -1;
  for (int r = 0; r < n; ++r) {
    const int d = doubleBinaryTree(r, n).tree[0].depth;
    if (d > depth) {
      depth = d;
      deepest = r;
    }
  }
  TreePath path;
  for (int r = deepest, guard = 0; guard < n; ++guard) {  // a path has < n hops
    const int parent = doubleBinaryTree(r, n).tree[0].parent;
    if (parent < 0) break;
    path.alpha += hopAlpha(t, c, r, parent);
    path.crossings += t.hostOf[r] != t.hostOf[parent];
    ++path.hops;
    r = parent;
  }
  return path;
}

double treePredict(size_t bytes, const HostTopology& t, const TwoLevelCost& cost) {
  const double n = t.size();
  const double s = static_cast<double>(bytes);
  const double link = treeHostLinkBytes(bytes, t, cost.nicsPerHost) / cost.inter.bytesPerUs;
  const double ringRankBytes = 2 * (n - 1) / n * s;
  const double tree = cost.intra.treeBytesRatio[std::min(t.size(), 8)];
  // The pipeline's fill: a slice climbs floor(log2 n) hops and comes down as many before
  // the first one is done, each hop moving a whole slice (one slot, or the half-buffer
  // when smaller), reduced by the CPU and, on cross edges, over the link: with one slice
  // a tree, most of the call.
  const TreePath path = treePath(t, cost);
  const double slice = std::min(s / 2, kPipelineSlotBytes);
  const double fillUs = 2 * (path.hops * slice / cost.intra.bytesPerUs +
                             path.crossings * slice / cost.inter.bytesPerUs);
  // 2 floor(log2 n) + 2 steps: up and down the path, and the pipeline's two extra.
  const double meanAlpha = path.hops > 0 ? path.alpha / path.hops : cost.inter.alphaUs;
  return 2 * path.alpha + 2 * meanAlpha + fillUs +
         std::max(link, tree * ringRankBytes / cost.intra.bytesPerUs);
}

}  // namespace

constinit const AllReduceRow kTreeAllReduce = {
    AllReduceAlgo::kTree,
    [](const ScheduleArgs& a) {
      treeAllReduce(a.ctx, a.pipes, a.rank, a.size, a.call, a.sendbuf, a.recvbuf);
    },
    [](const AllReducePlace&) { return true; },  // any ranks, any buffer
    treeOneHost,
    treePredict,
    treeHostLinkBytes,
};

}  // namespace gyre
