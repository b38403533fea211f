// Reduction kernels: element operators, per-ISA loops (AVX-512, AVX2+F16C,
// portable) and the runtime dispatch that picks one ISA per process.
#include "collectives/reduce/reduce.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "base/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define LOOM_REDUCE_X86 1
#else
#define LOOM_REDUCE_X86 0
#endif

namespace loom {
namespace {

[[noreturn]] void DieInvalid(const char* what, int value) {
  std::fprintf(stderr, "loom: ReduceInto/ScaleForAvg called with invalid %s %d\n", what, value);
  std::abort();
}

// ---------------------------------------------------------------------------
// Element operators. Each is a pure function of (a, b), symmetric bit-for-bit
// (see the contract in reduce.h), written with selects rather than branches
// so that the loops below vectorise.

template <class T>
constexpr T CanonicalNaN() {
  if constexpr (sizeof(T) == 4) {
    return std::bit_cast<T>(uint32_t{0x7FC00000u});
  } else {
    return std::bit_cast<T>(uint64_t{0x7FF8000000000000u});
  }
}

template <class T>
using BitsOf = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

template <class T>
inline T Canonicalize(T r) {
  return r != r ? CanonicalNaN<T>() : r;
}

struct SumOp {
  template <class T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return Canonicalize<T>(a + b);
    } else {
      using U = std::make_unsigned_t<T>;  // wrap without signed-overflow UB
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    }
  }
};

struct ProdOp {
  template <class T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return Canonicalize<T>(a * b);
    } else {
      // Multiply in at least 32-bit unsigned so that promotion of small
      // types never reaches signed int overflow.
      using U = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    }
  }
};

struct MaxOp {
  template <class T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      using B = BitsOf<T>;
      T r = a > b ? a : b;
      // Equal values differ only for +0/-0; AND of the bits picks +0.
      r = a == b ? std::bit_cast<T>(static_cast<B>(std::bit_cast<B>(a) & std::bit_cast<B>(b))) : r;
      return (a != a || b != b) ? CanonicalNaN<T>() : r;
    } else {
      return a > b ? a : b;
    }
  }
};

struct MinOp {
  template <class T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      using B = BitsOf<T>;
      T r = a < b ? a : b;
      // Equal values differ only for +0/-0; OR of the bits picks -0.
      r = a == b ? std::bit_cast<T>(static_cast<B>(std::bit_cast<B>(a) | std::bit_cast<B>(b))) : r;
      return (a != a || b != b) ? CanonicalNaN<T>() : r;
    } else {
      return a < b ? a : b;
    }
  }
};

// Elements per inner block. The inner loops have this fixed trip count,
// which GCC's -O2 ("very cheap") vectoriser accepts, unlike a loop to n.
constexpr size_t kLanes = 64;

// Narrow float formats, widened to fp32 for the arithmetic.
enum class Narrow { kHalf, kBf16 };

// ---------------------------------------------------------------------------
// Per-ISA loops. The same template bodies are stamped out once per target so
// the compiler vectorises each for that ISA; only the fp16 and bf16
// conversions need intrinsics (each ISA struct provides WidenHalfLanes,
// NarrowHalfLanes, WidenBf16Lanes and NarrowBf16Lanes for kLanes elements).
// __restrict holds because the dispatcher below routes the aliasing cases to
// Run2 (dst == one input) or Run1 (dst == a == b).
//
// fp16/bf16 go through fp32 kLanes at a time in arrays that, with every
// inner loop of a block unrolled, live in registers (not unrolled, the
// loop overhead and the stores and reloads of the arrays halved the
// throughput); a block of dst is written only after that block of a and b
// was read, so dst == a or dst == b is safe there without __restrict.

