// Input pattern, CPU reference and mismatch counting for `loom perf -c 1`.
#include "tools/perf/check.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "collectives/reduce/reduce.h"

namespace loom::perf {
namespace {

bool IsFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBfloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

bool IsSigned(DataType t) {
  return t == DataType::kInt8 || t == DataType::kInt32 || t == DataType::kInt64;
}

// Machine epsilon of a floating type (distance from 1 to the next value).
double Epsilon(DataType t) {
  switch (t) {
    case DataType::kFloat16:
      return 0x1p-10;
    case DataType::kBfloat16:
      return 0x1p-7;
    case DataType::kFloat32:
      return 0x1p-23;
    default:
      return 0x1p-52;
  }
}

// Largest integer up to which every integer is representable.
double ExactIntegerLimit(DataType t) {
  return 2.0 / Epsilon(t);
}

// Raw bits of element k, zero-extended.
uint64_t LoadBits(const void* buf, size_t type_size, size_t k) {
  uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const char*>(buf) + k * type_size, type_size);  // little endian
  return bits;
}

void StoreBits(void* buf, size_t type_size, size_t k, uint64_t bits) {
  std::memcpy(static_cast<char*>(buf) + k * type_size, &bits, type_size);
}

uint64_t WidthMask(DataType t) {
  const size_t bits = SizeOf(t) * 8;
  return bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
}

// A float value in the type's bit layout (rounded to nearest even).
uint64_t EncodeFloat(DataType t, double v) {
  switch (t) {
    case DataType::kFloat16:
      return FloatToHalf(static_cast<float>(v));
    case DataType::kBfloat16:
      return FloatToBf16(static_cast<float>(v));
    case DataType::kFloat32:
      return std::bit_cast<uint32_t>(static_cast<float>(v));
    default:
      return std::bit_cast<uint64_t>(v);
  }
}

double DecodeFloat(DataType t, uint64_t bits) {
  switch (t) {
    case DataType::kFloat16:
      return HalfToFloat(static_cast<uint16_t>(bits));
    case DataType::kBfloat16:
      return Bf16ToFloat(static_cast<uint16_t>(bits));
    case DataType::kFloat32:
      return std::bit_cast<float>(static_cast<uint32_t>(bits));
    default:
      return std::bit_cast<double>(bits);
  }
}

// A small non-negative integer in the type's bit layout.
uint64_t EncodeSmall(DataType t, int v) {
  return IsFloat(t) ? EncodeFloat(t, v) : static_cast<uint64_t>(v);
}

// Interprets width-truncated bits as the signed value when the type is signed.
int64_t SignExtend(DataType t, uint64_t bits) {
  const size_t width = SizeOf(t) * 8;
  if (!IsSigned(t) || width == 64) return static_cast<int64_t>(bits);
  const uint64_t sign = uint64_t{1} << (width - 1);
  return static_cast<int64_t>((bits ^ sign) - sign);
}

// Reference reduction of one element over all ranks. For integer types the
// result is the exact bit pattern (modular sum and product, like NCCL; avg is
// the wrapped sum divided by nranks, truncated toward zero). For floats it is
// the exact mathematical value, and *tolerance says how far the library may
// be from it.
struct Reference {
  uint64_t bits = 0;  // integers: expected bits; floats: EncodeFloat(value)
  double value = 0;   // floats only
  double tolerance = 0;
};

Reference ReduceReference(DataType t, PerfOp perf_op, int nranks, size_t index) {
  Reference ref;
  const RedOp op = perf_op.op;
  // mulsum: rank r's input times its scalar, then a sum.
  auto input = [&](int r) {
    const int v = PatternValue(op, r, index);
    return perf_op.mulsum ? v * MulSumScalar(r) : v;
  };
  // Both accumulators run side by side: uint64 wraps modulo 2^64, so its
  // truncation is the wrapped result of any narrower integer; the double is
  // exact for the floats (small-integer sums, products of twos).
  uint64_t acc = static_cast<uint64_t>(input(0));
  double facc = static_cast<double>(acc);
  for (int r = 1; r < nranks; ++r) {
    const int v = input(r);
    const auto u = static_cast<uint64_t>(v);
    switch (op) {
      case RedOp::kSum:
      case RedOp::kAvg:
        acc += u;
        facc += v;
        break;
      case RedOp::kProd:
        acc *= u;
        facc *= v;
        break;
      case RedOp::kMax:
        acc = std::max(acc, u);
        facc = std::max(facc, static_cast<double>(v));
        break;
      case RedOp::kMin:
        acc = std::min(acc, u);
        facc = std::min(facc, static_cast<double>(v));
        break;
    }
  }
  if (!IsFloat(t)) {
    acc &= WidthMask(t);
    if (op == RedOp::kAvg) {
      const int64_t avg = IsSigned(t) ? SignExtend(t, acc) / nranks
                                      : static_cast<int64_t>(acc / static_cast<uint64_t>(nranks));
      acc = static_cast<uint64_t>(avg) & WidthMask(t);
    }
    ref.bits = acc;
    return ref;
  }
  const double eps = Epsilon(t);
  const double largest = perf_op.mulsum ? 6.0 : 3.0;  // the largest input
  if ((op == RedOp::kSum || op == RedOp::kAvg) && largest * nranks > ExactIntegerLimit(t)) {
    // Partial sums may round beyond the exact range: one rounding per addition.
    ref.tolerance = nranks * eps * facc;
  }
  if (op == RedOp::kAvg) {
    facc /= nranks;
    // One division (loom) or a pre-multiplication by 1/n per input (NCCL):
    // a couple of units in the last place.
    ref.tolerance += 2 * eps * std::max(facc, 1.0);
  }
  ref.value = facc;
  ref.bits = EncodeFloat(t, facc);
  return ref;
}

bool Matches(DataType t, uint64_t got_bits, const Reference& ref) {
  if (got_bits == ref.bits) return true;
  if (!IsFloat(t) || ref.tolerance == 0) return false;
  const double got = DecodeFloat(t, got_bits);
  return std::fabs(got - ref.value) <= ref.tolerance;  // false for NaN
}

}  // namespace

