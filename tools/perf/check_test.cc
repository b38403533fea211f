// Tests of the perf data check: the pattern, the CPU reference, and that
// simulated collectives pass and corrupted ones fail, for every type and op.
#include "tools/perf/check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "collectives/reduce/reduce.h"

namespace loom::perf {
namespace {

using Bytes = std::vector<unsigned char>;

const RedOp kAllOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg};

std::vector<DataType> AllTypes() {
  std::vector<DataType> out;
  for (int i = 0; i < kNumDataTypes; ++i) out.push_back(static_cast<DataType>(i));
  return out;
}

Bytes Filled(DataType t, RedOp op, int rank, size_t first, size_t count) {
  Bytes b(count * SizeOf(t));
  FillPattern(b.data(), t, op, rank, first, count);
  return b;
}

// Element-wise a = a op b with the library's arithmetic, written
// independently of check.cc: integers wrap in their own width, half and
// bfloat16 go through fp32 and round back after every step.
template <typename T>
T Combine(T a, T b, RedOp op) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return static_cast<T>(a + b);
    case RedOp::kProd:
      return static_cast<T>(a * b);
    case RedOp::kMax:
      return std::max(a, b);
    case RedOp::kMin:
      return std::min(a, b);
  }
  return a;
}

template <typename T>
void CombineTyped(unsigned char* acc, const unsigned char* in, size_t count, RedOp op) {
  for (size_t i = 0; i < count; ++i) {
    T a, b;
    std::memcpy(&a, acc + i * sizeof(T), sizeof(T));
    std::memcpy(&b, in + i * sizeof(T), sizeof(T));
    // Unsigned arithmetic for the integer wrap without UB.
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      using U = std::make_unsigned_t<T>;
      if (op == RedOp::kSum || op == RedOp::kAvg || op == RedOp::kProd) {
        a = static_cast<T>(Combine<U>(static_cast<U>(a), static_cast<U>(b), op));
      } else {
        a = Combine(a, b, op);
      }
    } else {
      a = Combine(a, b, op);
    }
    std::memcpy(acc + i * sizeof(T), &a, sizeof(T));
  }
}

void CombineInto(Bytes& acc, const Bytes& in, DataType t, RedOp op) {
  const size_t n = acc.size() / SizeOf(t);
  switch (t) {
    case DataType::kInt8:
      return CombineTyped<int8_t>(acc.data(), in.data(), n, op);
    case DataType::kUint8:
      return CombineTyped<uint8_t>(acc.data(), in.data(), n, op);
    case DataType::kInt32:
      return CombineTyped<int32_t>(acc.data(), in.data(), n, op);
    case DataType::kUint32:
      return CombineTyped<uint32_t>(acc.data(), in.data(), n, op);
    case DataType::kInt64:
      return CombineTyped<int64_t>(acc.data(), in.data(), n, op);
    case DataType::kUint64:
      return CombineTyped<uint64_t>(acc.data(), in.data(), n, op);
    case DataType::kFloat32:
      return CombineTyped<float>(acc.data(), in.data(), n, op);
    case DataType::kFloat64:
      return CombineTyped<double>(acc.data(), in.data(), n, op);
    case DataType::kFloat16:
    case DataType::kBfloat16: {
      const bool half = t == DataType::kFloat16;
      for (size_t i = 0; i < n; ++i) {
        uint16_t a, b;
        std::memcpy(&a, acc.data() + 2 * i, 2);
        std::memcpy(&b, in.data() + 2 * i, 2);
        const float fa = half ? HalfToFloat(a) : Bf16ToFloat(a);
        const float fb = half ? HalfToFloat(b) : Bf16ToFloat(b);
        const float r = Combine(fa, fb, op);
        a = half ? FloatToHalf(r) : FloatToBf16(r);
        std::memcpy(acc.data() + 2 * i, &a, 2);
      }
      return;
    }
  }
}