#define LOOM_REDUCE_LOOPS(ATTR)                                                                    \
  template <class Op, class T>                                                                     \
  ATTR static void Run3(T* __restrict d, const T* __restrict a, const T* __restrict b, size_t n) { \
    size_t i = 0;                                                                                  \
    for (; i + kLanes <= n; i += kLanes) {                                                         \
      for (size_t j = 0; j < kLanes; ++j) d[i + j] = Op::Apply(a[i + j], b[i + j]);                \
    }                                                                                              \
    for (; i < n; ++i) d[i] = Op::Apply(a[i], b[i]);                                               \
  }                                                                                                \
  template <class Op, class T>                                                                     \
  ATTR static void Run2(T* __restrict d, const T* __restrict b, size_t n) {                        \
    size_t i = 0;                                                                                  \
    for (; i + kLanes <= n; i += kLanes) {                                                         \
      for (size_t j = 0; j < kLanes; ++j) d[i + j] = Op::Apply(d[i + j], b[i + j]);                \
    }                                                                                              \
    for (; i < n; ++i) d[i] = Op::Apply(d[i], b[i]);                                               \
  }                                                                                                \
  template <class Op, class T>                                                                     \
  ATTR static void Run1(T* __restrict d, size_t n) {                                               \
    for (size_t i = 0; i < n; ++i) d[i] = Op::Apply(d[i], d[i]);                                   \
  }                                                                                                \
  template <class T>                                                                               \
  ATTR static void Divide(T* __restrict d, T divisor, size_t n) {                                  \
    size_t i = 0;                                                                                  \
    for (; i + kLanes <= n; i += kLanes) {                                                         \
      for (size_t j = 0; j < kLanes; ++j) d[i + j] = d[i + j] / divisor;                           \
    }                                                                                              \
    for (; i < n; ++i) d[i] = d[i] / divisor;                                                      \
  }                                                                                                \
  template <Narrow F>                                                                              \
  ATTR static inline void WidenLanes(const uint16_t* in, float* out) {                             \
    if constexpr (F == Narrow::kHalf) {                                                            \
      WidenHalfLanes(in, out);                                                                     \
    } else {                                                                                       \
      WidenBf16Lanes(in, out);                                                                     \
    }                                                                                              \
  }                                                                                                \
  template <Narrow F>                                                                              \
  ATTR static inline void NarrowLanes(const float* in, uint16_t* out) {                            \
    if constexpr (F == Narrow::kHalf) {                                                            \
      NarrowHalfLanes(in, out);                                                                    \
    } else {                                                                                       \
      NarrowBf16Lanes(in, out);                                                                    \
    }                                                                                              \
  }                                                                                                \
  template <Narrow F>                                                                              \
  static float WidenOne(uint16_t x) {                                                              \
    return F == Narrow::kHalf ? HalfToFloat(x) : Bf16ToFloat(x);                                   \
  }                                                                                                \
  template <Narrow F>                                                                              \
  static uint16_t NarrowOne(float x) {                                                             \
    return F == Narrow::kHalf ? FloatToHalf(x) : FloatToBf16(x);                                   \
  }                                                                                                \
  template <class Op, Narrow F>                                                                    \
  ATTR static void RunNarrow(uint16_t* d, const uint16_t* a, const uint16_t* b, size_t n) {        \
    alignas(64) float fa[kLanes];                                                                  \
    alignas(64) float fb[kLanes];                                                                  \
    size_t i = 0;                                                                                  \
    for (; i + kLanes <= n; i += kLanes) {                                                         \
      WidenLanes<F>(a + i, fa);                                                                    \
      WidenLanes<F>(b + i, fb);                                                                    \
      _Pragma("GCC unroll 64") for (size_t j = 0; j < kLanes; ++j) fa[j] =                         \
          Op::Apply(fa[j], fb[j]);                                                                 \
      NarrowLanes<F>(fa, d + i);                                                                   \
    }                                                                                              \
    for (; i < n; ++i) d[i] = NarrowOne<F>(Op::Apply(WidenOne<F>(a[i]), WidenOne<F>(b[i])));       \
  }                                                                                                \
  template <Narrow F>                                                                              \
  ATTR static void DivideNarrow(uint16_t* d, float divisor, size_t n) {                            \
    alignas(64) float f[kLanes];                                                                   \
    size_t i = 0;                                                                                  \
    for (; i + kLanes <= n; i += kLanes) {                                                         \
      WidenLanes<F>(d + i, f);                                                                     \
      _Pragma("GCC unroll 64") for (size_t j = 0; j < kLanes; ++j) f[j] = f[j] / divisor;          \
      NarrowLanes<F>(f, d + i);                                                                    \
    }                                                                                              \
    for (; i < n; ++i) d[i] = NarrowOne<F>(WidenOne<F>(d[i]) / divisor);                           \
  }

