// The double binary tree (NCCL's, after Sanders, Speck and Traeff): two binary trees
// over the same ranks such that every rank is an inner node in at most one of them.
// Each tree carries half of the buffer, so a rank sends and receives at most as much
// as an inner rank of one tree carrying all of it (2S for a buffer of S: about the
// ring's 2(n-1)/n S). Defined for every rank count >= 1.
//
// Construction: both trees are the same in-order binary tree over positions 1..size,
// where position x with lowest set bit b has the children x - b/2 and the first of
// x + b/2, x + b/4, ... that exists, and the root is the largest power of two <= size.
// Odd positions are exactly the leaves. Tree 0 puts rank r at position r + 1 (the odd
// ranks are inner). Tree 1 relabels the positions so that tree 0's inner ranks are its
// leaves: for even size it is mirrored (position size - r), for odd size it is shifted
// by one (position r, rank 0 at position size); mirroring an odd size would keep every
// rank's role, shifting makes rank 0 a leaf in both and the others swap roles.
//
// Contract: pure functions of (rank, size), identical on every rank. In each tree the
// parent/children relation is consistent (p is the parent of c iff c is a child of p),
// there is exactly one root and no cycle, every rank is reached from the root, every
// rank has children in at most one tree, and the depth is floor(log2(size)), at most
// ceil(log2(size)) + 1. Throws kInvalidArgument unless 0 <= rank < size.
#pragma once

#include <vector>

namespace gyre {

struct TreeLinks {
  int parent = -1;             // -1: the root
  int children[2] = {-1, -1};  // -1: none (children[0] is filled before children[1])
  int depth = 0;               // edges between this rank and the root

  int childCount() const { return (children[0] >= 0) + (children[1] >= 0); }
};

struct DoubleTree {
  TreeLinks tree[2];
  int maxDepth = 0;  // the deepest rank's depth, the same in both trees: floor(log2(size))
};

DoubleTree doubleBinaryTree(int rank, int size);

// Every rank this rank exchanges data with in either tree, sorted, without duplicates.
std::vector<int> doubleTreePeers(int rank, int size);

}  // namespace gyre
