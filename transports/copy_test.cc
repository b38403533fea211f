// CopyBytes lands exactly memcpy's bytes at every offset and length around
// its vector loop's edges, and touches nothing outside the destination.
#include "transports/copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace loom {
namespace {

TEST(CopyBytes, EveryOffsetAndLengthMatchesMemcpyAndStaysInBounds) {
  const size_t max_len = kVectorCopyMinBytes + 300;
  std::vector<uint8_t> src(max_len + 128), dst(max_len + 256);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + 17);
  for (size_t src_off : {0, 1, 8, 31, 32, 63}) {
    for (size_t dst_off : {0, 1, 8, 15, 16, 33, 64}) {
      for (size_t len = 0; len <= max_len; len += len < 200 ? 1 : 97) {
        for (size_t extra : {size_t{0}, kVectorCopyMinBytes - 1, kVectorCopyMinBytes}) {
          const size_t n = std::min(len + extra, max_len);
          std::fill(dst.begin(), dst.end(), 0xee);
          std::vector<uint8_t> want = dst;
          std::memcpy(want.data() + dst_off, src.data() + src_off, n);
          CopyBytes(dst.data() + dst_off, src.data() + src_off, n);
          ASSERT_EQ(dst, want) << "src+" << src_off << " dst+" << dst_off << " n=" << n;
        }
      }
    }
  }
}

TEST(CopyBytes, LargeCopiesOnBothSidesOfTheVectorRange) {
  for (size_t n : {kVectorCopyMaxBytes - 1 - 32, kVectorCopyMaxBytes - 1, kVectorCopyMaxBytes,
                   size_t{1} << 20}) {
    std::vector<uint32_t> src(n / 4 + 16), dst(n / 4 + 16, 0);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint32_t>(i * 2654435761u);
    auto* d = reinterpret_cast<char*>(dst.data()) + 8;
    const auto* s = reinterpret_cast<const char*>(src.data()) + 4;
    CopyBytes(d, s, n);
    ASSERT_EQ(std::memcmp(d, s, n), 0) << n;
    EXPECT_EQ(dst[0], 0u);
    EXPECT_EQ(reinterpret_cast<const uint8_t*>(d)[n], 0u) << n;
  }
}

// The tests above compare CopyBytes with memcpy whichever path it takes;
// this one makes sure the vector path is on where the CPU has AVX2 (the
// flag read before __builtin_cpu_init would leave it off, commit 7c3cb29).
TEST(CopyBytes, TakesTheVectorLoopWhereTheCpuHasAvx2) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  EXPECT_EQ(VectorCopyAvailable(), __builtin_cpu_supports("avx2") != 0);
#else
  EXPECT_FALSE(VectorCopyAvailable());
#endif
}

}  // namespace
}  // namespace loom
