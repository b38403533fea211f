// StreamingReduce (transports/streaming.h) over the real kernels: the bytes
// of the plain reduction, across bounce blocks, and nothing outside dst.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "collectives/reduce/reduce.h"
#include "transports/streaming.h"

namespace loom {
namespace {

std::vector<unsigned char> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

TEST(StreamingReduce, BitIdenticalToThePlainKernelAcrossBlocks) {
  // Larger than the 16 KiB bounce block, an odd count, and dst == a.
  for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16,
                        DataType::kInt64, DataType::kUint8, DataType::kFloat64}) {
    const size_t es = SizeOf(type);
    const size_t count = (40 << 10) / es + 7;
    const auto a = RandomBytes(count * es, 2);
    const auto b = RandomBytes(count * es, 3);
    std::vector<unsigned char> want(count * es), got(count * es + 1, 0xEE);
    ReduceInto(want.data(), a.data(), b.data(), count, type, RedOp::kSum);
    StreamingReduce(ReduceInto, got.data() + 1, a.data(), b.data(), count, type, RedOp::kSum);
    ASSERT_EQ(0, std::memcmp(want.data(), got.data() + 1, want.size())) << Name(type);
    ASSERT_EQ(0xEE, got[0]);

    std::vector<unsigned char> in_place = a;
    StreamingReduce(ReduceInto, in_place.data(), in_place.data(), b.data(), count, type,
                    RedOp::kMax);
    ReduceInto(want.data(), a.data(), b.data(), count, type, RedOp::kMax);
    ASSERT_EQ(0, std::memcmp(want.data(), in_place.data(), want.size())) << Name(type);
  }
}

}  // namespace
}  // namespace loom