struct PortableIsa {
  LOOM_REDUCE_LOOPS()
  static void WidenHalfLanes(const uint16_t* in, float* out) {
    for (size_t j = 0; j < kLanes; ++j) out[j] = HalfToFloat(in[j]);
  }
  static void NarrowHalfLanes(const float* in, uint16_t* out) {
    for (size_t j = 0; j < kLanes; ++j) out[j] = FloatToHalf(in[j]);
  }
  static void WidenBf16Lanes(const uint16_t* in, float* out) {
    for (size_t j = 0; j < kLanes; ++j) out[j] = Bf16ToFloat(in[j]);
  }
  static void NarrowBf16Lanes(const float* in, uint16_t* out) {
    for (size_t j = 0; j < kLanes; ++j) out[j] = FloatToBf16(in[j]);
  }
};

#if LOOM_REDUCE_X86
#define LOOM_TARGET_AVX2 __attribute__((target("avx2,f16c")))
#define LOOM_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,f16c")))

// F16C in the vector body and the scalar HalfToFloat / FloatToHalf in the
// tails give identical bits (reduce_test compares them on every pattern),
// so where an array is split never shows in the result.
struct Avx2Isa {
  LOOM_REDUCE_LOOPS(LOOM_TARGET_AVX2)
  LOOM_TARGET_AVX2 static inline void WidenHalfLanes(const uint16_t* in, float* out) {
#pragma GCC unroll 8
    for (size_t j = 0; j < kLanes; j += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + j));
      _mm256_store_ps(out + j, _mm256_cvtph_ps(h));
    }
  }
  LOOM_TARGET_AVX2 static inline void NarrowHalfLanes(const float* in, uint16_t* out) {
#pragma GCC unroll 8
    for (size_t j = 0; j < kLanes; j += 8) {
      const __m128i h =
          _mm256_cvtps_ph(_mm256_load_ps(in + j), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), h);
    }
  }
  // bf16 is the top half of an fp32: widening is a shift.
  LOOM_TARGET_AVX2 static inline void WidenBf16Lanes(const uint16_t* in, float* out) {
#pragma GCC unroll 8
    for (size_t j = 0; j < kLanes; j += 8) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + j));
      _mm256_store_si256(reinterpret_cast<__m256i*>(out + j),
                         _mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
    }
  }
  // FloatToBf16 on 8 lanes: nearest even on the 16 dropped bits; a NaN is
  // quieted and keeps its sign and top payload bits.
  LOOM_TARGET_AVX2 static inline __m256i NarrowBf16x8(const float* in) {
    const __m256 f = _mm256_load_ps(in);
    const __m256i x = _mm256_castps_si256(f);
    const __m256i hi = _mm256_srli_epi32(x, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(nan));
  }
  LOOM_TARGET_AVX2 static inline void NarrowBf16Lanes(const float* in, uint16_t* out) {
#pragma GCC unroll 8
    for (size_t j = 0; j < kLanes; j += 16) {
      // Every lane is <= 0xFFFF, so the unsigned saturation never clips;
      // packus interleaves the 128-bit halves, the permute restores order.
      const __m256i packed = _mm256_packus_epi32(NarrowBf16x8(in + j), NarrowBf16x8(in + j + 8));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j),
                          _mm256_permute4x64_epi64(packed, 0xD8));
    }
  }
};