int PatternValue(RedOp op, int rank, size_t index) {
  // A cheap integer hash of (rank, index): neighbouring elements and ranks
  // differ, so a misplaced block or a missing rank shows up as wrong values.
  uint64_t x = static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull +
               static_cast<uint64_t>(rank + 1) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  if (op == RedOp::kProd) return (x & 7) == 0 ? 2 : 1;
  return static_cast<int>(x & 3);
}

void FillPattern(void* buf, DataType type, RedOp op, int rank, size_t first_index, size_t count) {
  const size_t size = SizeOf(type);
  // Only four (or two) distinct values: encode each once.
  uint64_t encoded[4];
  for (int v = 0; v < 4; ++v) encoded[v] = EncodeSmall(type, v);
  for (size_t k = 0; k < count; ++k) {
    StoreBits(buf, size, k, encoded[PatternValue(op, rank, first_index + k)]);
  }
}

size_t CountWrongReduced(const void* buf, DataType type, PerfOp op, int nranks, size_t first_index,
                         size_t count) {
  const size_t size = SizeOf(type);
  size_t wrong = 0;
  for (size_t k = 0; k < count; ++k) {
    const Reference ref = ReduceReference(type, op, nranks, first_index + k);
    if (!Matches(type, LoadBits(buf, size, k), ref)) ++wrong;
  }
  return wrong;
}

size_t CountWrongCopied(const void* buf, DataType type, RedOp op, int rank, size_t first_index,
                        size_t count) {
  const size_t size = SizeOf(type);
  uint64_t encoded[4];
  for (int v = 0; v < 4; ++v) encoded[v] = EncodeSmall(type, v);
  size_t wrong = 0;
  for (size_t k = 0; k < count; ++k) {
    if (LoadBits(buf, size, k) != encoded[PatternValue(op, rank, first_index + k)]) ++wrong;
  }
  return wrong;
}

Expectation ExpectationFor(Collective c, const Geometry& g, int rank, int nranks, int root) {
  using Kind = Expectation::Kind;
  Expectation e;
  switch (c) {
    case Collective::kAllReduce:
      e = {Kind::kReduced, g.recv_count, 0, 0, 0};
      break;
    case Collective::kReduce:
      if (rank == root) e = {Kind::kReduced, g.recv_count, 0, 0, 0};
      break;
    case Collective::kReduceScatter:
      e = {Kind::kReduced, g.recv_count, static_cast<size_t>(rank) * g.recv_count, 0, 0};
      break;
    case Collective::kBroadcast:
      e = {Kind::kCopied, g.recv_count, 0, root, 0};
      break;
    case Collective::kSendRecv:
      e = {Kind::kCopied, g.recv_count, 0, (rank + nranks - 1) % nranks, 0};
      break;
    case Collective::kAllGather:
      e = {Kind::kBlocks, g.recv_count, 0, 0, g.param_count};
      break;
    case Collective::kAllToAll:
      e = {Kind::kBlocks, g.recv_count, static_cast<size_t>(rank) * g.param_count, 0,
           g.param_count};
      break;
    case Collective::kGather:
      if (rank == root) e = {Kind::kBlocks, g.recv_count, 0, 0, g.param_count};
      break;
    case Collective::kScatter:
      e = {Kind::kCopied, g.recv_count, static_cast<size_t>(rank) * g.recv_count, root, 0};
      break;
    case Collective::kHyperCube:
      e = {Kind::kBlocks, g.recv_count, 0, 0, g.param_count};
      break;
  }
  return e;
}

size_t CountWrong(const void* out, DataType type, PerfOp op, int nranks, const Expectation& e) {
  switch (e.kind) {
    case Expectation::Kind::kNone:
      return 0;
    case Expectation::Kind::kReduced:
      return CountWrongReduced(out, type, op, nranks, e.first_index, e.count);
    case Expectation::Kind::kCopied:
      return CountWrongCopied(out, type, op.op, e.source_rank, e.first_index, e.count);
    case Expectation::Kind::kBlocks: {
      if (e.block_count == 0) return 0;
      size_t wrong = 0;
      const auto* bytes = static_cast<const char*>(out);
      for (size_t b = 0; b * e.block_count < e.count; ++b) {
        wrong += CountWrongCopied(bytes + b * e.block_count * SizeOf(type), type, op.op,
                                  static_cast<int>(b), e.first_index, e.block_count);
      }
      return wrong;
    }
  }
  return 0;
}

uint64_t EncodeSmallValue(DataType type, int v) {
  return EncodeSmall(type, v);
}

void CorruptElement(void* buf, DataType type, size_t index) {
  const size_t size = SizeOf(type);
  const uint64_t bits = LoadBits(buf, size, index);
  if (IsFloat(type)) {
    // Far outside any tolerance, and exact in every float type.
    StoreBits(buf, size, index, EncodeFloat(type, DecodeFloat(type, bits) + 64.5));
  } else {
    StoreBits(buf, size, index, (bits + 0x55) & WidthMask(type));
  }
}

}  // namespace loom::perf
