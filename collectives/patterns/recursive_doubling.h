// Recursive-doubling all-reduce schedule for any number of ranks, as pure
// rank math (no I/O).
#pragma once

#include <array>
#include <cstddef>

namespace loom::patterns {

// The partners of one rank, one per step: at most 31 (n < 2^31), kept inline
// so planning a small all-reduce allocates nothing.
class Partners {
 public:
  void push_back(int peer) { v_[n_++] = peer; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int operator[](size_t k) const { return v_[k]; }
  const int* begin() const { return v_.data(); }
  const int* end() const { return v_.data() + n_; }

 private:
  std::array<int, 31> v_{};
  size_t n_ = 0;
};

// The schedule of one rank. Protocol (p = largest power of two <= n,
// extra = n - p):
//  1. Fold-in: each kFoldedOut rank sends its whole buffer to fold_peer and
//     then waits. A kCore rank with fold_peer >= 0 receives it and reduces
//     it into its own buffer (op(own, received)).
//  2. For k = 0 .. log2(p) - 1, each kCore rank exchanges its whole buffer
//     with partners[k] and sets buf = op(buf, received). Partners are
//     symmetric (partners[k] of my partner is me), and with bit-symmetric
//     ops (loom::ReduceInto) both sides get identical bits.
//  3. Fold-out: each kCore rank with fold_peer >= 0 sends the result to
//     fold_peer, which receives it as its final buffer.
// Which ranks fold: among the first 2*extra ranks the even ones fold out
// into their odd right neighbour; core ranks are the odd ones below 2*extra
// and all ranks from 2*extra up.
struct RecursiveDoublingPlan {
  enum Role { kCore, kFoldedOut };
  Role role;
  int fold_peer;              // -1 if none
  Partners partners;  // real ranks, one per step; empty for kFoldedOut
};

// Preconditions: n >= 1, 0 <= rank < n.
inline RecursiveDoublingPlan MakeRecursiveDoublingPlan(int rank, int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  RecursiveDoublingPlan plan{RecursiveDoublingPlan::kCore, -1, {}};
  if (rank < 2 * extra) {
    if (rank % 2 == 0) {
      plan.role = RecursiveDoublingPlan::kFoldedOut;
      plan.fold_peer = rank + 1;
      return plan;
    }
    plan.fold_peer = rank - 1;
  }
  // Core ranks are renumbered 0 .. p-1 for the power-of-two exchange.
  const int core = rank < 2 * extra ? rank / 2 : rank - extra;
  auto real_rank = [extra](int c) { return c < extra ? 2 * c + 1 : c + extra; };
  for (int bit = 1; bit < p; bit <<= 1) plan.partners.push_back(real_rank(core ^ bit));
  return plan;
}

}  // namespace loom::patterns
