// CPU reduction kernels: dst = a op b for every DataType x RedOp, plus the
// final division of kAvg and the fp16/bf16 <-> fp32 conversions they use.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "loom/types.hpp"

namespace loom {

// dst[i] = a[i] op b[i] for i in [0, count).
//
// Contract:
//  - dst may be the same pointer as a or b (or both); any other overlap of
//    dst with a or b is undefined. a and b may overlap each other freely.
//  - type and op must satisfy IsValid(); callers validate user input first
//    (an invalid value aborts the process: it is a programming error here).
//  - kAvg reduces as kSum; ScaleForAvg does the division once at the end.
//  - Determinism: the result of each element depends only on that element's
//    inputs, so it is bit-identical however the array is split into chunks,
//    and op(a, b) == op(b, a) bit-for-bit, so every rank of an all-reduce
//    gets the same bits whatever order the tree or ring delivered them in.
//      * integers: sum and prod wrap modulo 2^bits (two's complement), no UB.
//      * floats: one IEEE operation per element, round to nearest even, no
//        FMA contraction; fp16/bf16 are widened to fp32, combined and
//        rounded back (nearest even). Subnormals are kept.
//      * NaN: every NaN result is replaced by the canonical quiet NaN
//        (positive sign, only the top mantissa bit set), because x86 keeps
//        the payload of the first operand and that would break symmetry.
//      * max/min propagate NaN (IEEE 754-2019 maximum/minimum, not fmax):
//        if either input is NaN the result is the canonical NaN. For equal
//        values max(+0, -0) = +0 and min(+0, -0) = -0 in either order.
//  - Thread-safe and non-blocking; uses the widest SIMD level the CPU offers
//    (AVX-512, AVX2+F16C, or scalar), chosen once at first use.
void ReduceInto(void* dst, const void* a, const void* b, size_t count, DataType type, RedOp op);

// The final step of kAvg: buf[i] /= nranks, in place.
//  - Floats divide with one correctly rounded IEEE division (fp16/bf16 in
//    fp32, rounded back to nearest even). Unlike NCCL, which pre-multiplies
//    each input by 1/n, loom divides the exact sum once: fewer roundings.
//  - Integers use integer division like NCCL's ncclAvg on integer types:
//    the wrapped sum divided by nranks, truncated toward zero for signed
//    types (-7 / 2 == -3).
//  - nranks must be >= 1; 1 leaves buf unchanged. Thread-safe, non-blocking.
void ScaleForAvg(void* buf, size_t count, DataType type, int nranks);

// SIMD level of the kernels. The widest one the CPU supports is picked at
// first use and logged at INFO (subsystem COLL); every level gives the same
// bits, so this matters only to tests (which run each level against the
// reference) and to the benchmark.
enum class ReduceIsa : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

ReduceIsa ActiveReduceIsa();

// Pins the level for the whole process; false (and no change) when the CPU
// lacks it. For tests and benchmarks: call it while no reduction runs.
bool ForceReduceIsa(ReduceIsa isa);

// --- fp16 (IEEE binary16) and bfloat16 conversions -------------------------
// Exact widening, and narrowing with round-to-nearest-even, overflow to Inf
// and correct subnormals. NaN keeps its sign and the top payload bits and is
// made quiet, which is what the x86 F16C instructions do, so the scalar and
// the SIMD paths of the kernels agree bit-for-bit.

inline float HalfToFloat(uint16_t h) {
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
  return std::bit_cast<float>(bits);
}

inline uint16_t FloatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
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

inline float Bf16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) {
    return static_cast<uint16_t>((x >> 16) | 0x0040u);  // NaN: quiet, truncate payload
  }
  // Nearest even on the 16 dropped bits; overflow correctly becomes Inf.
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace loom
