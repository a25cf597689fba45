// The clock that runs both trees of the tree all-reduce (collectives/tree_allreduce.h) on
// one thread, in both directions at once, without deadlock on pipes of 2 slots.
//
// Ticks. Slice j of a tree goes up at tick j + M - d and down at tick j + M + d (M: the
// trees' depth, d: this rank's depth in the tree), so on every edge, both directions,
// both trees, a slice sent at tick T is received at T + 1; at the root (d = 0) a slice's
// up and down fall on the same tick, and a rank at depth d moves slice j down together
// with slice j + 2d up (the pipeline).
//
// Phases. Each tick, every rank does its work in the order of kTreePhases:
//   1. kLeafRecv   as a leaf, receive from the parent          (recv)
//   2. kUp         as inner or root, receive from the children (recvReduceSend; the root
//                  also sends the final slice down: recvReduceCopySend)
//   3. kInnerDown  as inner, receive from the parent and pass on (recvCopySend)
//   4. kLeafSend   as a leaf, send this rank's slice up        (send)
//
// Why no wait is circular. Take every rank through tick T together, all having finished
// T - 1: every receive takes a slice sent at T - 1, already there. A send waits for a
// credit only if its pipe still holds 2 slices. A pipe carries 1 slice per tick, except
// a -> b where a is a leaf child of b in one tree and b a leaf child of a in the other:
// it carries a's down slice (phase 2 or 3) and then a's up slice (phase 4). Its first
// send of the tick needs b's phase 1 (which frees the down slice of T - 1), its second
// b's phase 2 (the up slice); a root's phase-2 sends are first sends. So phase 1 waits
// for nobody, phases 2 and 3 for others' phase 1, phase 4 for others' phase 2: the tick
// ends. By Kahn's determinacy (each wait is on one pipe, satisfiable once satisfiable),
// every execution then finishes. On that pipe b receives in phase 1 (the down slice)
// before phase 2 (the up one): the FIFO order a sent them in.
//
// Contract: pure values, identical on every rank for the same (M, d, slices).
#pragma once

#include <cstddef>

namespace gyre {

enum class TreePhase { kLeafRecv, kUp, kInnerDown, kLeafSend };
inline constexpr TreePhase kTreePhases[] = {TreePhase::kLeafRecv, TreePhase::kUp,
                                            TreePhase::kInnerDown, TreePhase::kLeafSend};

class TreeClock {
 public:
  // maxDepth: M, the same on every rank; depth: this rank's d; slices >= 1.
  TreeClock(int maxDepth, int depth, size_t slices)
      : maxDepth_(maxDepth), depth_(depth), slices_(slices) {}

  // The slice this rank moves up / down at `tick`, or -1 when none.
  long upSlice(long tick) const { return slice(tick - maxDepth_ + depth_); }
  long downSlice(long tick) const { return slice(tick - maxDepth_ - depth_); }
  // The last tick at which this rank moves a slice (its last one down).
  long lastTick() const { return static_cast<long>(slices_) - 1 + maxDepth_ + depth_; }

 private:
  long slice(long j) const { return j >= 0 && j < static_cast<long>(slices_) ? j : -1; }

  int maxDepth_;
  int depth_;
  size_t slices_;
};

}  // namespace gyre
