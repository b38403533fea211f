// Tree and chain schedules as pure rank math: a binomial tree rooted at any
// rank (reduce, broadcast) and a chain (pipelined broadcast). No I/O.
#pragma once

#include <vector>

namespace loom::patterns {

// Preconditions for everything in this file: n >= 1, 0 <= rank < n,
// 0 <= root < n.
//
// Binomial tree: ranks are renumbered v = (rank - root) mod n so the root is
// v = 0. The parent of v > 0 is v with its lowest set bit cleared; the
// children of v are v + 2^k for every 2^k below v's lowest set bit (any k for
// the root) with v + 2^k < n. The subtree of v + 2^k holds at most 2^k ranks,
// the depth is at most ceil(log2 n), and a reduce that receives children in
// the order below takes exactly ceil(log2 n) rounds at the root.

// The parent of `rank`, or -1 for the root.
inline int BinomialParent(int rank, int n, int root) {
  const int v = ((rank - root) % n + n) % n;
  if (v == 0) return -1;
  return ((v & (v - 1)) + root) % n;
}

// The children of `rank` in increasing order of v: v+1, v+2, v+4, ... (so
// of increasing subtree capacity 1, 2, 4, ...; n may cut the last ones
// short). This is the order in which a reduce receives and combines them:
// acc = own; for c in children: acc = op(acc, from c). The child v+2^k is
// ready after k rounds, so this order never waits on a later child, and a
// fixed order means a fixed result. A broadcast sends in the reverse order
// (largest subtree first) to start the longest path earliest.
inline std::vector<int> BinomialChildren(int rank, int n, int root) {
  const int v = ((rank - root) % n + n) % n;
  const int limit = v == 0 ? n : (v & -v);  // children use bits below v's lowest set bit
  std::vector<int> children;
  for (int bit = 1; bit < limit && v + bit < n; bit <<= 1) children.push_back((v + bit + root) % n);
  return children;
}

// Chain (pipeline) from the root in rank order: root, root+1, ..., wrapping
// mod n. ChainNext is -1 at the last rank, ChainPrev is -1 at the root.
inline int ChainNext(int rank, int n, int root) {
  const int v = ((rank - root) % n + n) % n;
  return v + 1 < n ? (rank + 1) % n : -1;
}

inline int ChainPrev(int rank, int n, int root) {
  const int v = ((rank - root) % n + n) % n;
  return v == 0 ? -1 : (rank - 1 + n) % n;
}

}  // namespace loom::patterns
