// CPU reduction kernels: dst = a op b for every DataType x RedOp, plus the
// final division of kAvg and the fp16/bf16 <-> fp32 conversions they use.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "collectives/reduce/half.h"
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

// A PreMulSum's scaling: dst[i] = src[i] * scalar for i in [0, count), with
// kProd's semantics above (integers wrap; one rounding; a NaN product is the
// canonical NaN). `scalar` points to one element of `type`; dst may be src.
// Thread-safe, non-blocking.
void PreMulInto(void* dst, const void* src, size_t count, DataType type, const void* scalar);

// SIMD level of the kernels. The widest one the CPU supports is picked at
// first use and logged at INFO (subsystem COLL); every level gives the same
// bits, so this matters only to tests (which run each level against the
// reference) and to the benchmark.
enum class ReduceIsa : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

ReduceIsa ActiveReduceIsa();

// Pins the level for the whole process; false (and no change) when the CPU
// lacks it. For tests and benchmarks: call it while no reduction runs.
bool ForceReduceIsa(ReduceIsa isa);

}  // namespace loom
