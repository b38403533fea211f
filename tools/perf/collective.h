// The collectives `loom perf` measures and their nccl-tests conventions: how
// a message size becomes element counts and in-place offsets, and how a time
// becomes algorithm and bus bandwidth. Pure arithmetic, no communication.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "loom/types.hpp"

namespace loom::perf {

enum class Collective {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kAllToAll,
  kSendRecv,
  // Built from grouped Send/Recv, as nccl-tests builds them.
  kGather,
  kScatter,
  kHyperCube,
};
inline constexpr int kNumCollectives = 10;

// "all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce",
// "alltoall", "sendrecv", "gather", "scatter", "hypercube" (nccl-tests'
// binary names without "_perf").
std::string_view Name(Collective c);

// Accepts Name(c), Name(c) + "_perf", and the same without underscores
// ("allreduce", "alltoall_perf"). nullopt for anything else.
std::optional<Collective> ParseCollective(std::string_view text);

// An operator of -o: a RedOp, or nccl-tests' "mulsum", a pre-multiplied sum
// (ncclRedOpCreatePreMulSum) in which rank r scales its input by
// MulSumScalar(r). Every RedOp converts to one.
struct PerfOp {
  PerfOp(RedOp o = RedOp::kSum) : op(o) {}  // NOLINT(google-explicit-constructor)
  static PerfOp MulSum() {
    PerfOp p(RedOp::kSum);
    p.mulsum = true;
    return p;
  }
  bool operator==(const PerfOp&) const = default;
  RedOp op;  // kSum for mulsum (its input pattern is sum's)
  bool mulsum = false;
};
// The RedOp's nccl-tests name, or "mulsum".
std::string_view Name(PerfOp op);
// 1 for even ranks, 2 for odd ones: exact in every type.
int MulSumScalar(int rank);

// Whether the collective takes a reduction operator / a root; when not,
// the table shows "none" / -1 like nccl-tests. sendrecv is the exception
// nccl-tests makes: it prints (and loops over) the -o operator.
bool UsesRedOp(Collective c);
bool PrintsRedOp(Collective c);
bool UsesRoot(Collective c);

// Why `c` cannot run on nranks ranks, in nccl-tests' words ("nRanks 3 is not
// a power of 2, skipping" for hypercube), or nullopt when it can.
std::optional<std::string> SkipReason(Collective c, int nranks);

// Element counts of one call, as nccl-tests' GetCollByteCount computes them
// from a message size in bytes. All counts are in elements.
struct Geometry {
  size_t send_count = 0;   // elements each rank's send buffer holds
  size_t recv_count = 0;   // elements each rank's receive buffer holds
  size_t param_count = 0;  // the count argument passed to the call
  // In-place: sendbuf = recvbuf + send_inplace_offset * rank elements and
  // recvbuf = recvbuf + recv_inplace_offset * rank elements (NCCL's layout:
  // all_gather reads its input from its slot of the output; reduce_scatter
  // writes its output into its slot of the input).
  size_t send_inplace_offset = 0;
  size_t recv_inplace_offset = 0;

  // The "size" column: the larger buffer in bytes.
  size_t Bytes(size_t type_size) const;
};

// nccl-tests' conventions: size is the total buffer size; reduce_scatter,
// all_gather, alltoall, gather, scatter and hypercube divide it by nranks and
// round the per-rank count down to a multiple of 16 bytes (gather and
// hypercube lay out like all_gather, scatter like reduce_scatter). nranks >= 1,
// type_size in {1, 2, 4, 8}.
Geometry ComputeGeometry(Collective c, size_t bytes, size_t type_size, int nranks);

// busbw = algbw * factor: all_reduce 2(n-1)/n; reduce_scatter, all_gather,
// alltoall, gather, scatter (n-1)/n; broadcast, reduce, sendrecv, hypercube 1.
// nranks >= 1.
double BusBwFactor(Collective c, int nranks);

struct Bandwidth {
  double algbw = 0;  // GB/s (1e9 bytes)
  double busbw = 0;  // GB/s
};
// algbw = bytes moved per call / seconds, where the bytes are param_count *
// type_size, times nranks for reduce_scatter, all_gather, alltoall, gather and
// scatter (so it is the "size" column), times nranks - 1 for hypercube (what
// each rank receives). seconds must be > 0.
Bandwidth ComputeBandwidth(Collective c, size_t param_count, size_t type_size, double seconds,
                           int nranks);

}  // namespace loom::perf
