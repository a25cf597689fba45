#include "collectives/double_tree.h"

#include <algorithm>

#include "base/error.h"
#include "collectives/schedule_math.h"

namespace gyre {
namespace {

int lowestBit(int x) { return x & -x; }

// The root sits at the largest power of two <= size (see the header).
int rootPosition(int size) { return lowerPowerOfTwo(size); }

// The in-order tree over positions 1..size (see the header); 0: none.
int parentPosition(int x, int size) {
  const int b = lowestBit(x);
  // x is a left child of x + b (when bit 2b is clear) or the right child of x - b. A
  // left child whose natural parent is past the end hangs right below x - b instead.
  const int up = (x & (2 * b)) ? x - b : x + b;
  return up <= size ? up : x - b;
}

void childPositions(int x, int size, int out[2]) {
  out[0] = out[1] = 0;
  const int half = lowestBit(x) / 2;
  if (half == 0) return;  // odd positions are leaves
  out[0] = x - half;
  for (int h = half; h >= 1; h /= 2) {
    if (x + h <= size) {
      out[1] = x + h;
      return;
    }
  }
}

int depthOf(int x, int size) {
  int depth = 0;
  for (int root = rootPosition(size); x != root; x = parentPosition(x, size)) ++depth;
  return depth;
}

// Rank <-> position in tree t.
int positionOf(int t, int rank, int size) {
  if (t == 0) return rank + 1;
  if (size % 2 == 0) return size - rank;
  return rank == 0 ? size : rank;
}

int rankAt(int t, int x, int size) {
  if (t == 0) return x - 1;
  if (size % 2 == 0) return size - x;
  return x == size ? 0 : x;
}

}  // namespace

DoubleTree doubleBinaryTree(int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    fail(ErrorCode::kInvalidArgument, "rank {}: no double binary tree over {} ranks has it", rank,
         size);
  }
  DoubleTree dt;
  dt.maxDepth = floorLog2(size);
  for (int t = 0; t < 2; ++t) {
    TreeLinks& links = dt.tree[t];
    const int x = positionOf(t, rank, size);
    if (x != rootPosition(size)) links.parent = rankAt(t, parentPosition(x, size), size);
    int kids[2];
    childPositions(x, size, kids);
    for (int c = 0; c < 2; ++c) links.children[c] = kids[c] ? rankAt(t, kids[c], size) : -1;
    links.depth = depthOf(x, size);
  }
  return dt;
}

std::vector<int> doubleTreePeers(int rank, int size) {
  const DoubleTree dt = doubleBinaryTree(rank, size);
  std::vector<int> peers;
  for (const TreeLinks& links : dt.tree) {
    for (int peer : {links.parent, links.children[0], links.children[1]}) {
      if (peer >= 0) peers.push_back(peer);
    }
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

}  // namespace gyre
