// CPU-only proof that the device kernels' element operators (reduce_ops.h,
// compiled here as plain C++) give the CPU kernels' bits for every type x op
// on awkward values, and that the vector split covers every element once.
#include "collectives/reduce/cuda/reduce_ops.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "collectives/reduce/reduce.h"

namespace loom::cuda_reduce {
namespace {

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                                  DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                                  DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                                  DataType::kBfloat16};
constexpr RedOp kAllOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg};

TEST(Conversions, WideningMatchesCpuOnEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto x = static_cast<uint16_t>(h);
    ASSERT_EQ(Bits(HalfToFloat(x)), Bits(loom::HalfToFloat(x))) << std::hex << h;
    ASSERT_EQ(Bits(Bf16ToFloat(x)), Bits(loom::Bf16ToFloat(x))) << std::hex << h;
  }
}

TEST(Conversions, NarrowingMatchesCpuOnASweepOfFloats) {
  // Every 2^32/prime-th pattern plus both neighbours of each: covers every
  // exponent, rounding ties, subnormals, Inf and NaN payloads of both signs.
  for (uint64_t i = 0; i < (uint64_t{1} << 32); i += 65521) {
    for (uint64_t d : {i, i + 1, i + 0xFFF, i + 0x1000, i + 0x7FFF, i + 0x8000}) {
      const auto u = static_cast<uint32_t>(d);
      const float f = FromBits(u);
      ASSERT_EQ(FloatToHalf(f), loom::FloatToHalf(f)) << std::hex << u;
      ASSERT_EQ(FloatToBf16(f), loom::FloatToBf16(f)) << std::hex << u;
    }
  }
  for (uint32_t u :
       {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x477FF000u, 0x477FEFFFu,
        0x33000000u, 0x33000001u, 0x387FFFFFu, 0x38800000u, 0u, 0x80000000u}) {
    EXPECT_EQ(FloatToHalf(FromBits(u)), loom::FloatToHalf(FromBits(u))) << std::hex << u;
    EXPECT_EQ(FloatToBf16(FromBits(u)), loom::FloatToBf16(FromBits(u))) << std::hex << u;
  }
}

// --- awkward values per type, as raw bytes ----------------------------------

template <class T>
void Push(std::vector<uint8_t>* out, T v) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}

template <class T>
std::vector<uint8_t> IntValues() {
  using L = std::numeric_limits<T>;
  std::vector<uint8_t> v;
  for (T x : {T(0), T(1), T(2), T(3), L::max(), L::min(), T(L::max() - 1), T(L::min() + 1),
              T(L::max() / 2), T(100)}) {
    Push(&v, x);
  }
  if constexpr (L::is_signed) {
    for (T x : {T(-1), T(-2), T(-7), T(-100)}) Push(&v, x);
  }
  return v;
}

std::vector<uint8_t> Float32Values() {
  std::vector<uint8_t> v;
  for (uint32_t u : {0u,          0x80000000u, 0x3F800000u, 0xBF800000u, 0x7F800000u,
                     0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7FC12345u, 0x7F800001u /*signalling*/,
                     0xFFBFFFFFu, 0x00000001u, 0x80000001u, 0x007FFFFFu, 0x00800000u,
                     0x7F7FFFFFu, 0xFF7FFFFFu, 0x3EAAAAABu, 0x40490FDBu, 0x33800000u,
                     0x4B800000u}) {
    Push(&v, FromBits(u));
  }
  return v;
}

std::vector<uint8_t> Float64Values() {
  std::vector<uint8_t> v;
  const uint64_t bits[] = {0,
                           0x8000000000000000u,
                           0x3FF0000000000000u,
                           0xBFF0000000000000u,
                           0x7FF0000000000000u,
                           0xFFF0000000000000u,
                           0x7FF8000000000000u,
                           0xFFF8000000000000u,
                           0x7FF8000000012345u,
                           0x7FF0000000000001u,
                           0x0000000000000001u,
                           0x800FFFFFFFFFFFFFu,
                           0x0010000000000000u,
                           0x7FEFFFFFFFFFFFFFu,
                           0x3FD5555555555555u,
                           0x400921FB54442D18u};
  for (uint64_t u : bits) {
    Push(&v, FromBits(u));
  }
  return v;
}

std::vector<uint8_t> NarrowValues(bool half) {
  std::vector<uint8_t> v;
  const std::vector<uint16_t> h = {0x0000, 0x8000, 0x3C00, 0xBC00, 0x7C00, 0xFC00, 0x7E00,
                                   0xFE00, 0x7C01, 0x7D23, 0x0001, 0x8001, 0x03FF, 0x0400,
                                   0x7BFF, 0xFBFF, 0x3555, 0x4248, 0x3C01, 0x1400};
  const std::vector<uint16_t> b = {0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7FC0,
                                   0xFFC0, 0x7F81, 0x7FA3, 0x0001, 0x8001, 0x007F, 0x0080,
                                   0x7F7F, 0xFF7F, 0x3EAB, 0x4049, 0x3F81, 0x3380};
  for (uint16_t x : half ? h : b) Push(&v, x);
  return v;
}

