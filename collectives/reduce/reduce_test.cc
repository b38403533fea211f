// Tests for the reduction kernels: every type x op x SIMD level against an
// independent scalar reference, split/alias/commutativity invariants, and
// the fp16/bf16 conversions over every bit pattern.
#include "collectives/reduce/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOOM_TEST_X86 1
#else
#define LOOM_TEST_X86 0
#endif

namespace loom {
namespace {

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                                  DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                                  DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                                  DataType::kBfloat16};
constexpr RedOp kAllOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg};
constexpr ReduceIsa kAllIsas[] = {ReduceIsa::kPortable, ReduceIsa::kAvx2, ReduceIsa::kAvx512};

// --- Reference conversions: arithmetic in double, nothing shared with the
// bit tricks in reduce.h. A binary format with `mant` stored mantissa bits
// and `expb` exponent bits; NaN results are handled by the callers.
uint16_t RefRound(double v, int mant, int expb) {
  const uint32_t sign = std::signbit(v) ? (1u << (mant + expb)) : 0u;
  const double a = std::fabs(v);
  const int bias = (1 << (expb - 1)) - 1;
  const uint32_t inf = ((1u << expb) - 1) << mant;
  if (std::isinf(a)) return static_cast<uint16_t>(sign | inf);
  uint32_t bits;
  if (a < std::ldexp(1.0, 1 - bias)) {  // subnormal range: units of 2^(1-bias-mant)
    bits = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, mant - (1 - bias))));
  } else {
    int e;
    std::frexp(a, &e);
    --e;  // a = s * 2^e, s in [1, 2)
    const double frac = std::ldexp(a, -e) - 1.0;
    const double q =
        std::nearbyint(std::ldexp(frac, mant));  // may be 2^mant: carries into exponent
    const double biased = static_cast<double>(e + bias);
    if (biased >= static_cast<double>((1 << expb) - 1)) return static_cast<uint16_t>(sign | inf);
    bits = (static_cast<uint32_t>(biased) << mant) + static_cast<uint32_t>(q);
  }
  if (bits >= inf) bits = inf;
  return static_cast<uint16_t>(sign | bits);
}

double RefWiden(uint16_t h, int mant, int expb) {
  const bool neg = (h >> (mant + expb)) & 1u;
  const uint32_t e = (h >> mant) & ((1u << expb) - 1);
  const uint32_t m = h & ((1u << mant) - 1);
  const int bias = (1 << (expb - 1)) - 1;
  double v;
  if (e == (1u << expb) - 1) {
    v = m == 0 ? INFINITY : NAN;
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - bias - mant);
  } else {
    v = std::ldexp(static_cast<double>(m + (1u << mant)), static_cast<int>(e) - bias - mant);
  }
  return neg ? -v : v;
}

uint32_t FloatBits(float f) {
  return std::bit_cast<uint32_t>(f);
}

TEST(HalfConversion, WidenEveryPatternMatchesReference) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float got = HalfToFloat(static_cast<uint16_t>(h));
    const double want = RefWiden(static_cast<uint16_t>(h), 10, 5);
    if (std::isnan(want)) {
      // Quiet NaN, same sign, payload moved to the top bits.
      const uint32_t expect = ((h & 0x8000u) << 16) | 0x7FC00000u | ((h & 0x3FFu) << 13);
      ASSERT_EQ(FloatBits(got), expect) << std::hex << h;
    } else {
      ASSERT_EQ(FloatBits(got), FloatBits(static_cast<float>(want))) << std::hex << h;
    }
  }
}

TEST(HalfConversion, RoundTripEveryPattern) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto x = static_cast<uint16_t>(h);
    const uint16_t back = FloatToHalf(HalfToFloat(x));
    const bool nan = (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0;
    ASSERT_EQ(back, nan ? (x | 0x0200u) : x) << std::hex << h;  // NaN comes back quieted
  }
}

