// Data check of `loom perf`: a deterministic input pattern per (rank, index)
// and a CPU reference computed on the fly, element by element, so checking
// needs no buffer of expected values. Pure functions over host memory.
//
// The pattern keeps reductions exact in every type, including half and
// bfloat16: inputs are small integers (0..3; for prod 1, or 2 for about one
// input in eight), so sums and products stay integers
// that the type represents exactly for the rank counts we run (bfloat16
// sums are exact up to 85 ranks, half up to 682). Integer types wrap modulo
// 2^bits like NCCL, and the reference wraps the same way, so they are exact
// for any rank count. Floating-point results beyond the exact range, and
// avg (a division), are compared with a tolerance of a few units in the
// last place of the type.
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/types.hpp"
#include "tools/perf/collective.h"

namespace loom::perf {

// The small integer rank `rank` puts at element `index` of its input when
// the call reduces with `op` (collectives without an operator use kSum's
// pattern). rank >= 0.
int PatternValue(RedOp op, int rank, size_t index);

// buf[k] = PatternValue(op, rank, first_index + k) converted to `type`,
// for k in [0, count). buf holds count elements of `type`.
void FillPattern(void* buf, DataType type, RedOp op, int rank, size_t first_index, size_t count);

// Number of k in [0, count) where buf[k] is not the reduction with `op` over
// ranks [0, nranks) of PatternValue(op, r, first_index + k).
// (mulsum: of MulSumScalar(r) * PatternValue(kSum, r, ...)).
size_t CountWrongReduced(const void* buf, DataType type, PerfOp op, int nranks, size_t first_index,
                         size_t count);

// Number of k in [0, count) where buf[k] != PatternValue(op, rank, first_index + k),
// compared bit for bit (the data was copied, not computed).
size_t CountWrongCopied(const void* buf, DataType type, RedOp op, int rank, size_t first_index,
                        size_t count);

// What a rank's output must hold after one call, so that a check is one
// call: which part of the receive buffer is checked, and against what.
// Built by ExpectationFor; consumed by CountWrong.
struct Expectation {
  enum class Kind {
    kNone,     // nothing to check on this rank (reduce on a non-root)
    kReduced,  // element k = reduction of index first_index + k over all ranks
    kCopied,   // element k = PatternValue(source_rank, first_index + k)
    kBlocks,   // element b * block_count + k = PatternValue(b, first_index + k)
  };
  Kind kind = Kind::kNone;
  size_t count = 0;        // elements to check
  size_t first_index = 0;  // see kind
  int source_rank = 0;     // kCopied
  size_t block_count = 0;  // kBlocks: one block from each rank
};

// Every collective fills rank r's send buffer with PatternValue(op, r, 0 ..
// send_count), so an all-reduce's element i reduces index i, a
// reduce-scatter's element k on rank r reduces index r * recv_count + k, an
// all-gather's (and a hypercube's, and the gather root's) block b is rank b's
// input, an alltoall's block b is rank b's block for us (indices rank * count
// ..), sendrecv receives rank - 1's, and scatter's output on rank r is the
// root's input from index r * recv_count.
// rank in [0, nranks), root in [0, nranks).
Expectation ExpectationFor(Collective c, const Geometry& g, int rank, int nranks, int root);

// Counts the wrong elements of `out` (the receive side of the call, start of
// the checked region) against `e`; nranks and op as for the call.
size_t CountWrong(const void* out, DataType type, PerfOp op, int nranks, const Expectation& e);

// A small integer in `type`'s layout (the low SizeOf(type) bytes of the
// result): a mulsum scalar for Reduction::PreMulSum.
uint64_t EncodeSmallValue(DataType type, int v);

// Flips bits of element `index` of buf so that it no longer matches any
// pattern value (used by --corrupt-for-test to prove the check can fail).
void CorruptElement(void* buf, DataType type, size_t index);

}  // namespace loom::perf
