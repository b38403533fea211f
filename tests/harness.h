// Ranks as threads: N communicators in one process over the real bootstrap
// and transports, for fast multi-rank tests. Also typed element access and a
// CPU reference for every collective.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "loom/loom.hpp"

namespace loom::testing {

// Runs body(comm) on n ranks, one thread each, all sharing a fresh UniqueId.
// Creation failures are test failures. Returns when every thread finished.
void RunRanks(int n, const std::function<void(Communicator&)>& body, CommConfig config = {});

// Element i of a buffer of `type`, as double / set from a double (wrapping
// for integers, rounding for fp16/bf16).
double GetElem(const void* buf, size_t i, DataType type);
void SetElem(void* buf, size_t i, DataType type, double v);

// Deterministic test input of `rank` at index i for reduction `op`, chosen so
// that every reduction over up to 8 ranks is exact in every type.
double InputValue(int rank, size_t i, RedOp op);

// Fills buf[0, count) with InputValue(rank, offset + i, op).
void FillInput(void* buf, size_t count, DataType type, int rank, size_t offset, RedOp op);

// Expected reduction over ranks 0..n-1 of InputValue(r, index, op), computed
// with the same element semantics as the kernels, in `type`, written to out.
void ExpectedReduction(void* out, size_t count, DataType type, RedOp op, int n, size_t offset);

// Number of elements of a and b (count, type) that differ bitwise.
size_t CountMismatches(const void* a, const void* b, size_t count, DataType type);

}  // namespace loom::testing