struct Avx512Isa {
  LOOM_REDUCE_LOOPS(LOOM_TARGET_AVX512)
  // maskz forms: the plain ones trip GCC 12's -Wmaybe-uninitialized.
  LOOM_TARGET_AVX512 static inline void WidenHalfLanes(const uint16_t* in, float* out) {
#pragma GCC unroll 8
    for (size_t j = 0; j < kLanes; j += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + j));
      _mm512_store_ps(out + j, _mm512_maskz_cvtph_ps(0xFFFF, h));
    }
  }
  LOOM_TARGET_AVX512 static inline void NarrowHalfLanes(const float* in, uint16_t* out) {
#pragma GCC unroll 8
    for (size_t j = 0; j < kLanes; j += 16) {
      const __m256i h = _mm512_maskz_cvtps_ph(0xFFFF, _mm512_load_ps(in + j),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), h);
    }
  }
  static constexpr __mmask16 kAll = 0xFFFF;
  LOOM_TARGET_AVX512 static inline void WidenBf16Lanes(const uint16_t* in, float* out) {
#pragma GCC unroll 8
    for (size_t j = 0; j < kLanes; j += 16) {
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + j));
      _mm512_store_si512(out + j,
                         _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, b), 16));
    }
  }
  // Avx2Isa::NarrowBf16x8 on 16 lanes, each then truncated to its low 16 bits.
  LOOM_TARGET_AVX512 static inline void NarrowBf16Lanes(const float* in, uint16_t* out) {
#pragma GCC unroll 8
    for (size_t j = 0; j < kLanes; j += 16) {
      const __m512 f = _mm512_load_ps(in + j);
      const __m512i x = _mm512_castps_si512(f);
      const __m512i hi = _mm512_maskz_srli_epi32(kAll, x, 16);
      const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
      const __m512i rounded = _mm512_maskz_srli_epi32(
          kAll, _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), lsb), 16);
      const __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
      const __m512i r = _mm512_mask_or_epi32(rounded, nan, hi, _mm512_set1_epi32(0x40));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j),
                          _mm512_maskz_cvtepi32_epi16(kAll, r));
    }
  }
};
#endif  // LOOM_REDUCE_X86

#undef LOOM_REDUCE_LOOPS

// ---------------------------------------------------------------------------
// Typed entry points, one per (ISA, type, op); the dispatch table holds them.

using ReduceFn = void (*)(void*, const void*, const void*, size_t);
using ScaleFn = void (*)(void*, size_t, int);

template <class Isa, class Op, class T>
void ReduceWide(void* dst, const void* a, const void* b, size_t n) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if (d == x && d == y) {
    Isa::template Run1<Op, T>(d, n);
  } else if (d == x) {
    Isa::template Run2<Op, T>(d, y, n);
  } else if (d == y) {
    Isa::template Run2<Op, T>(d, x, n);  // op is symmetric, so op(x, d) == op(d, x)
  } else {
    Isa::template Run3<Op, T>(d, x, y, n);
  }
}

template <class Isa, class Op, Narrow F>
void ReduceNarrow(void* dst, const void* a, const void* b, size_t n) {
  Isa::template RunNarrow<Op, F>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a),
                                 static_cast<const uint16_t*>(b), n);
}

template <class Isa, class T>
void ScaleFloat(void* buf, size_t n, int nranks) {
  Isa::template Divide<T>(static_cast<T*>(buf), static_cast<T>(nranks), n);
}

template <class Isa, Narrow F>
void ScaleNarrow(void* buf, size_t n, int nranks) {
  Isa::template DivideNarrow<F>(static_cast<uint16_t*>(buf), static_cast<float>(nranks), n);
}

// Integer average is not a hot path (one pass per collective), so it stays
// scalar; 64-bit arithmetic keeps nranks > 127 correct for 8-bit types.
template <class T>
void ScaleInt(void* buf, size_t n, int nranks) {
  T* d = static_cast<T*>(buf);
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_signed_v<T>) {
      d[i] = static_cast<T>(static_cast<int64_t>(d[i]) /
                            static_cast<int64_t>(nranks));  // truncates toward 0
    } else {
      d[i] = static_cast<T>(static_cast<uint64_t>(d[i]) / static_cast<uint64_t>(nranks));
    }
  }
}