std::vector<uint8_t> ValuesOf(DataType t) {
  switch (t) {
    case DataType::kInt8:
      return IntValues<int8_t>();
    case DataType::kUint8:
      return IntValues<uint8_t>();
    case DataType::kInt32:
      return IntValues<int32_t>();
    case DataType::kUint32:
      return IntValues<uint32_t>();
    case DataType::kInt64:
      return IntValues<int64_t>();
    case DataType::kUint64:
      return IntValues<uint64_t>();
    case DataType::kFloat16:
      return NarrowValues(true);
    case DataType::kFloat32:
      return Float32Values();
    case DataType::kFloat64:
      return Float64Values();
    case DataType::kBfloat16:
      return NarrowValues(false);
  }
  return {};
}

// --- the device operators, applied on the host --------------------------------

template <class E, class Op>
void ApplyAll(void* dst, const void* a, const void* b, size_t n) {
  using S = typename StorageOf<E>::type;
  for (size_t i = 0; i < n; ++i) {
    S x, y;
    std::memcpy(&x, static_cast<const S*>(a) + i, sizeof(S));
    std::memcpy(&y, static_cast<const S*>(b) + i, sizeof(S));
    const S r = ApplyElem<E, Op>(x, y);
    std::memcpy(static_cast<S*>(dst) + i, &r, sizeof(S));
  }
}

template <class E>
void ApplyOp(RedOp op, void* dst, const void* a, const void* b, size_t n) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return ApplyAll<E, SumOp>(dst, a, b, n);
    case RedOp::kProd:
      return ApplyAll<E, ProdOp>(dst, a, b, n);
    case RedOp::kMax:
      return ApplyAll<E, MaxOp>(dst, a, b, n);
    case RedOp::kMin:
      return ApplyAll<E, MinOp>(dst, a, b, n);
  }
}

template <class E>
void ScaleAll(void* buf, size_t n, int nranks) {
  using S = typename StorageOf<E>::type;
  for (size_t i = 0; i < n; ++i) {
    S x;
    std::memcpy(&x, static_cast<S*>(buf) + i, sizeof(S));
    x = ScaleElem<E>(x, nranks);
    std::memcpy(static_cast<S*>(buf) + i, &x, sizeof(S));
  }
}

template <class F>
void ByType(DataType t, F&& f) {
  switch (t) {
    case DataType::kInt8:
      return f(int8_t{});
    case DataType::kUint8:
      return f(uint8_t{});
    case DataType::kInt32:
      return f(int32_t{});
    case DataType::kUint32:
      return f(uint32_t{});
    case DataType::kInt64:
      return f(int64_t{});
    case DataType::kUint64:
      return f(uint64_t{});
    case DataType::kFloat16:
      return f(Half{});
    case DataType::kFloat32:
      return f(float{});
    case DataType::kFloat64:
      return f(double{});
    case DataType::kBfloat16:
      return f(Bf16{});
  }
}

std::string Label(DataType t, RedOp op) {
  return std::string(Name(t)) + "/" + std::string(Name(op));
}

TEST(ElementOps, EveryPairOfAwkwardValuesMatchesCpuBitForBit) {
  for (DataType t : kAllTypes) {
    const size_t es = SizeOf(t);
    const std::vector<uint8_t> vals = ValuesOf(t);
    const size_t nv = vals.size() / es;
    // All ordered pairs (x, y): covers both argument orders of every op.
    std::vector<uint8_t> a(nv * nv * es), b(nv * nv * es);
    for (size_t i = 0; i < nv; ++i) {
      for (size_t j = 0; j < nv; ++j) {
        std::memcpy(&a[(i * nv + j) * es], &vals[i * es], es);
        std::memcpy(&b[(i * nv + j) * es], &vals[j * es], es);
      }
    }
    for (RedOp op : kAllOps) {
      std::vector<uint8_t> want(a.size()), got(a.size());
      ReduceInto(want.data(), a.data(), b.data(), nv * nv, t, op);
      ByType(t, [&](auto tag) {
        ApplyOp<decltype(tag)>(op, got.data(), a.data(), b.data(), nv * nv);
      });
      for (size_t k = 0; k < nv * nv; ++k) {
        ASSERT_EQ(std::memcmp(&want[k * es], &got[k * es], es), 0)
            << Label(t, op) << " pair " << k / nv << "," << k % nv;
      }
    }
  }
}