// Every value between two neighbouring halves, at and around the midpoint
// (where ties-to-even matters), plus a sweep over all float exponents.
TEST(HalfConversion, NarrowMatchesReference) {
  auto check = [](float f) {
    if (std::isnan(f)) return;
    ASSERT_EQ(FloatToHalf(f), RefRound(f, 10, 5)) << std::hexfloat << f;
  };
  for (uint32_t h = 0; h < 0x7C00u; ++h) {
    const uint32_t lo = FloatBits(HalfToFloat(static_cast<uint16_t>(h)));
    const uint32_t hi =
        FloatBits(h + 1 == 0x7C00u ? 65536.0f : HalfToFloat(static_cast<uint16_t>(h + 1)));
    const uint32_t mid = lo + (hi - lo) / 2;
    for (uint32_t bits : {lo, lo + 1, mid - 1, mid, mid + 1, hi - 1}) {
      check(std::bit_cast<float>(bits));
      check(-std::bit_cast<float>(bits));
    }
  }
  for (uint64_t bits = 0; bits < (1ull << 32); bits += 65521)
    check(std::bit_cast<float>(static_cast<uint32_t>(bits)));
  check(INFINITY);
  check(-INFINITY);
  check(std::numeric_limits<float>::max());
  check(std::numeric_limits<float>::denorm_min());
}

TEST(HalfConversion, NanStaysNanAndQuiet) {
  for (uint32_t payload : {1u, 0x1FFFu, 0x2000u, 0x3FFFFFu, 0x400000u, 0x7FFFFFu}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const uint16_t h = FloatToHalf(std::bit_cast<float>(sign | 0x7F800000u | payload));
      EXPECT_EQ(h & 0x7E00u, 0x7E00u) << payload;
      EXPECT_EQ(h & 0x8000u, sign >> 16);
    }
  }
}

#if LOOM_TEST_X86
__attribute__((target("f16c"))) uint16_t HwFloatToHalf(float f) {
  const __m128i h = _mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return static_cast<uint16_t>(_mm_cvtsi128_si32(h));
}
__attribute__((target("f16c"))) float HwHalfToFloat(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// The kernels mix F16C (vector body) and the scalar code (tails), so they
// must agree on every input, NaN payloads included.
TEST(HalfConversion, MatchesF16cHardware) {
  // Every CPU with the AVX2 level has F16C (reduce.cc checks both).
  const ReduceIsa saved = ActiveReduceIsa();
  const bool has_f16c = ForceReduceIsa(ReduceIsa::kAvx2);
  ASSERT_TRUE(ForceReduceIsa(saved));
  if (!has_f16c) GTEST_SKIP() << "no AVX2/F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    ASSERT_EQ(FloatBits(HalfToFloat(static_cast<uint16_t>(h))),
              FloatBits(HwHalfToFloat(static_cast<uint16_t>(h))))
        << std::hex << h;
  }
  for (uint64_t bits = 0; bits < (1ull << 32); bits += 4099) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    ASSERT_EQ(FloatToHalf(f), HwFloatToHalf(f)) << std::hex << bits;
  }
}
#endif

TEST(Bf16Conversion, EveryPatternWidensExactlyAndRoundTrips) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const auto x = static_cast<uint16_t>(b);
    const double want = RefWiden(x, 7, 8);
    const float got = Bf16ToFloat(x);
    const bool nan = std::isnan(want);
    if (!nan) {
      ASSERT_EQ(FloatBits(got), FloatBits(static_cast<float>(want))) << std::hex << b;
    }
    ASSERT_EQ(FloatToBf16(got), nan ? (x | 0x0040u) : x) << std::hex << b;
  }
}

TEST(Bf16Conversion, NarrowMatchesReference) {
  for (uint64_t bits = 0; bits < (1ull << 32); bits += 4093) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(f))));
      continue;
    }
    ASSERT_EQ(FloatToBf16(f), RefRound(f, 7, 8)) << std::hexfloat << f;
  }
  // Ties: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 and rounds to even (1).
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3F80u);
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3F82u);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7F80u);  // rounds up to Inf
}

// --- Reference reduction, written independently of the kernels.

template <class T>
T RefFloatOp(RedOp op, T a, T b) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg: {
      const T r = a + b;
      return std::isnan(r) ? nan : r;
    }
    case RedOp::kProd: {
      const T r = a * b;
      return std::isnan(r) ? nan : r;
    }
    case RedOp::kMax:
      if (std::isnan(a) || std::isnan(b)) return nan;
      if (a == b) return std::signbit(a) ? b : a;
      return a > b ? a : b;
    case RedOp::kMin:
      if (std::isnan(a) || std::isnan(b)) return nan;
      if (a == b) return std::signbit(a) ? a : b;
      return a < b ? a : b;
  }
  return nan;
}