struct DispatchTable {
  ReduceFn reduce[kNumDataTypes][kNumRedOps];
  ScaleFn scale[kNumDataTypes];
};

template <class Isa, class T>
void FillWide(DispatchTable& t, DataType type) {
  const int i = static_cast<int>(type);
  t.reduce[i][static_cast<int>(RedOp::kSum)] = &ReduceWide<Isa, SumOp, T>;
  t.reduce[i][static_cast<int>(RedOp::kProd)] = &ReduceWide<Isa, ProdOp, T>;
  t.reduce[i][static_cast<int>(RedOp::kMax)] = &ReduceWide<Isa, MaxOp, T>;
  t.reduce[i][static_cast<int>(RedOp::kMin)] = &ReduceWide<Isa, MinOp, T>;
  t.reduce[i][static_cast<int>(RedOp::kAvg)] = &ReduceWide<Isa, SumOp, T>;
  if constexpr (std::is_floating_point_v<T>) {
    t.scale[i] = &ScaleFloat<Isa, T>;
  } else {
    t.scale[i] = &ScaleInt<T>;
  }
}

template <class Isa, Narrow F>
void FillNarrow(DispatchTable& t, DataType type) {
  const int i = static_cast<int>(type);
  t.reduce[i][static_cast<int>(RedOp::kSum)] = &ReduceNarrow<Isa, SumOp, F>;
  t.reduce[i][static_cast<int>(RedOp::kProd)] = &ReduceNarrow<Isa, ProdOp, F>;
  t.reduce[i][static_cast<int>(RedOp::kMax)] = &ReduceNarrow<Isa, MaxOp, F>;
  t.reduce[i][static_cast<int>(RedOp::kMin)] = &ReduceNarrow<Isa, MinOp, F>;
  t.reduce[i][static_cast<int>(RedOp::kAvg)] = &ReduceNarrow<Isa, SumOp, F>;
  t.scale[i] = &ScaleNarrow<Isa, F>;
}

template <class Isa>
DispatchTable MakeTable() {
  DispatchTable t{};
  FillWide<Isa, int8_t>(t, DataType::kInt8);
  FillWide<Isa, uint8_t>(t, DataType::kUint8);
  FillWide<Isa, int32_t>(t, DataType::kInt32);
  FillWide<Isa, uint32_t>(t, DataType::kUint32);
  FillWide<Isa, int64_t>(t, DataType::kInt64);
  FillWide<Isa, uint64_t>(t, DataType::kUint64);
  FillWide<Isa, float>(t, DataType::kFloat32);
  FillWide<Isa, double>(t, DataType::kFloat64);
  FillNarrow<Isa, Narrow::kHalf>(t, DataType::kFloat16);
  FillNarrow<Isa, Narrow::kBf16>(t, DataType::kBfloat16);
  return t;
}

const DispatchTable* TableFor(ReduceIsa isa) {
  static const DispatchTable portable = MakeTable<PortableIsa>();
#if LOOM_REDUCE_X86
  static const DispatchTable avx2 = MakeTable<Avx2Isa>();
  static const DispatchTable avx512 = MakeTable<Avx512Isa>();
  switch (isa) {
    case ReduceIsa::kPortable:
      return &portable;
    case ReduceIsa::kAvx2:
      return &avx2;
    case ReduceIsa::kAvx512:
      return &avx512;
  }
#else
  (void)isa;
#endif
  return &portable;
}

#if LOOM_REDUCE_X86
// Clang 14's __builtin_cpu_supports has no "f16c", so ask CPUID directly.
// F16C needs the AVX register state, which the avx2 check confirms.
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

bool CpuSupports(ReduceIsa isa) {
#if LOOM_REDUCE_X86
  __builtin_cpu_init();
  switch (isa) {
    case ReduceIsa::kPortable:
      return true;
    case ReduceIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && HasF16c();
    case ReduceIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && HasF16c();
  }
  return false;
#else
  return isa == ReduceIsa::kPortable;
#endif
}

