// The double binary tree (NCCL's, after Sanders, Speck and Traeff): two binary trees
// over the same ranks such that every rank is an inner node in at most one of them,
// so each rank sends and receives about the data of one full tree in total while
// each tree carries half of the buffer. Defined for every rank count >= 1.
//
// Contract: pure functions of (rank, size), identical on every rank. In each tree the
// parent/children relation is consistent (p is the parent of c iff c is a child of p),
// there is exactly one root and no cycle, and the depth is at most ceil(log2(size)) + 1.
#pragma once

#include <vector>

namespace gyre {

struct TreeLinks {
  int parent = -1;              // -1: the root
  int children[2] = {-1, -1};   // -1: none (children[0] is filled before children[1])

  int childCount() const { return (children[0] >= 0) + (children[1] >= 0); }
};

struct DoubleTree {
  TreeLinks tree[2];
};

DoubleTree doubleBinaryTree(int rank, int size);

// Every rank this rank exchanges data with in either tree, sorted, without duplicates.
std::vector<int> doubleTreePeers(int rank, int size);

}  // namespace gyre
