// nccl-tests' size, count and bandwidth conventions for each collective.
#include "tools/perf/collective.h"

#include <algorithm>
#include <string>

namespace loom::perf {

std::string_view Name(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kBroadcast:
      return "broadcast";
    case Collective::kReduce:
      return "reduce";
    case Collective::kAllToAll:
      return "alltoall";
    case Collective::kSendRecv:
      return "sendrecv";
    case Collective::kGather:
      return "gather";
    case Collective::kScatter:
      return "scatter";
    case Collective::kHyperCube:
      return "hypercube";
  }
  return "invalid";
}

std::optional<Collective> ParseCollective(std::string_view text) {
  constexpr std::string_view kSuffix = "_perf";
  if (text.size() > kSuffix.size() && text.ends_with(kSuffix)) {
    text.remove_suffix(kSuffix.size());
  }
  std::string squeezed(text);
  std::erase(squeezed, '_');
  for (int i = 0; i < kNumCollectives; ++i) {
    const auto c = static_cast<Collective>(i);
    std::string name(Name(c));
    if (text == name) return c;
    std::erase(name, '_');
    if (squeezed == name) return c;
  }
  return std::nullopt;
}

std::string_view Name(PerfOp op) {
  return op.mulsum ? std::string_view("mulsum") : Name(op.op);
}

int MulSumScalar(int rank) {
  return 1 + (rank & 1);
}

bool UsesRedOp(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}

bool PrintsRedOp(Collective c) {
  return UsesRedOp(c) || c == Collective::kSendRecv;
}

bool UsesRoot(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
         c == Collective::kScatter;
}

std::optional<std::string> SkipReason(Collective c, int nranks) {
  // Recursive doubling pairs rank with rank ^ mask: only powers of two.
  if (c == Collective::kHyperCube && (nranks < 1 || (nranks & (nranks - 1)) != 0)) {
    return "nRanks " + std::to_string(nranks) + " is not a power of 2, skipping";
  }
  return std::nullopt;
}

size_t Geometry::Bytes(size_t type_size) const {
  return std::max(send_count, recv_count) * type_size;
}

Geometry ComputeGeometry(Collective c, size_t bytes, size_t type_size, int nranks) {
  const size_t count = bytes / type_size;
  const auto n = static_cast<size_t>(nranks);
  // Per-rank slices are rounded down to whole 16-byte units (nccl-tests
  // keeps every rank's slice aligned for vectorised kernels).
  const size_t align = 16 / type_size;
  const size_t slice = (count / n) / align * align;
  Geometry g;
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv:
      g.send_count = g.recv_count = g.param_count = count;
      break;
    case Collective::kReduceScatter:
    case Collective::kScatter:
      g.send_count = slice * n;
      g.recv_count = g.param_count = slice;
      g.recv_inplace_offset = slice;
      break;
    case Collective::kAllGather:
    case Collective::kGather:
    case Collective::kHyperCube:
      g.send_count = g.param_count = slice;
      g.recv_count = slice * n;
      g.send_inplace_offset = slice;
      break;
    case Collective::kAllToAll:
      g.param_count = slice;
      g.send_count = g.recv_count = slice * n;
      break;
  }
  return g;
}

double BusBwFactor(Collective c, int nranks) {
  const double n = nranks;
  switch (c) {
    case Collective::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll:
    case Collective::kGather:
    case Collective::kScatter:
      return (n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv:
    case Collective::kHyperCube:
      return 1.0;
  }
  return 1.0;
}

Bandwidth ComputeBandwidth(Collective c, size_t param_count, size_t type_size, double seconds,
                           int nranks) {
  double bytes = static_cast<double>(param_count) * static_cast<double>(type_size);
  if (c == Collective::kReduceScatter || c == Collective::kAllGather ||
      c == Collective::kAllToAll || c == Collective::kGather || c == Collective::kScatter) {
    bytes *= nranks;
  }
  // Each rank receives the other nranks - 1 blocks.
  if (c == Collective::kHyperCube) bytes *= nranks - 1;
  Bandwidth bw;
  bw.algbw = bytes / 1.0e9 / seconds;
  bw.busbw = bw.algbw * BusBwFactor(c, nranks);
  return bw;
}

}  // namespace loom::perf
