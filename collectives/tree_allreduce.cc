#include "collectives/tree_allreduce.h"

#include <algorithm>
#include <optional>

#include "base/error.h"
#include "collectives/double_tree.h"

// The schedule. Slice j of tree t moves up and down on a virtual clock that every rank
// computes alike (M = the trees' depth, d = this rank's depth in tree t):
//
//   up(j)    at T = j + M - d: receive the children's slice j and reduce it with this
//            rank's (the root finalises into recvbuf), send the result to the parent;
//   down(j)  at T = j + M + d: receive the final slice j from the parent into recvbuf
//            (the root already has it), send it to the children.
//
// So a slice sent at T is received at T + 1, on every edge, in both directions and in
// both trees, and the up and down waves of consecutive slices overlap (a rank at depth
// d runs down(j) together with up(j + 2d): pipelining without a thread per direction).
// Each rank walks T = 0, 1, ... and at every T first does all its receives (the up
// ones, then the down ones, tree 0 before tree 1), then all its sends (same order).
//
// Why the slices on a pipe match. A pipe a -> b carries at most one slice of each kind
// per T: two up slices would make b inner in both trees, two down slices a. Both kinds
// on one pipe happen (a a leaf child of b in one tree, b a leaf child of a in the
// other, as for 2 ranks); then a sends its up slice before its down slice at T and b
// receives them in that order at T + 1. The pipe is FIFO and every slice carries the
// same tag, so this ordering, not the tag, is what pairs them; the tag and the length
// still catch ranks that run different calls.
//
// Why it cannot deadlock with K >= 2 slots per pipe. Consider the lock-step execution:
// at each T every rank does its receives (each receives a slice sent at T - 1, already
// posted), then every rank does its sends. Every pipe then holds at most the two
// slices of one T, so no send waits for a credit. The ranks are sequential programs
// over FIFO pipes whose blocking waits stay satisfiable once satisfiable (only the
// waiter consumes a slice or a credit): by Kahn's determinacy every execution does the
// same operations and, since this one finishes, any execution does. The final flush
// waits for nothing a peer still needs from us.
//
// Why direct sends are safe. A send may read user memory until the slice has left
// (tcp writes from it). Up sends read sendbuf (a leaf) or recvbuf's partial sum (an
// inner rank); the only later write to that slice is the final value from the parent,
// which exists only after the parent received our slice. Down sends read recvbuf's
// final value, never written again. In place (sendbuf == recvbuf) an inner rank reduces
// its own slice in place before anything reads it, and the trees' halves are disjoint.

namespace gyre {
namespace {

// One tree's part of the call, seen from this rank.
struct TreeRole {
  size_t begin = 0;   // first element of this tree's half
  size_t count = 0;   // elements in the half
  size_t slices = 1;  // at least one, even for an empty half
  int depth = 0;
  int children = 0;
  std::optional<Primitives> parent;
  std::optional<Primitives> child[2];
};

}  // namespace

void treeAllReduce(const PrimitiveContext& base, const PeerPipes& pipes, int rank, int size,
                   const CollectiveCall& call, const void* sendbuf, void* recvbuf) {
  const DoubleTree dt = doubleBinaryTree(rank, size);
  const uint32_t divisor = static_cast<uint32_t>(size);
  // One Primitives per neighbour, receiving from and sending to it.
  auto with = [&](int peer) { return Primitives(linked(base, pipes, peer, peer), call, divisor); };

  TreeRole roles[2];
  size_t slice = 0;
  for (int t = 0; t < 2; ++t) {
    const TreeLinks& links = dt.tree[t];
    TreeRole& role = roles[t];
    role.depth = links.depth;
    role.children = links.childCount();
    if (links.parent >= 0) role.parent.emplace(with(links.parent));
    for (int c = 0; c < role.children; ++c) role.child[c].emplace(with(links.children[c]));
    for (auto* p : {&role.parent, &role.child[0], &role.child[1]}) {
      if (*p) slice = slice ? std::min(slice, (*p)->sliceElems()) : (*p)->sliceElems();
    }
  }
  if (slice == 0) {
    fail(ErrorCode::kInvalidArgument, "rank {}: {}: a slot holds no {} element", rank,
         describe(call), dtypeName(call.dtype));
  }
  roles[0].count = (call.count + 1) / 2;
  roles[1].begin = roles[0].count;
  roles[1].count = call.count - roles[0].count;
  long last = 0;  // the last T at which this rank has something to do
  for (TreeRole& role : roles) {
    role.slices = std::max<size_t>(1, (role.count + slice - 1) / slice);
    last = std::max(last, static_cast<long>(role.slices) - 1 + dt.maxDepth + role.depth);
  }

  const size_t elem = dtypeSize(call.dtype);
  auto* in = static_cast<const std::byte*>(sendbuf);
  auto* out = static_cast<std::byte*>(recvbuf);
  // Slice j of `role`, if it has one: its byte offset and length in elements.
  struct Step {
    bool active = false;
    size_t at = 0, len = 0;
  };
  auto step = [&](const TreeRole& role, long j) {
    Step s;
    if (j < 0 || static_cast<size_t>(j) >= role.slices) return s;
    const size_t first = static_cast<size_t>(j) * slice;
    s.active = true;
    s.at = (role.begin + std::min(first, role.count)) * elem;
    s.len = role.count > first ? std::min(slice, role.count - first) : 0;
    return s;
  };

  for (long T = 0; T <= last; ++T) {
    Step up[2], down[2];
    for (int t = 0; t < 2; ++t) {
      up[t] = step(roles[t], T - dt.maxDepth + roles[t].depth);
      down[t] = step(roles[t], T - dt.maxDepth - roles[t].depth);
    }
    // Receives: the children's partial sums, reduced in a fixed order
    // (children[0] op own, then op children[1]); the root's last one is final.
    for (int t = 0; t < 2; ++t) {
      TreeRole& role = roles[t];
      if (!up[t].active || role.children == 0) continue;
      const bool root = !role.parent;
      void* acc = out + up[t].at;
      role.child[0]->recvReduce(in + up[t].at, acc, up[t].len, /*receivedIsLower=*/true,
                                root && role.children == 1);
      if (role.children == 2) {
        role.child[1]->recvReduce(acc, acc, up[t].len, /*receivedIsLower=*/false, root);
      }
    }
    for (int t = 0; t < 2; ++t) {
      if (down[t].active && roles[t].parent) roles[t].parent->recv(out + down[t].at, down[t].len);
    }
    // Sends: this rank's slice (a leaf) or partial sum up, the final value down.
    for (int t = 0; t < 2; ++t) {
      TreeRole& role = roles[t];
      if (!up[t].active || !role.parent) continue;
      role.parent->send(role.children ? out + up[t].at : in + up[t].at, up[t].len);
    }
    for (int t = 0; t < 2; ++t) {
      TreeRole& role = roles[t];
      if (!down[t].active) continue;
      for (int c = 0; c < role.children; ++c) role.child[c]->send(out + down[t].at, down[t].len);
    }
  }
  for (TreeRole& role : roles) {
    for (auto* p : {&role.parent, &role.child[0], &role.child[1]}) {
      if (*p) (*p)->flush();
    }
  }
}

}  // namespace gyre