TEST(ElementOps, RandomBitPatternsMatchCpu) {
  std::mt19937_64 rng(8);
  for (DataType t : kAllTypes) {
    const size_t n = 4099;  // prime: no lane-multiple luck
    std::vector<uint8_t> a(n * SizeOf(t)), b(a.size());
    for (auto& x : a) x = static_cast<uint8_t>(rng());
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    for (RedOp op : kAllOps) {
      std::vector<uint8_t> want(a.size()), got(a.size());
      ReduceInto(want.data(), a.data(), b.data(), n, t, op);
      ByType(t, [&](auto tag) { ApplyOp<decltype(tag)>(op, got.data(), a.data(), b.data(), n); });
      ASSERT_EQ(want, got) << Label(t, op);
    }
  }
}

TEST(ScaleOps, AverageDivisionMatchesCpuIncludingNaNPayloads) {
  for (DataType t : kAllTypes) {
    const std::vector<uint8_t> vals = ValuesOf(t);
    const size_t n = vals.size() / SizeOf(t);
    // nranks == 1 is an early return on both sides (CudaScaleForAvg launches
    // nothing), so the element function is only defined for nranks >= 2.
    for (int nranks : {2, 3, 7, 8, 127, 128, 1000}) {
      std::vector<uint8_t> want = vals, got = vals;
      ScaleForAvg(want.data(), n, t, nranks);
      ByType(t, [&](auto tag) { ScaleAll<decltype(tag)>(got.data(), n, nranks); });
      ASSERT_EQ(want, got) << Name(t) << " nranks " << nranks;
    }
  }
}

// --- the vector split -----------------------------------------------------------

// Checks the split covers [0, count) exactly once with aligned packs.
void ExpectCovers(size_t count, size_t elem, const std::vector<uintptr_t>& addrs) {
  std::vector<const void*> ptrs;
  for (uintptr_t a : addrs) ptrs.push_back(reinterpret_cast<const void*>(a));
  const VectorSplit s = SplitForVectors(count, elem, ptrs.data(), static_cast<int>(ptrs.size()));
  ASSERT_LE(s.head, count);
  const size_t body = s.packs * 16 / elem;
  ASSERT_LE(s.head + body, count);
  if (s.packs > 0) {
    for (uintptr_t a : addrs) EXPECT_EQ((a + s.head * elem) % 16, 0u) << a;
    // Fewer than one pack left over after the body.
    EXPECT_LT((count - s.head - body) * elem, 16u);
  }
}

TEST(VectorSplitTest, AlignedPointersUsePacksAndATail) {
  const void* ptrs[3] = {reinterpret_cast<const void*>(0x1000),
                         reinterpret_cast<const void*>(0x2000),
                         reinterpret_cast<const void*>(0x3000)};
  const VectorSplit s = SplitForVectors(37, 4, ptrs, 3);
  EXPECT_EQ(s.head, 0u);
  EXPECT_EQ(s.packs, 9u);  // 36 floats; the 37th is the tail
}

TEST(VectorSplitTest, SameMisalignmentGetsAHead) {
  const void* ptrs[2] = {reinterpret_cast<const void*>(0x1008),
                         reinterpret_cast<const void*>(0x2008)};
  const VectorSplit s = SplitForVectors(10, 8, ptrs, 2);
  EXPECT_EQ(s.head, 1u);
  EXPECT_EQ(s.packs, 4u);  // elements 1..8; element 9 is the tail
}

TEST(VectorSplitTest, DifferentMisalignmentFallsBackToElements) {
  const void* ptrs[3] = {reinterpret_cast<const void*>(0x1000),
                         reinterpret_cast<const void*>(0x2004),
                         reinterpret_cast<const void*>(0x3000)};
  const VectorSplit s = SplitForVectors(1000, 4, ptrs, 3);
  EXPECT_EQ(s.head, 1000u);
  EXPECT_EQ(s.packs, 0u);
}

TEST(VectorSplitTest, ElementMisalignedPointersFallBackToElements) {
  const void* ptrs[1] = {reinterpret_cast<const void*>(0x1002)};  // a float at +2
  const VectorSplit s = SplitForVectors(100, 4, ptrs, 1);
  EXPECT_EQ(s.head, 100u);
  EXPECT_EQ(s.packs, 0u);
}

TEST(VectorSplitTest, HeadLongerThanTheArray) {
  const void* ptrs[1] = {reinterpret_cast<const void*>(0x1001)};
  const VectorSplit s = SplitForVectors(3, 1, ptrs, 1);  // 15 bytes to alignment
  EXPECT_EQ(s.head, 3u);
  EXPECT_EQ(s.packs, 0u);
}

TEST(VectorSplitTest, CoversEveryElementOnceForManyShapes) {
  for (size_t elem : {1u, 2u, 4u, 8u}) {
    for (size_t count : {0u, 1u, 2u, 15u, 16u, 17u, 31u, 64u, 1000u, 4099u}) {
      for (uintptr_t off = 0; off < 16; off += elem) {
        ExpectCovers(count, elem, {0x1000 + off, 0x5000 + off, 0x9000 + off});
      }
    }
  }
}

}  // namespace
}  // namespace loom::cuda_reduce