template <class T>
T RefIntOp(RedOp op, T a, T b) {
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
      return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    case RedOp::kProd:
      return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    case RedOp::kMax:
      return a > b ? a : b;
    case RedOp::kMin:
      return a < b ? a : b;
  }
  return 0;
}

uint16_t RefNarrowOp(RedOp op, uint16_t a, uint16_t b, int mant, int expb) {
  const float r = RefFloatOp<float>(op, static_cast<float>(RefWiden(a, mant, expb)),
                                    static_cast<float>(RefWiden(b, mant, expb)));
  if (std::isnan(r)) return static_cast<uint16_t>(mant == 10 ? 0x7E00u : 0x7FC0u);  // canonical NaN
  return RefRound(r, mant, expb);
}

template <class T>
void RefReduceTyped(void* dst, const void* a, const void* b, size_t n, RedOp op) {
  for (size_t i = 0; i < n; ++i) {
    T x, y, r;
    std::memcpy(&x, static_cast<const char*>(a) + i * sizeof(T), sizeof(T));
    std::memcpy(&y, static_cast<const char*>(b) + i * sizeof(T), sizeof(T));
    if constexpr (std::is_floating_point_v<T>) {
      r = RefFloatOp<T>(op, x, y);
    } else {
      r = RefIntOp<T>(op, x, y);
    }
    std::memcpy(static_cast<char*>(dst) + i * sizeof(T), &r, sizeof(T));
  }
}

void RefReduce(void* dst, const void* a, const void* b, size_t n, DataType type, RedOp op) {
  switch (type) {
    case DataType::kInt8:
      return RefReduceTyped<int8_t>(dst, a, b, n, op);
    case DataType::kUint8:
      return RefReduceTyped<uint8_t>(dst, a, b, n, op);
    case DataType::kInt32:
      return RefReduceTyped<int32_t>(dst, a, b, n, op);
    case DataType::kUint32:
      return RefReduceTyped<uint32_t>(dst, a, b, n, op);
    case DataType::kInt64:
      return RefReduceTyped<int64_t>(dst, a, b, n, op);
    case DataType::kUint64:
      return RefReduceTyped<uint64_t>(dst, a, b, n, op);
    case DataType::kFloat32:
      return RefReduceTyped<float>(dst, a, b, n, op);
    case DataType::kFloat64:
      return RefReduceTyped<double>(dst, a, b, n, op);
    case DataType::kFloat16:
    case DataType::kBfloat16: {
      const int mant = type == DataType::kFloat16 ? 10 : 7;
      const int expb = type == DataType::kFloat16 ? 5 : 8;
      for (size_t i = 0; i < n; ++i) {
        uint16_t x, y;
        std::memcpy(&x, static_cast<const char*>(a) + 2 * i, 2);
        std::memcpy(&y, static_cast<const char*>(b) + 2 * i, 2);
        const uint16_t r = RefNarrowOp(op, x, y, mant, expb);
        std::memcpy(static_cast<char*>(dst) + 2 * i, &r, 2);
      }
      return;
    }
  }
}

// Random inputs: half the elements are raw random bits (every NaN payload,
// Inf, subnormal and huge value shows up), half are moderate values of the
// type so that sums really round instead of one side dominating.
std::vector<char> RandomBytes(DataType type, size_t n, std::mt19937_64& rng) {
  const size_t size = SizeOf(type);
  std::vector<char> out(n * size);
  std::uniform_real_distribution<double> moderate(-4.0, 4.0);
  for (size_t i = 0; i < n; ++i) {
    uint64_t bits = rng();
    if (rng() & 1) {
      const double v = moderate(rng);
      switch (type) {
        case DataType::kFloat32:
          bits = FloatBits(static_cast<float>(v));
          break;
        case DataType::kFloat64:
          bits = std::bit_cast<uint64_t>(v);
          break;
        case DataType::kFloat16:
          bits = FloatToHalf(static_cast<float>(v));
          break;
        case DataType::kBfloat16:
          bits = FloatToBf16(static_cast<float>(v));
          break;
        default:
          bits &= 0xF;
          break;  // small integers: products stay interesting
      }
    }
    std::memcpy(out.data() + i * size, &bits, size);
  }
  return out;
}

