// StreamingCopy: every alignment and length lands exactly the bytes of
// memcpy, and nothing outside dst (StreamingReduce, which needs the
// reduction kernels, is tested in collectives/reduce).
#include "transports/streaming.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>


namespace loom {
namespace {

std::vector<unsigned char> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

TEST(StreamingCopy, EveryAlignmentAndLengthMatchesMemcpy) {
  const auto src = RandomBytes(4096 + 64, 1);
  for (size_t dst_off = 0; dst_off < 17; ++dst_off) {
    for (size_t src_off = 0; src_off < 3; ++src_off) {
      for (size_t len : {0u, 1u, 15u, 16u, 17u, 63u, 64u, 65u, 127u, 1000u, 4096u}) {
        std::vector<unsigned char> dst(len + 64, 0xEE);
        StreamingCopy(dst.data() + dst_off, src.data() + src_off, len);
        ASSERT_EQ(0, std::memcmp(dst.data() + dst_off, src.data() + src_off, len))
            << "dst_off " << dst_off << " src_off " << src_off << " len " << len;
        for (size_t i = 0; i < dst.size(); ++i) {
          if (i < dst_off || i >= dst_off + len) {
            ASSERT_EQ(0xEE, dst[i]) << "wrote outside at " << i;
          }
        }
      }
    }
  }
}

TEST(StreamingMinBytes, IsAtLeastOneMebibyte) {
  EXPECT_GE(StreamingMinBytes(), size_t{1} << 20);
}

TEST(StreamingMinBytes, IsAQuarterOfTheLastLevelCache) {
  const size_t llc = LastLevelCacheBytes();
  if (llc == 0) GTEST_SKIP() << "no cache size in sysfs or sysconf";
  EXPECT_EQ(StreamingMinBytes(), std::max<size_t>(llc / 4, size_t{1} << 20));
}

TEST(ParseCacheSize, ReadsSysfsSizes) {
  EXPECT_EQ(ParseCacheSize("32768K\n"), size_t{32} << 20);
  EXPECT_EQ(ParseCacheSize("2M"), size_t{2} << 20);
  EXPECT_EQ(ParseCacheSize("1G\n"), size_t{1} << 30);
  EXPECT_EQ(ParseCacheSize("512"), size_t{512});
  for (const char* bad : {"", "K", "-1K", "32768KB", "12 K", "0x100", "99999999999999999999K"}) {
    EXPECT_EQ(ParseCacheSize(bad), size_t{0}) << bad;
  }
}

TEST(StreamsInto, OnlyLargeFinalDestinationsNotReadAsAnInput) {
  std::vector<char> a(16), b(16);
  Transfer t;
  t.dir = Transfer::Dir::kRecv;
  t.dst = a.data();
  t.bytes = StreamingMinBytes();
  EXPECT_FALSE(StreamsInto(t)) << "not marked final";
  t.nontemporal = true;
  EXPECT_TRUE(StreamsInto(t));
  t.reduce_with = b.data();
  EXPECT_TRUE(StreamsInto(t)) << "out-of-place reduction";
  t.reduce_with = a.data();
  EXPECT_FALSE(StreamsInto(t)) << "in place: dst was just read as the other input";
  t.reduce_with = nullptr;
  t.bytes = StreamingMinBytes() - 1;
  EXPECT_FALSE(StreamsInto(t)) << "below the threshold";
}

}  // namespace
}  // namespace loom
