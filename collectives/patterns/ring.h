// Ring schedules as pure rank math: neighbours, which block each rank sends
// and receives at each step of reduce-scatter and all-gather, and how a
// buffer is split into blocks. No I/O; every function is constexpr-cheap.
#pragma once

#include <cstddef>

namespace loom::patterns {

// x mod n in [0, n) for any int x; n >= 1.
constexpr int PositiveMod(int x, int n) {
  return ((x % n) + n) % n;
}

// Ring order is rank order: r sends to r+1 and receives from r-1 (mod n).
// Preconditions for everything in this file: n >= 1, 0 <= rank < n.
constexpr int RingNext(int rank, int n) {
  return PositiveMod(rank + 1, n);
}
constexpr int RingPrev(int rank, int n) {
  return PositiveMod(rank - 1, n);
}

// Ring reduce-scatter over n blocks, steps s = 0 .. n-2. At step s rank r
// sends its partial block (r-s-1) mod n to RingNext and receives block
// (r-s-2) mod n from RingPrev, which it reduces into its own copy (the block
// it will send at step s+1). After n-1 steps rank r holds the reduction of
// block r over all ranks, each rank's contribution exactly once.
// Each received block is combined as op(local, received); with the
// bit-symmetric ops of loom::ReduceInto the order of the two does not
// matter, but the chain order around the ring is fixed, so every run gives
// the same bits.
constexpr int RingReduceScatterSendBlock(int rank, int n, int step) {
  return PositiveMod(rank - step - 1, n);
}
constexpr int RingReduceScatterRecvBlock(int rank, int n, int step) {
  return PositiveMod(rank - step - 2, n);
}

// Ring all-gather after the reduce-scatter above (rank r owns block r),
// steps s = 0 .. n-2: at step s rank r sends block (r-s) mod n to RingNext
// and receives block (r-s-1) mod n from RingPrev, a block it did not have.
constexpr int RingAllGatherSendBlock(int rank, int n, int step) {
  return PositiveMod(rank - step, n);
}
constexpr int RingAllGatherRecvBlock(int rank, int n, int step) {
  return PositiveMod(rank - step - 1, n);
}

// A contiguous run of elements [offset, offset + count).
struct Range {
  size_t offset;
  size_t count;
};

// Block i of `count` elements split into `nblocks` contiguous blocks, in
// order, covering [0, count) exactly. Boundaries are multiples of
// align_elems (e.g. a cache line or a SIMD width in elements); only the end
// of the last non-empty block may be unaligned, at `count`. With
// units = ceil(count / align_elems), each block gets floor or ceil of
// units / nblocks units (the earlier blocks the larger ones; only the very
// last unit may be partial); when there are fewer units than blocks the
// trailing blocks are empty (count 0, offset == count).
// Preconditions: nblocks >= 1, 0 <= i < nblocks; align_elems 0 counts as 1.
constexpr Range BlockRange(size_t count, int nblocks, int i, size_t align_elems = 1) {
  const size_t align = align_elems == 0 ? 1 : align_elems;
  const size_t units = (count + align - 1) / align;  // the last unit may be partial
  const size_t nb = static_cast<size_t>(nblocks);
  const size_t idx = static_cast<size_t>(i);
  const size_t base = units / nb;
  const size_t extra = units % nb;  // the first `extra` blocks get one more unit
  const size_t first_unit = idx * base + (idx < extra ? idx : extra);
  const size_t my_units = base + (idx < extra ? 1 : 0);
  const size_t begin = first_unit * align < count ? first_unit * align : count;
  const size_t end =
      (first_unit + my_units) * align < count ? (first_unit + my_units) * align : count;
  return Range{begin, end - begin};
}

}  // namespace loom::patterns