std::string Label(DataType type, RedOp op, ReduceIsa isa, size_t n) {
  return std::string(Name(type)) + "/" + std::string(Name(op)) +
         " isa=" + std::to_string(static_cast<int>(isa)) + " n=" + std::to_string(n);
}

// memcmp == 0 that allows n == 0 with the null data() of empty vectors
// (memcmp's arguments must not be null even then).
bool SameBytes(const char* x, const char* y, size_t n) {
  return n == 0 || std::memcmp(x, y, n) == 0;
}

// Restores the auto-selected SIMD level after a test pins others.
class ReduceIntoTest : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = ActiveReduceIsa(); }
  void TearDown() override { ASSERT_TRUE(ForceReduceIsa(saved_)); }
  ReduceIsa saved_ = ReduceIsa::kPortable;
};

// Every type x op x level x count x alignment x aliasing mode against the
// reference. Elements are offset by `misalign` from the allocation so the
// vector loads are unaligned.
TEST_F(ReduceIntoTest, MatchesReferenceEverywhere) {
  std::mt19937_64 rng(42);
  const size_t counts[] = {0, 1, 7, 31, 1031, (size_t{1} << 20) + 3};
  int levels = 0;
  for (ReduceIsa isa : kAllIsas) levels += ForceReduceIsa(isa) ? 1 : 0;
  ASSERT_GE(levels, 1);
  for (DataType type : kAllTypes) {
    const size_t size = SizeOf(type);
    for (RedOp op : kAllOps) {
      for (size_t n : counts) {
        const bool big = n > 10000;
        for (size_t misalign : {size_t{0}, size_t{1}}) {
          if (big && misalign) continue;  // the big case checks speed paths, not alignment
          std::vector<char> a = RandomBytes(type, n + misalign, rng);
          std::vector<char> b = RandomBytes(type, n + misalign, rng);
          std::vector<char> want(n * size);
          const char* pa = a.data() + misalign * size;
          const char* pb = b.data() + misalign * size;
          RefReduce(want.data(), pa, pb, n, type, op);
          for (ReduceIsa isa : kAllIsas) {
            if (!ForceReduceIsa(isa)) continue;
            const std::string label =
                Label(type, op, isa, n) + " misalign=" + std::to_string(misalign);
            std::vector<char> out((n + misalign) * size, 0x5A);
            ReduceInto(out.data() + misalign * size, pa, pb, n, type, op);
            ASSERT_TRUE(SameBytes(out.data() + misalign * size, want.data(), n * size)) << label;
            ASSERT_TRUE(std::all_of(out.begin(), out.begin() + misalign * size,
                                    [](char c) { return c == 0x5A; }))
                << label << " wrote before dst";
            if (big) continue;
            std::vector<char> in_a = a;  // dst == a
            ReduceInto(in_a.data() + misalign * size, in_a.data() + misalign * size, pb, n, type,
                       op);
            ASSERT_TRUE(SameBytes(in_a.data() + misalign * size, want.data(), n * size))
                << label << " dst==a";
            std::vector<char> in_b = b;  // dst == b
            ReduceInto(in_b.data() + misalign * size, pa, in_b.data() + misalign * size, n, type,
                       op);
            ASSERT_TRUE(SameBytes(in_b.data() + misalign * size, want.data(), n * size))
                << label << " dst==b";
            std::vector<char> self = a;  // dst == a == b
            std::vector<char> self_want(n * size);
            RefReduce(self_want.data(), pa, pa, n, type, op);
            ReduceInto(self.data() + misalign * size, self.data() + misalign * size,
                       self.data() + misalign * size, n, type, op);
            ASSERT_TRUE(SameBytes(self.data() + misalign * size, self_want.data(), n * size))
                << label << " a==b";
          }
        }
      }
    }
  }
}

