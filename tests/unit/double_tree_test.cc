// The double binary tree's shape for every rank count from 1 to 64: one root per tree,
// consistent parent/child links, no cycle, every rank reached, every rank inner in at
// most one tree (exactly one for even counts; for odd counts one rank is a leaf in
// both), the depth bound, and the peer list.
#include <gtest/gtest.h>

#include <algorithm>
#include <queue>
#include <set>
#include <vector>

#include "base/error.h"
#include "collectives/double_tree.h"

namespace gyre {
namespace {

int ceilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

class DoubleTreeShape : public ::testing::TestWithParam<int> {};

TEST_P(DoubleTreeShape, IsTwoValidComplementaryTrees) {
  const int n = GetParam();
  std::vector<DoubleTree> all;
  for (int r = 0; r < n; ++r) all.push_back(doubleBinaryTree(r, n));

  int maxDepthSeen[2] = {0, 0};
  for (int t = 0; t < 2; ++t) {
    SCOPED_TRACE(::testing::Message() << "tree " << t << " of " << n << " ranks");
    int root = -1;
    for (int r = 0; r < n; ++r) {
      const TreeLinks& l = all[r].tree[t];
      EXPECT_GE(l.parent, -1);
      EXPECT_LT(l.parent, n);
      EXPECT_NE(l.parent, r);
      if (l.parent < 0) {
        EXPECT_EQ(root, -1) << "second root " << r;
        root = r;
      } else {
        // p is the parent of c iff c is a child of p.
        const TreeLinks& p = all[l.parent].tree[t];
        EXPECT_TRUE(p.children[0] == r || p.children[1] == r)
            << "rank " << r << "'s parent " << l.parent << " does not list it";
      }
      if (l.children[1] >= 0) {
        EXPECT_GE(l.children[0], 0) << "rank " << r << ": gap";
        EXPECT_NE(l.children[0], l.children[1]);
      }
      for (int c : l.children) {
        if (c < 0) continue;
        ASSERT_LT(c, n);
        EXPECT_EQ(all[c].tree[t].parent, r) << "child " << c << " of " << r;
      }
    }
    ASSERT_GE(root, 0) << "no root";
    if (n > 1) {
      EXPECT_GE(all[root].tree[t].childCount(), 1);
    }

    // Breadth first from the root: every rank exactly once (no cycle, all reached), and
    // the depth each rank reports.
    std::vector<int> depth(n, -1);
    std::queue<int> q;
    depth[root] = 0;
    q.push(root);
    int reached = 0;
    while (!q.empty()) {
      const int r = q.front();
      q.pop();
      ++reached;
      EXPECT_EQ(all[r].tree[t].depth, depth[r]) << "rank " << r;
      for (int c : all[r].tree[t].children) {
        if (c < 0) continue;
        ASSERT_EQ(depth[c], -1) << "rank " << c << " reached twice";
        depth[c] = depth[r] + 1;
        q.push(c);
      }
    }
    EXPECT_EQ(reached, n);
    maxDepthSeen[t] = *std::max_element(depth.begin(), depth.end());
    EXPECT_LE(maxDepthSeen[t], ceilLog2(n) + 1);
    for (int r = 0; r < n; ++r) EXPECT_EQ(all[r].maxDepth, maxDepthSeen[t]);
  }

  int leafInBoth = 0;
  for (int r = 0; r < n; ++r) {
    const int inner = (all[r].tree[0].childCount() > 0) + (all[r].tree[1].childCount() > 0);
    EXPECT_LE(inner, 1) << "rank " << r << " is inner in both trees of " << n;
    leafInBoth += inner == 0;

    std::set<int> peers;
    for (const TreeLinks& l : all[r].tree) {
      for (int p : {l.parent, l.children[0], l.children[1]}) {
        if (p >= 0) peers.insert(p);
      }
    }
    EXPECT_EQ(doubleTreePeers(r, n), std::vector<int>(peers.begin(), peers.end()))
        << "rank " << r << " of " << n;
  }
  // n - 1 ranks need parents and a parent has at most two children, so each tree needs
  // ceil((n - 1) / 2) inner ranks: the split cannot do better than this.
  EXPECT_EQ(leafInBoth, n % 2) << n << " ranks";
}

INSTANTIATE_TEST_SUITE_P(OneTo64, DoubleTreeShape, ::testing::Range(1, 65),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST(DoubleTree, SmallCountsByHand) {
  // 2 ranks: each is the other's root.
  DoubleTree a = doubleBinaryTree(0, 2), b = doubleBinaryTree(1, 2);
  EXPECT_EQ(a.tree[0].parent, 1);
  EXPECT_EQ(b.tree[0].parent, -1);
  EXPECT_EQ(b.tree[0].children[0], 0);
  EXPECT_EQ(a.tree[1].parent, -1);
  EXPECT_EQ(a.tree[1].children[0], 1);
  EXPECT_EQ(b.tree[1].parent, 0);
  // 5 ranks, tree 0 over positions 1..5 = ranks 0..4: 4 -> (2 -> (1, 3), 5).
  DoubleTree r3 = doubleBinaryTree(3, 5);
  EXPECT_EQ(r3.tree[0].parent, -1);
  EXPECT_EQ(r3.tree[0].children[0], 1);
  EXPECT_EQ(r3.tree[0].children[1], 4);
  // Tree 1 is shifted by one: rank 4 is its root, rank 0 sits at position 5.
  EXPECT_EQ(doubleBinaryTree(4, 5).tree[1].parent, -1);
  EXPECT_EQ(doubleBinaryTree(0, 5).tree[1].parent, 4);
  EXPECT_EQ(doubleTreePeers(0, 1), std::vector<int>{});
}

TEST(DoubleTree, RejectsRanksOutsideTheCommunicator) {
  EXPECT_THROW(doubleBinaryTree(3, 3), Error);
  EXPECT_THROW(doubleBinaryTree(-1, 3), Error);
  EXPECT_THROW(doubleBinaryTree(0, 0), Error);
}

}  // namespace
}  // namespace gyre
