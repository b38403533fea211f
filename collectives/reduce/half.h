// fp16 (IEEE binary16) and bfloat16 <-> fp32 conversions, written once for
// the CPU kernels (reduce.h) and the CUDA kernels (cuda/reduce_ops.h): host
// and device (__host__ __device__ under nvcc), so both give the same bits.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__ __forceinline__
#else
#include <bit>
#define LOOM_HD inline
#endif

namespace loom {

// Bit casts that work on host and device.
namespace half_detail {
LOOM_HD uint32_t Bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return std::bit_cast<uint32_t>(f);
#endif
}
LOOM_HD float FromBits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}
LOOM_HD uint64_t Bits(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  return std::bit_cast<uint64_t>(d);
#endif
}
LOOM_HD double FromBits(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  return std::bit_cast<double>(u);
#endif
}
}  // namespace half_detail

// --- fp16 (IEEE binary16) and bfloat16 conversions -------------------------
// Exact widening, and narrowing with round-to-nearest-even, overflow to Inf
// and correct subnormals. NaN keeps its sign and the top payload bits and is
// made quiet, which is what the x86 F16C instructions do, so the scalar and
// the SIMD paths of the kernels agree bit-for-bit.

LOOM_HD float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    // Inf stays Inf; NaN is quieted (bit 22) with its payload moved up.
    bits = sign | 0x7F800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalise; every one is a normal float.
    uint32_t e = 113;  // exponent of 2^-14 in float bias, minus shifts below
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mant & 0x3FFu) << 13);
  }
  return half_detail::FromBits(bits);
}

LOOM_HD uint16_t FloatToHalf(float f) {
  const uint32_t x = half_detail::Bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {  // NaN: quiet, keep the top 9 payload bits
    return static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x1FFu));
  }
  if (abs >= 0x477FF000u) {  // >= 65520 rounds to Inf (also Inf itself)
    return static_cast<uint16_t>(sign | 0x7C00u);
  }
  if (abs < 0x38800000u) {  // below 2^-14: subnormal half or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 ties to 0
    // Value = m * 2^(e-150) with m the 24-bit significand; the half result
    // is value / 2^-24 rounded, i.e. m >> (126 - e) with nearest-even.
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - e;
    const uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    const uint32_t up = (rem > half || (rem == half && (q & 1u))) ? 1u : 0u;
    return static_cast<uint16_t>(sign | (q + up));
  }
  // Normal: rebias and round the 13 dropped bits to nearest even; a carry
  // out of the mantissa correctly bumps the exponent (up to Inf).
  const uint32_t rebased = abs - (112u << 23);
  const uint32_t rounded = rebased + 0xFFFu + ((rebased >> 13) & 1u);
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

LOOM_HD float Bf16ToFloat(uint16_t b) {
  return half_detail::FromBits(static_cast<uint32_t>(b) << 16);
}

LOOM_HD uint16_t FloatToBf16(float f) {
  const uint32_t x = half_detail::Bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x0040u);  // NaN: quiet, truncate payload
  }
  // Nearest even on the 16 dropped bits; overflow correctly becomes Inf.
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace loom