// op(a, b) == op(b, a) on raw random bits (NaNs with different payloads in
// both operands included), and a reduction done in arbitrary chunks equals
// the one-shot result.
TEST_F(ReduceIntoTest, CommutativeAndSplitInvariant) {
  std::mt19937_64 rng(7);
  const size_t n = 5000;
  for (ReduceIsa isa : kAllIsas) {
    if (!ForceReduceIsa(isa)) continue;
    for (DataType type : kAllTypes) {
      const size_t size = SizeOf(type);
      std::vector<char> a(n * size), b(n * size);
      for (auto& c : a) c = static_cast<char>(rng());
      for (auto& c : b) c = static_cast<char>(rng());
      for (RedOp op : kAllOps) {
        const std::string label = Label(type, op, isa, n);
        std::vector<char> ab(n * size), ba(n * size), chunked(n * size);
        ReduceInto(ab.data(), a.data(), b.data(), n, type, op);
        ReduceInto(ba.data(), b.data(), a.data(), n, type, op);
        ASSERT_EQ(0, std::memcmp(ab.data(), ba.data(), n * size)) << label;
        for (size_t off = 0; off < n;) {
          const size_t len = std::min<size_t>(n - off, 1 + rng() % 300);
          ReduceInto(chunked.data() + off * size, a.data() + off * size, b.data() + off * size, len,
                     type, op);
          off += len;
        }
        ASSERT_EQ(0, std::memcmp(ab.data(), chunked.data(), n * size)) << label;
      }
    }
  }
}

TEST_F(ReduceIntoTest, SignedZeroAndNanRules) {
  const float pz = 0.0f, nz = -0.0f, nan1 = std::bit_cast<float>(0x7FC00001u),
              nan2 = std::bit_cast<float>(0xFFC12345u);
  float out = 1;
  ReduceInto(&out, &pz, &nz, 1, DataType::kFloat32, RedOp::kMax);
  EXPECT_EQ(FloatBits(out), 0u);
  ReduceInto(&out, &nz, &pz, 1, DataType::kFloat32, RedOp::kMin);
  EXPECT_EQ(FloatBits(out), 0x80000000u);
  const float one = 1.0f;
  ReduceInto(&out, &one, &nan1, 1, DataType::kFloat32,
             RedOp::kMax);  // NaN propagates, unlike fmaxf
  EXPECT_EQ(FloatBits(out), 0x7FC00000u);
  ReduceInto(&out, &nan2, &nan1, 1, DataType::kFloat32, RedOp::kSum);
  EXPECT_EQ(FloatBits(out), 0x7FC00000u);
  const float inf = INFINITY, ninf = -INFINITY;
  ReduceInto(&out, &inf, &ninf, 1, DataType::kFloat32, RedOp::kSum);
  EXPECT_EQ(FloatBits(out), 0x7FC00000u);
  const uint16_t hmax = 0x7BFF;  // 65504 + 65504 overflows fp16
  uint16_t hout = 0;
  ReduceInto(&hout, &hmax, &hmax, 1, DataType::kFloat16, RedOp::kSum);
  EXPECT_EQ(hout, 0x7C00u);
}

// The narrow types' vector conversions (body) against the scalar ones
// (tails, and the portable level) on every 16-bit pattern: each pattern as
// `a` against a spread of `b` values for every op, and ScaleForAvg, whose
// division keeps NaN payloads (fp16's narrowing sees them; a bf16 NaN
// widens with 16 zero low bits, which round away exactly).
TEST_F(ReduceIntoTest, NarrowTypesAgreeAcrossLevelsOnEveryPattern) {
  constexpr size_t kPatterns = 65536;
  std::vector<uint16_t> a(kPatterns), b(kPatterns);
  for (size_t i = 0; i < kPatterns; ++i) {
    a[i] = static_cast<uint16_t>(i);
    b[i] = static_cast<uint16_t>(i * 40503u + 0x3C00u);  // odd multiplier: a permutation
  }
  for (DataType type : {DataType::kFloat16, DataType::kBfloat16}) {
    std::vector<uint16_t> want(kPatterns), got(kPatterns);
    for (RedOp op : kAllOps) {
      ASSERT_TRUE(ForceReduceIsa(ReduceIsa::kPortable));
      ReduceInto(want.data(), a.data(), b.data(), kPatterns, type, op);
      for (ReduceIsa isa : kAllIsas) {
        if (!ForceReduceIsa(isa)) continue;
        ReduceInto(got.data(), a.data(), b.data(), kPatterns, type, op);
        for (size_t i = 0; i < kPatterns; ++i) {
          ASSERT_EQ(got[i], want[i])
              << Label(type, op, isa, kPatterns) << " a=" << std::hex << a[i] << " b=" << b[i];
        }
      }
    }
    for (int nranks : {3, 8}) {
      ASSERT_TRUE(ForceReduceIsa(ReduceIsa::kPortable));
      want = a;
      ScaleForAvg(want.data(), kPatterns, type, nranks);
      for (ReduceIsa isa : kAllIsas) {
        if (!ForceReduceIsa(isa)) continue;
        got = a;
        ScaleForAvg(got.data(), kPatterns, type, nranks);
        for (size_t i = 0; i < kPatterns; ++i) {
          ASSERT_EQ(got[i], want[i]) << Name(type) << " avg/" << nranks << " isa "
                                     << static_cast<int>(isa) << " x=" << std::hex << a[i];
        }
      }
    }
  }
}