// kAvg's final division, like loom (integers truncate, floats divide once).
void DivideInto(Bytes& acc, DataType t, int nranks) {
  const size_t n = acc.size() / SizeOf(t);
  for (size_t i = 0; i < n; ++i) {
    unsigned char* p = acc.data() + i * SizeOf(t);
    auto div = [&](auto tag) {
      decltype(tag) v;
      std::memcpy(&v, p, sizeof(v));
      v = static_cast<decltype(tag)>(v / nranks);  // divisor not narrowed to the type
      std::memcpy(p, &v, sizeof(v));
    };
    switch (t) {
      case DataType::kInt8:
        div(int8_t{});
        break;
      case DataType::kUint8:
        div(uint8_t{});
        break;
      case DataType::kInt32:
        div(int32_t{});
        break;
      case DataType::kUint32:
        div(uint32_t{});
        break;
      case DataType::kInt64:
        div(int64_t{});
        break;
      case DataType::kUint64:
        div(uint64_t{});
        break;
      case DataType::kFloat32:
        div(float{});
        break;
      case DataType::kFloat64:
        div(double{});
        break;
      case DataType::kFloat16:
      case DataType::kBfloat16: {
        const bool half = t == DataType::kFloat16;
        uint16_t h;
        std::memcpy(&h, p, 2);
        const float f = (half ? HalfToFloat(h) : Bf16ToFloat(h)) / static_cast<float>(nranks);
        h = half ? FloatToHalf(f) : FloatToBf16(f);
        std::memcpy(p, &h, 2);
        break;
      }
    }
  }
}

// The all-reduce of ranks' patterns, combining in the given rank order.
Bytes SimulatedReduce(DataType t, RedOp op, int nranks, size_t first, size_t count, bool reverse) {
  Bytes acc = Filled(t, op, reverse ? nranks - 1 : 0, first, count);
  for (int i = 1; i < nranks; ++i) {
    CombineInto(acc, Filled(t, op, reverse ? nranks - 1 - i : i, first, count), t, op);
  }
  if (op == RedOp::kAvg) DivideInto(acc, t, nranks);
  return acc;
}

TEST(PerfCheck, PatternIsSmallAndVaried) {
  for (const RedOp op : kAllOps) {
    std::set<int> seen;
    for (int rank = 0; rank < 8; ++rank) {
      for (size_t i = 0; i < 1000; ++i) {
        const int v = PatternValue(op, rank, i);
        if (op == RedOp::kProd) {
          EXPECT_TRUE(v == 1 || v == 2);
        } else {
          EXPECT_TRUE(v >= 0 && v <= 3);
        }
        seen.insert(v);
      }
    }
    EXPECT_EQ(seen.size(), op == RedOp::kProd ? 2u : 4u);
  }
  // Deterministic, and ranks differ.
  EXPECT_EQ(PatternValue(RedOp::kSum, 3, 77), PatternValue(RedOp::kSum, 3, 77));
  int differ = 0;
  for (size_t i = 0; i < 100; ++i) {
    differ += PatternValue(RedOp::kSum, 0, i) != PatternValue(RedOp::kSum, 1, i);
  }
  EXPECT_GT(differ, 50);
}

TEST(PerfCheck, FillMatchesPatternInEveryType) {
  for (const DataType t : AllTypes()) {
    const Bytes b = Filled(t, RedOp::kSum, 2, 10, 64);
    EXPECT_EQ(CountWrongCopied(b.data(), t, RedOp::kSum, 2, 10, 64), 0u) << Name(t);
    // The same data seen as another rank's, or at another index, is wrong.
    EXPECT_GT(CountWrongCopied(b.data(), t, RedOp::kSum, 3, 10, 64), 16u) << Name(t);
    EXPECT_GT(CountWrongCopied(b.data(), t, RedOp::kSum, 2, 11, 64), 16u) << Name(t);
  }
}

class PerfCheckReduce : public ::testing::TestWithParam<int> {};

TEST_P(PerfCheckReduce, SimulatedAllReducePassesEveryTypeAndOp) {
  const int nranks = GetParam();
  const size_t count = 257;  // odd, not a multiple of anything
  for (const DataType t : AllTypes()) {
    for (const RedOp op : kAllOps) {
      for (const bool reverse : {false, true}) {
        Bytes out = SimulatedReduce(t, op, nranks, 5, count, reverse);
        EXPECT_EQ(CountWrongReduced(out.data(), t, op, nranks, 5, count), 0u)
            << Name(t) << " " << Name(op) << " n=" << nranks << " reverse=" << reverse;
        // Every corrupted element is caught.
        CorruptElement(out.data(), t, 0);
        CorruptElement(out.data(), t, count - 1);
        EXPECT_EQ(CountWrongReduced(out.data(), t, op, nranks, 5, count), 2u)
            << Name(t) << " " << Name(op) << " n=" << nranks;
      }
    }
  }
}

