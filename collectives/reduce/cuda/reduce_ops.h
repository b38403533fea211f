// Element operators of the device reduction kernels, written once for host
// and device (__host__ __device__ under nvcc, plain inline under a C++
// compiler) so the CPU-only unit test can prove they give the same bits as
// the CPU kernels in collectives/reduce/reduce.h on every awkward input.
//
// Semantics are reduce.h's, restated here only where the device needs care:
//  - integers wrap (arithmetic in unsigned, products at least 32 bits wide);
//  - floats: one IEEE operation per element, round to nearest even, no FMA
//    (the CUDA target is built with --fmad=false); subnormals kept (no
//    fast-math, so no flush-to-zero);
//  - every NaN a reduction produces is the canonical quiet NaN; GPUs make
//    0x7FFFFFFF by default, so the canonicalisation is not optional here;
//  - fp16/bf16 widen to fp32, combine, narrow with nearest-even, with the
//    CPU kernels' own conversions (half.h: the same source on both sides,
//    NaN payloads included) instead of the hardware ones, whose NaN results
//    differ;
//  - the kAvg division keeps a NaN's payload (quieted), as x86 division
//    does, because it is not a reduction of two values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "collectives/reduce/half.h"  // LOOM_HD and the fp16/bf16 conversions

namespace loom::cuda_reduce {

// Bit casts that work on both sides: half.h's.
using half_detail::Bits;
using half_detail::FromBits;

LOOM_HD float CanonicalNaN(float) {
  return FromBits(uint32_t{0x7FC00000u});
}
LOOM_HD double CanonicalNaN(double) {
  return FromBits(uint64_t{0x7FF8000000000000u});
}
// x with its quiet bit set: what x86 division returns for a NaN operand.
LOOM_HD float Quiet(float x) {
  return FromBits(Bits(x) | 0x00400000u);
}
LOOM_HD double Quiet(double x) {
  return FromBits(Bits(x) | 0x0008000000000000u);
}

// fp16/bf16 conversions: loom::HalfToFloat and friends from half.h, shared
// with the CPU kernels.

// --- operators on computation types (integers, float, double) ---------------

template <class T>
LOOM_HD T Canonicalize(T r) {
  return r != r ? CanonicalNaN(r) : r;
}

struct SumOp {
  template <class T>
  static LOOM_HD T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return Canonicalize<T>(a + b);
    } else {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    }
  }
};

struct ProdOp {
  template <class T>
  static LOOM_HD T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return Canonicalize<T>(a * b);
    } else {
      using U = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    }
  }
};

struct MaxOp {
  template <class T>
  static LOOM_HD T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a || b != b) return CanonicalNaN(a);
      if (a == b) return FromBits(Bits(a) & Bits(b));  // max(+0, -0) = +0
      return a > b ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};

struct MinOp {
  template <class T>
  static LOOM_HD T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a || b != b) return CanonicalNaN(a);
      if (a == b) return FromBits(Bits(a) | Bits(b));  // min(+0, -0) = -0
      return a < b ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
};

// --- storage types ------------------------------------------------------------
// Plain types are their own storage. fp16 and bf16 are stored as uint16_t
// bits and computed in fp32.

struct Half {
  using Storage = uint16_t;
  static LOOM_HD float Widen(uint16_t x) { return HalfToFloat(x); }
  static LOOM_HD uint16_t Narrow(float x) { return FloatToHalf(x); }
};
struct Bf16 {
  using Storage = uint16_t;
  static LOOM_HD float Widen(uint16_t x) { return Bf16ToFloat(x); }
  static LOOM_HD uint16_t Narrow(float x) { return FloatToBf16(x); }
};

template <class E>
struct StorageOf {
  using type = E;
};
template <>
struct StorageOf<Half> {
  using type = uint16_t;
};
template <>
struct StorageOf<Bf16> {
  using type = uint16_t;
};

// One element of `dst = a op b` for element kind E (a plain type, Half or Bf16).
template <class E, class Op>
LOOM_HD typename StorageOf<E>::type ApplyElem(typename StorageOf<E>::type a,
                                              typename StorageOf<E>::type b) {
  if constexpr (std::is_same_v<E, Half> || std::is_same_v<E, Bf16>) {
    return E::Narrow(Op::Apply(E::Widen(a), E::Widen(b)));
  } else {
    return Op::Apply(a, b);
  }
}

// One element of the kAvg division, matching ScaleForAvg in reduce.h for
// nranks >= 2 (with nranks == 1 both sides leave the buffer untouched,
// NaN payloads included, so the launcher must not call this).
template <class E>
LOOM_HD typename StorageOf<E>::type ScaleElem(typename StorageOf<E>::type x, int nranks) {
  if constexpr (std::is_same_v<E, Half> || std::is_same_v<E, Bf16>) {
    const float w = E::Widen(x);
    return E::Narrow(w != w ? Quiet(w) : w / static_cast<float>(nranks));
  } else if constexpr (std::is_floating_point_v<E>) {
    return x != x ? Quiet(x) : x / static_cast<E>(nranks);
  } else if constexpr (std::is_signed_v<E>) {
    return static_cast<E>(static_cast<int64_t>(x) / static_cast<int64_t>(nranks));
  } else {
    return static_cast<E>(static_cast<uint64_t>(x) / static_cast<uint64_t>(nranks));
  }
}

// How a kernel covers `count` elements of `elem` bytes: `head` elements one
// at a time, then `packs` 16-byte vectors, then the rest one at a time.
// Vectors need every pointer at the same offset modulo 16 (and that offset a
// multiple of `elem`); otherwise there are no packs and head == count.
// Host-side launch arithmetic, kept here so the CPU-only test covers it.
struct VectorSplit {
  size_t head = 0;
  size_t packs = 0;
};

inline VectorSplit SplitForVectors(size_t count, size_t elem, const void* const* ptrs, int nptrs) {
  const uintptr_t mis = reinterpret_cast<uintptr_t>(ptrs[0]) % 16;
  for (int i = 0; i < nptrs; ++i) {
    const uintptr_t m = reinterpret_cast<uintptr_t>(ptrs[i]) % 16;
    if (m != mis || m % elem != 0) return VectorSplit{count, 0};
  }
  VectorSplit s;
  s.head = mis == 0 ? 0 : (16 - mis) / elem;
  if (s.head >= count) return VectorSplit{count, 0};
  s.packs = (count - s.head) * elem / 16;
  return s;
}

}  // namespace loom::cuda_reduce