TEST_F(ReduceIntoTest, IntegerSumWraps) {
  const int32_t a = INT32_MAX, b = 1;
  int32_t out = 0;
  ReduceInto(&out, &a, &b, 1, DataType::kInt32, RedOp::kSum);
  EXPECT_EQ(out, INT32_MIN);
  const int8_t x = -128, y = -1;
  int8_t o8 = 0;
  ReduceInto(&o8, &x, &y, 1, DataType::kInt8, RedOp::kProd);
  EXPECT_EQ(o8, -128);  // 128 mod 256 read as int8
}

// --- PreMulInto

// Every type, random inputs and scalars (NaN, Inf and subnormals among
// them), lengths that end inside and past the kernel's 4 KiB blocks, out
// of place and in place, against the independent reference's kProd.
TEST(PreMulInto, EveryTypeMatchesTheReferenceProduct) {
  std::mt19937_64 rng(7);
  for (DataType type : kAllTypes) {
    const size_t es = SizeOf(type);
    for (size_t n : {size_t{0}, size_t{1}, size_t{37}, 4096 / es, 4096 / es + 3, size_t{10007}}) {
      for (int trial = 0; trial < 4; ++trial) {
        const std::vector<char> src = RandomBytes(type, n, rng);
        const std::vector<char> scalar = RandomBytes(type, 1, rng);
        std::vector<char> broadcast(n * es);
        for (size_t i = 0; i < n; ++i) std::memcpy(broadcast.data() + i * es, scalar.data(), es);
        std::vector<char> want(n * es);
        RefReduce(want.data(), src.data(), broadcast.data(), n, type, RedOp::kProd);
        std::vector<char> got(n * es + 1, 'x');
        PreMulInto(got.data(), src.data(), n, type, scalar.data());
        ASSERT_EQ(std::vector<char>(got.begin(), got.end() - 1), want) << Name(type) << " n=" << n;
        ASSERT_EQ(got[n * es], 'x') << "wrote past the end";
        std::vector<char> in_place = src;
        PreMulInto(in_place.data(), in_place.data(), n, type, scalar.data());
        ASSERT_EQ(in_place, want) << Name(type) << " in place, n=" << n;
      }
    }
  }
}

TEST(PreMulInto, IntegersWrapAndHalvesRoundOnce) {
  std::vector<int8_t> v = {-3, 100, 127};
  const int8_t s8 = 100;
  PreMulInto(v.data(), v.data(), v.size(), DataType::kInt8, &s8);
  EXPECT_EQ(v, (std::vector<int8_t>{-44, 16, -100}));  // -300, 10000, 12700 mod 256
  // fp16 0.1 (0x2E66) x 3: the exact product 0.2999267578125 rounds to 0x34CC.
  const uint16_t x = 0x2E66, three = FloatToHalf(3.0f);
  uint16_t out = 0;
  PreMulInto(&out, &x, 1, DataType::kFloat16, &three);
  EXPECT_EQ(out, FloatToHalf(HalfToFloat(x) * 3.0f));
  EXPECT_EQ(out, 0x34CCu);
}

// --- ScaleForAvg