TEST_P(PerfCheckReduce, MissingRankIsCaught) {
  const int nranks = GetParam();
  for (const DataType t : AllTypes()) {
    for (const RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kAvg}) {
      // The check expects one rank more than contributed.
      Bytes out = SimulatedReduce(t, op, nranks, 0, 512, false);
      EXPECT_GT(CountWrongReduced(out.data(), t, op, nranks + 1, 0, 512), 16u)
          << Name(t) << " " << Name(op) << " n=" << nranks;
    }
  }
}

// mulsum: each rank's sum pattern times MulSumScalar(rank) (1 or 2: a
// doubling is the input added to itself), then summed; a plain sum of the
// same inputs is wrong.
TEST_P(PerfCheckReduce, MulSumPassesEveryTypeAndAPlainSumDoesNot) {
  const int nranks = GetParam();
  const size_t count = 257;
  for (const DataType t : AllTypes()) {
    Bytes acc;
    for (int r = 0; r < nranks; ++r) {
      Bytes in = Filled(t, RedOp::kSum, r, 5, count);
      ASSERT_TRUE(MulSumScalar(r) == 1 || MulSumScalar(r) == 2);
      if (MulSumScalar(r) == 2) CombineInto(in, Bytes(in), t, RedOp::kSum);
      if (r == 0) {
        acc = in;
      } else {
        CombineInto(acc, in, t, RedOp::kSum);
      }
    }
    EXPECT_EQ(CountWrongReduced(acc.data(), t, PerfOp::MulSum(), nranks, 5, count), 0u)
        << Name(t) << " n=" << nranks;
    if (nranks >= 2) {
      const Bytes plain = SimulatedReduce(t, RedOp::kSum, nranks, 5, count, false);
      EXPECT_GT(CountWrongReduced(plain.data(), t, PerfOp::MulSum(), nranks, 5, count), 16u)
          << Name(t) << " n=" << nranks;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, PerfCheckReduce, ::testing::Values(1, 2, 3, 4, 7, 8, 16));

TEST(PerfCheck, LargeRankCountsStayWithinTolerance) {
  // 200 ranks: bfloat16 sums leave the exact range (3 * 200 > 256) and
  // round along the way; int8 sums wrap. Both must still pass.
  for (const DataType t : {DataType::kBfloat16, DataType::kFloat16, DataType::kInt8}) {
    for (const RedOp op : {RedOp::kSum, RedOp::kAvg, RedOp::kProd}) {
      const Bytes out = SimulatedReduce(t, op, 200, 0, 128, false);
      EXPECT_EQ(CountWrongReduced(out.data(), t, op, 200, 0, 128), 0u)
          << Name(t) << " " << Name(op);
    }
  }
}

TEST(PerfCheck, NcclStyleAvgPassesForFloats) {
  // NCCL's avg pre-multiplies each input by 1/n and sums: a few roundings
  // more than loom's single division; the tolerance must accept it.
  const int nranks = 3;
  const size_t count = 300;
  for (const DataType t : {DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32}) {
    Bytes acc;
    for (int r = 0; r < nranks; ++r) {
      Bytes in(count * SizeOf(t));
      for (size_t i = 0; i < count; ++i) {
        const float v = static_cast<float>(PatternValue(RedOp::kAvg, r, i)) / nranks;
        if (t == DataType::kFloat32) {
          std::memcpy(in.data() + 4 * i, &v, 4);
        } else {
          const uint16_t h = t == DataType::kFloat16 ? FloatToHalf(v) : FloatToBf16(v);
          std::memcpy(in.data() + 2 * i, &h, 2);
        }
      }
      if (r == 0) {
        acc = in;
      } else {
        CombineInto(acc, in, t, RedOp::kSum);
      }
    }
    EXPECT_EQ(CountWrongReduced(acc.data(), t, RedOp::kAvg, nranks, 0, count), 0u) << Name(t);
  }
}

TEST(PerfCheck, PoisonIsWrong) {
  for (const DataType t : AllTypes()) {
    for (const RedOp op : kAllOps) {
      Bytes poisoned(64 * SizeOf(t), 0xFF);
      EXPECT_EQ(CountWrongReduced(poisoned.data(), t, op, 4, 0, 64), 64u)
          << Name(t) << " " << Name(op);
    }
    Bytes poisoned(64 * SizeOf(t), 0xFF);
    EXPECT_EQ(CountWrongCopied(poisoned.data(), t, RedOp::kSum, 0, 0, 64), 64u) << Name(t);
  }
}

// --- ExpectationFor + CountWrong on simulated collectives ------------------

constexpr int kRanks = 3;

TEST(PerfCheck, ReduceScatterExpectation) {
  const DataType t = DataType::kInt32;
  const Geometry g = ComputeGeometry(Collective::kReduceScatter, 3 * 40 * 4, 4, kRanks);
  ASSERT_EQ(g.recv_count, 40u);
  const Bytes full = SimulatedReduce(t, RedOp::kMax, kRanks, 0, g.send_count, false);
  for (int rank = 0; rank < kRanks; ++rank) {
    const Expectation e = ExpectationFor(Collective::kReduceScatter, g, rank, kRanks, 0);
    const unsigned char* mine = full.data() + rank * g.recv_count * 4;
    EXPECT_EQ(CountWrong(mine, t, RedOp::kMax, kRanks, e), 0u) << rank;
    // Another rank's slice is not ours.
    const unsigned char* other = full.data() + ((rank + 1) % kRanks) * g.recv_count * 4;
    EXPECT_GT(CountWrong(other, t, RedOp::kMax, kRanks, e), 0u) << rank;
  }
}

TEST(PerfCheck, AllGatherAndAllToAllExpectations) {
  const DataType t = DataType::kFloat16;
  const Geometry g = ComputeGeometry(Collective::kAllGather, 3 * 16 * 2, 2, kRanks);
  Bytes gathered;
  for (int r = 0; r < kRanks; ++r) {
    const Bytes part = Filled(t, RedOp::kSum, r, 0, g.send_count);
    gathered.insert(gathered.end(), part.begin(), part.end());
  }
  for (int rank = 0; rank < kRanks; ++rank) {
    const Expectation e = ExpectationFor(Collective::kAllGather, g, rank, kRanks, 0);
    EXPECT_EQ(CountWrong(gathered.data(), t, RedOp::kSum, kRanks, e), 0u);
  }
  std::swap_ranges(gathered.begin(), gathered.begin() + 32, gathered.begin() + 32);
  EXPECT_GT(CountWrong(gathered.data(), t, RedOp::kSum, kRanks,
                       ExpectationFor(Collective::kAllGather, g, 0, kRanks, 0)),
            0u);

  const Geometry a = ComputeGeometry(Collective::kAllToAll, 3 * 16 * 2, 2, kRanks);
  for (int rank = 0; rank < kRanks; ++rank) {
    // Block s of rank's output is block `rank` of rank s's input.
    Bytes out;
    for (int s = 0; s < kRanks; ++s) {
      const Bytes part = Filled(t, RedOp::kSum, s, rank * a.param_count, a.param_count);
      out.insert(out.end(), part.begin(), part.end());
    }
    const Expectation e = ExpectationFor(Collective::kAllToAll, a, rank, kRanks, 0);
    EXPECT_EQ(CountWrong(out.data(), t, RedOp::kSum, kRanks, e), 0u) << rank;
    const Expectation wrong_rank =
        ExpectationFor(Collective::kAllToAll, a, (rank + 1) % kRanks, kRanks, 0);
    EXPECT_GT(CountWrong(out.data(), t, RedOp::kSum, kRanks, wrong_rank), 0u) << rank;
  }
}

TEST(PerfCheck, RootedAndPointToPointExpectations) {
  const DataType t = DataType::kUint8;
  const Geometry g = ComputeGeometry(Collective::kBroadcast, 100, 1, kRanks);
  const Bytes from_root = Filled(t, RedOp::kSum, 2, 0, 100);
  for (int rank = 0; rank < kRanks; ++rank) {
    const Expectation e = ExpectationFor(Collective::kBroadcast, g, rank, kRanks, 2);
    EXPECT_EQ(CountWrong(from_root.data(), t, RedOp::kSum, kRanks, e), 0u);
    const Expectation r = ExpectationFor(Collective::kReduce, g, rank, kRanks, 2);
    EXPECT_EQ(r.kind, rank == 2 ? Expectation::Kind::kReduced : Expectation::Kind::kNone);
    // sendrecv receives from the previous rank in the ring.
    const Expectation s = ExpectationFor(Collective::kSendRecv, g, rank, kRanks, 0);
    const Bytes prev = Filled(t, RedOp::kSum, (rank + kRanks - 1) % kRanks, 0, 100);
    EXPECT_EQ(CountWrong(prev.data(), t, RedOp::kSum, kRanks, s), 0u);
    EXPECT_GT(CountWrong(Filled(t, RedOp::kSum, rank, 0, 100).data(), t, RedOp::kSum, kRanks, s),
              0u);
  }
  // Nothing to check is never wrong.
  Bytes junk(100, 0xAB);
  EXPECT_EQ(CountWrong(junk.data(), t, RedOp::kSum, kRanks,
                       ExpectationFor(Collective::kReduce, g, 0, kRanks, 2)),
            0u);
}

TEST(PerfCheck, GatherScatterAndHyperCubeExpectations) {
  const DataType t = DataType::kInt32;
  constexpr int kRoot = 1;
  // gather: the root holds every rank's input in rank order; others nothing.
  const Geometry g = ComputeGeometry(Collective::kGather, 3 * 64, 4, kRanks);
  Bytes gathered;
  for (int r = 0; r < kRanks; ++r) {
    const Bytes part = Filled(t, RedOp::kSum, r, 0, g.send_count);
    gathered.insert(gathered.end(), part.begin(), part.end());
  }
  for (int rank = 0; rank < kRanks; ++rank) {
    const Expectation e = ExpectationFor(Collective::kGather, g, rank, kRanks, kRoot);
    EXPECT_EQ(e.kind, rank == kRoot ? Expectation::Kind::kBlocks : Expectation::Kind::kNone);
    EXPECT_EQ(CountWrong(gathered.data(), t, RedOp::kSum, kRanks, e), 0u);
    // A hypercube ends with the same blocks on every rank.
    const Expectation h = ExpectationFor(Collective::kHyperCube, g, rank, kRanks, 0);
    EXPECT_EQ(CountWrong(gathered.data(), t, RedOp::kSum, kRanks, h), 0u);
  }
  std::swap_ranges(gathered.begin(), gathered.begin() + 64, gathered.begin() + 64);
  EXPECT_GT(CountWrong(gathered.data(), t, RedOp::kSum, kRanks,
                       ExpectationFor(Collective::kGather, g, kRoot, kRanks, kRoot)),
            0u);

  // scatter: rank r gets slice r of the root's input.
  const Geometry s = ComputeGeometry(Collective::kScatter, 3 * 64, 4, kRanks);
  EXPECT_EQ(s.send_count, kRanks * s.recv_count);
  const Bytes root_input = Filled(t, RedOp::kSum, kRoot, 0, s.send_count);
  for (int rank = 0; rank < kRanks; ++rank) {
    const Expectation e = ExpectationFor(Collective::kScatter, s, rank, kRanks, kRoot);
    const unsigned char* mine = root_input.data() + rank * s.recv_count * 4;
    EXPECT_EQ(CountWrong(mine, t, RedOp::kSum, kRanks, e), 0u) << rank;
    const unsigned char* other = root_input.data() + ((rank + 1) % kRanks) * s.recv_count * 4;
    EXPECT_GT(CountWrong(other, t, RedOp::kSum, kRanks, e), 0u) << rank;
    // The rank's own input is not the root's.
    if (rank != kRoot) {
      const Bytes own = Filled(t, RedOp::kSum, rank, rank * s.recv_count, s.recv_count);
      EXPECT_GT(CountWrong(own.data(), t, RedOp::kSum, kRanks, e), 0u) << rank;
    }
  }
}

TEST(PerfCheck, ZeroCountsAreNeverWrong) {
  const Geometry g = ComputeGeometry(Collective::kAllGather, 8, 4, 4);
  const Expectation e = ExpectationFor(Collective::kAllGather, g, 1, 4, 0);
  EXPECT_EQ(CountWrong(nullptr, DataType::kFloat32, RedOp::kSum, 4, e), 0u);
  EXPECT_EQ(CountWrongReduced(nullptr, DataType::kFloat64, RedOp::kSum, 4, 0, 0), 0u);
}

}  // namespace
}  // namespace loom::perf