const char* IsaName(ReduceIsa isa) {
  switch (isa) {
    case ReduceIsa::kPortable:
      return "portable";
    case ReduceIsa::kAvx2:
      return "avx2+f16c";
    case ReduceIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

// The level in use, chosen at first use (the widest the CPU has); every
// later call costs one atomic load and one indirect jump. All levels compute
// identical bits, so the choice only changes speed.
std::atomic<int> g_isa{-1};

ReduceIsa CurrentIsa() {
  int isa = g_isa.load(std::memory_order_acquire);
  if (isa < 0) {
    ReduceIsa best = ReduceIsa::kPortable;
    if (CpuSupports(ReduceIsa::kAvx512)) {
      best = ReduceIsa::kAvx512;
    } else if (CpuSupports(ReduceIsa::kAvx2)) {
      best = ReduceIsa::kAvx2;
    }
    int expected = -1;
    if (g_isa.compare_exchange_strong(expected, static_cast<int>(best),
                                      std::memory_order_acq_rel)) {
      LOOM_INFO(log::kColl, "reduce kernels: %s", IsaName(best));
      isa = static_cast<int>(best);
    } else {
      isa = expected;
    }
  }
  return static_cast<ReduceIsa>(isa);
}

// CurrentIsa's table, kept so that a call costs one load: TableFor's
// function-local statics cost their guards on every call, a visible share
// of an 8 B all-reduce's path.
std::atomic<const DispatchTable*> g_table{nullptr};

const DispatchTable& Table() {
  const DispatchTable* t = g_table.load(std::memory_order_acquire);
  if (t != nullptr) return *t;
  const DispatchTable* first = TableFor(CurrentIsa());
  // A ForceReduceIsa since CurrentIsa's answer wins.
  if (g_table.compare_exchange_strong(t, first, std::memory_order_acq_rel)) return *first;
  return *t;
}

}  // namespace

void ReduceInto(void* dst, const void* a, const void* b, size_t count, DataType type, RedOp op) {
  if (!IsValid(type)) DieInvalid("DataType", static_cast<int>(type));
  if (!IsValid(op)) DieInvalid("RedOp", static_cast<int>(op));
  if (count == 0) return;
  Table().reduce[static_cast<int>(type)][static_cast<int>(op)](dst, a, b, count);
}

void ScaleForAvg(void* buf, size_t count, DataType type, int nranks) {
  if (!IsValid(type)) DieInvalid("DataType", static_cast<int>(type));
  if (nranks < 1) DieInvalid("nranks", nranks);
  if (nranks == 1 || count == 0) return;
  Table().scale[static_cast<int>(type)](buf, count, nranks);
}

void PreMulInto(void* dst, const void* src, size_t count, DataType type, const void* scalar) {
  if (!IsValid(type)) DieInvalid("DataType", static_cast<int>(type));
  const size_t es = SizeOf(type);
  // The scalar repeated over one L1-sized block, multiplied in with the
  // kProd kernels block by block.
  alignas(64) unsigned char block[4096];
  const size_t per_block = sizeof block / es;
  for (size_t i = 0; i < std::min(count, per_block); ++i) std::memcpy(block + i * es, scalar, es);
  for (size_t off = 0; off < count; off += per_block) {
    const size_t n = std::min(per_block, count - off);
    ReduceInto(static_cast<char*>(dst) + off * es, static_cast<const char*>(src) + off * es, block,
               n, type, RedOp::kProd);
  }
}

ReduceIsa ActiveReduceIsa() {
  return CurrentIsa();
}

bool ForceReduceIsa(ReduceIsa isa) {
  if (!CpuSupports(isa)) return false;
  g_isa.store(static_cast<int>(isa), std::memory_order_release);
  g_table.store(TableFor(isa), std::memory_order_release);
  return true;
}

}  // namespace loom