TEST(ScaleForAvg, IntegersTruncateTowardZeroLikeNccl) {
  std::vector<int32_t> v = {-7, 7, -1, 0, INT32_MIN, INT32_MAX};
  ScaleForAvg(v.data(), v.size(), DataType::kInt32, 2);
  EXPECT_EQ(v, (std::vector<int32_t>{-3, 3, 0, 0, INT32_MIN / 2, INT32_MAX / 2}));
  std::vector<int8_t> s = {-128, 127, -100};
  ScaleForAvg(s.data(), s.size(), DataType::kInt8, 200);  // nranks beyond the type's range
  EXPECT_EQ(s, (std::vector<int8_t>{0, 0, 0}));
  std::vector<uint64_t> u = {UINT64_MAX, 5};
  ScaleForAvg(u.data(), u.size(), DataType::kUint64, 3);
  EXPECT_EQ(u, (std::vector<uint64_t>{UINT64_MAX / 3, 1}));
  std::vector<uint8_t> u8 = {255, 3};
  ScaleForAvg(u8.data(), u8.size(), DataType::kUint8, 1);  // identity
  EXPECT_EQ(u8, (std::vector<uint8_t>{255, 3}));
}

TEST(ScaleForAvg, FloatsDivideOnceWithNearestEven) {
  for (int nranks : {1, 2, 3, 7, 1000}) {
    std::mt19937_64 rng(nranks);
    const size_t n = 2051;  // blocks plus a tail
    for (DataType type :
         {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBfloat16}) {
      std::vector<char> buf = RandomBytes(type, n, rng);
      std::vector<char> want = buf;
      for (size_t i = 0; i < n; ++i) {
        char* p = want.data() + i * SizeOf(type);
        if (type == DataType::kFloat32) {
          float f;
          std::memcpy(&f, p, 4);
          f /= static_cast<float>(nranks);
          std::memcpy(p, &f, 4);
        } else if (type == DataType::kFloat64) {
          double d;
          std::memcpy(&d, p, 8);
          d /= nranks;
          std::memcpy(p, &d, 8);
        } else {
          const int mant = type == DataType::kFloat16 ? 10 : 7,
                    expb = type == DataType::kFloat16 ? 5 : 8;
          uint16_t h;
          std::memcpy(&h, p, 2);
          const float q = static_cast<float>(RefWiden(h, mant, expb)) / static_cast<float>(nranks);
          if (std::isnan(q)) continue;  // payload handling is covered by the conversion tests
          h = RefRound(q, mant, expb);
          std::memcpy(p, &h, 2);
        }
      }
      ScaleForAvg(buf.data(), n, type, nranks);
      for (size_t i = 0; i < n; ++i) {
        const size_t s = SizeOf(type);
        uint64_t got = 0, exp = 0;
        std::memcpy(&got, buf.data() + i * s, s);
        std::memcpy(&exp, want.data() + i * s, s);
        // NaN payloads are covered by the conversion tests; here NaN in
        // means NaN out.
        auto is_nan = [&](uint64_t bits) {
          switch (type) {
            case DataType::kFloat32:
              return std::isnan(std::bit_cast<float>(static_cast<uint32_t>(bits)));
            case DataType::kFloat64:
              return std::isnan(std::bit_cast<double>(bits));
            case DataType::kFloat16:
              return std::isnan(HalfToFloat(static_cast<uint16_t>(bits)));
            default:
              return std::isnan(Bf16ToFloat(static_cast<uint16_t>(bits)));
          }
        };
        if (is_nan(exp)) {
          ASSERT_TRUE(is_nan(got)) << Name(type) << " nranks=" << nranks << " i=" << i;
        } else {
          ASSERT_EQ(got, exp) << Name(type) << " nranks=" << nranks << " i=" << i;
        }
      }
    }
  }
}

TEST(ReduceDeathTest, InvalidArgumentsAbort) {
  int32_t x = 0;
  EXPECT_DEATH(ReduceInto(&x, &x, &x, 1, static_cast<DataType>(42), RedOp::kSum),
               "invalid DataType");
  EXPECT_DEATH(ReduceInto(&x, &x, &x, 1, DataType::kInt32, static_cast<RedOp>(-1)),
               "invalid RedOp");
  EXPECT_DEATH(ScaleForAvg(&x, 1, DataType::kInt32, 0), "invalid nranks");
}

}  // namespace
}  // namespace loom
