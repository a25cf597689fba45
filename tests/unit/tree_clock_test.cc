// The tree all-reduce's clock (collectives/tree_clock.h): on every edge of both trees a
// slice sent at tick T is received at T + 1, up and down; and a simulation of every
// rank's pipe operations, in the order of kTreePhases, over FIFO pipes of 2 slots (the
// minimum) finishes for 2..70 ranks with every receive taking the slice it expects. The
// same simulation with the sends of a tick first deadlocks, so it can tell.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "collectives/double_tree.h"
#include "collectives/tree_clock.h"

namespace gyre {
namespace {

TEST(TreeClock, EverySliceCrossesEveryEdgeInOneTick) {
  for (int n = 2; n <= 64; ++n) {
    for (size_t slices : {size_t{1}, size_t{3}}) {
      for (int r = 0; r < n; ++r) {
        const DoubleTree dt = doubleBinaryTree(r, n);
        for (int t = 0; t < 2; ++t) {
          const TreeLinks& me = dt.tree[t];
          const TreeClock mine(dt.maxDepth, me.depth, slices);
          long ups = 0, downs = 0;
          for (long tick = 0; tick <= mine.lastTick() + 1; ++tick) {
            if (mine.upSlice(tick) >= 0) ++ups;
            if (mine.downSlice(tick) >= 0) ++downs;
            if (me.parent < 0) {
              EXPECT_EQ(mine.upSlice(tick), mine.downSlice(tick)) << "root " << r << "/" << n;
              continue;
            }
            const TreeLinks& parent = doubleBinaryTree(me.parent, n).tree[t];
            const TreeClock theirs(dt.maxDepth, parent.depth, slices);
            if (mine.upSlice(tick) >= 0) {
              EXPECT_EQ(theirs.upSlice(tick + 1), mine.upSlice(tick)) << r << "/" << n;
            }
            if (theirs.downSlice(tick) >= 0) {
              EXPECT_EQ(mine.downSlice(tick + 1), theirs.downSlice(tick)) << r << "/" << n;
            }
          }
          EXPECT_EQ(ups, static_cast<long>(slices));
          EXPECT_EQ(downs, static_cast<long>(slices));
          EXPECT_EQ(mine.downSlice(mine.lastTick()), static_cast<long>(slices) - 1);
        }
      }
    }
  }
}

// What travels: slice `slice` of tree `tree`, going up or down.
struct Label {
  int tree = 0;
  bool up = false;
  long slice = 0;
  bool operator==(const Label&) const = default;
};

// One step of a rank's program: wait for the head of the pipe from `peer` (and check it
// is `label`), release it, or post `label` to `peer` (which needs a free slot).
struct Action {
  enum Kind { kWait, kRelease, kPost } kind;
  int peer;
  Label label;
};

// Each rank's program for one all-reduce, as collectives/tree_allreduce.cc runs its
// primitives: the roles' actions tick by tick, phase by phase in `phases` order.
std::vector<std::vector<Action>> programs(int n, const size_t slices[2],
                                          const std::vector<TreePhase>& phases) {
  std::vector<std::vector<Action>> prog(n);
  for (int r = 0; r < n; ++r) {
    const DoubleTree dt = doubleBinaryTree(r, n);
    const TreeClock clocks[2] = {TreeClock(dt.maxDepth, dt.tree[0].depth, slices[0]),
                                 TreeClock(dt.maxDepth, dt.tree[1].depth, slices[1])};
    const long last = std::max(clocks[0].lastTick(), clocks[1].lastTick());
    auto& p = prog[r];
    for (long tick = 0; tick <= last; ++tick) {
      for (TreePhase phase : phases) {
        for (int t = 0; t < 2; ++t) {
          const TreeLinks& l = dt.tree[t];
          const long up = clocks[t].upSlice(tick), down = clocks[t].downSlice(tick);
          std::vector<int> kids;
          for (int c : l.children) {
            if (c >= 0) kids.push_back(c);
          }
          const bool leaf = kids.empty(), root = l.parent < 0;
          if (leaf && phase == TreePhase::kLeafRecv && down >= 0) {
            p.push_back({Action::kWait, l.parent, {t, false, down}});  // recv
            p.push_back({Action::kRelease, l.parent, {}});
          }
          if (leaf && phase == TreePhase::kLeafSend && up >= 0) {
            p.push_back({Action::kPost, l.parent, {t, true, up}});  // send
          }
          if (!leaf && !root && phase == TreePhase::kUp && up >= 0) {  // recvReduceSend
            for (int c : kids) p.push_back({Action::kWait, c, {t, true, up}});
            p.push_back({Action::kPost, l.parent, {t, true, up}});  // into the slot, held
            for (int c : kids) p.push_back({Action::kRelease, c, {}});
          }
          if (!leaf && !root && phase == TreePhase::kInnerDown && down >= 0) {  // recvCopySend
            p.push_back({Action::kWait, l.parent, {t, false, down}});
            p.push_back({Action::kRelease, l.parent, {}});
            for (int c : kids) p.push_back({Action::kPost, c, {t, false, down}});
          }
          if (root && phase == TreePhase::kUp && up >= 0) {  // recvReduceCopySend
            for (int c : kids) p.push_back({Action::kWait, c, {t, true, up}});
            for (int c : kids) p.push_back({Action::kRelease, c, {}});
            for (int c : kids) p.push_back({Action::kPost, c, {t, false, up}});
          }
        }
      }
    }
  }
  return prog;
}

// Runs the programs over FIFO pipes of `slots` slots; "" when all finish, else why not.
std::string simulate(int n, const std::vector<std::vector<Action>>& prog, size_t slots) {
  std::map<std::pair<int, int>, std::deque<Label>> pipe;  // (from, to)
  std::vector<size_t> pc(n, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < n; ++r) {
      while (pc[r] < prog[r].size()) {
        const Action& a = prog[r][pc[r]];
        if (a.kind == Action::kPost) {
          auto& q = pipe[{r, a.peer}];
          if (q.size() >= slots) break;  // no credit
          q.push_back(a.label);
        } else {
          auto& q = pipe[{a.peer, r}];
          if (q.empty()) break;  // nothing yet
          if (a.kind == Action::kWait && !(q.front() == a.label)) {
            return "rank " + std::to_string(r) + " received the wrong slice from rank " +
                   std::to_string(a.peer);
          }
          if (a.kind == Action::kRelease) q.pop_front();
        }
        ++pc[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    if (pc[r] < prog[r].size()) return "deadlock: rank " + std::to_string(r) + " is stuck";
  }
  for (const auto& [ends, q] : pipe) {
    if (!q.empty()) return "a slice was left in a pipe";
  }
  return "";
}

const std::vector<TreePhase> kScheduleOrder(std::begin(kTreePhases), std::end(kTreePhases));

TEST(TreeClock, EveryRankFinishesOnPipesOfTwoSlots) {
  for (int n = 2; n <= 70; ++n) {
    for (auto [s0, s1] : {std::pair<size_t, size_t>{1, 1}, {2, 1}, {5, 5}, {9, 8}}) {
      const size_t slices[2] = {s0, s1};
      EXPECT_EQ(simulate(n, programs(n, slices, kScheduleOrder), 2), "")
          << n << " ranks, " << s0 << "+" << s1 << " slices";
    }
  }
}

TEST(TreeClock, TheSimulationSeesADeadlockWhenSendsComeFirst) {
  const std::vector<TreePhase> sendsFirst = {TreePhase::kLeafSend, TreePhase::kUp,
                                             TreePhase::kInnerDown, TreePhase::kLeafRecv};
  const size_t slices[2] = {6, 6};
  int deadlocked = 0;
  for (int n = 2; n <= 8; ++n) {
    const std::string why = simulate(n, programs(n, slices, sendsFirst), 2);
    if (why.find("deadlock") != std::string::npos) ++deadlocked;
  }
  EXPECT_GT(deadlocked, 0);
}

}  // namespace
}  // namespace gyre
