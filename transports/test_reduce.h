// A Transfer::ReduceFn for the transport tests: element-wise sum of float32
// or int32, the types they reduce on receive. The real kernels live in
// collectives/reduce, a layer above the transports (which take them as a
// function pointer); any other type or operator fails the test loudly.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "loom/types.hpp"

namespace loom::testing {

inline void SumInto(void* dst, const void* a, const void* b, size_t count, DataType type,
                    RedOp op) {
  ASSERT_EQ(op, RedOp::kSum) << "the transport tests reduce by sum only";
  auto sum = [&](auto zero) {
    using T = decltype(zero);
    for (size_t i = 0; i < count; ++i) {
      T x, y;
      std::memcpy(&x, static_cast<const char*>(a) + i * sizeof(T), sizeof(T));
      std::memcpy(&y, static_cast<const char*>(b) + i * sizeof(T), sizeof(T));
      const T z = static_cast<T>(x + y);
      std::memcpy(static_cast<char*>(dst) + i * sizeof(T), &z, sizeof(T));
    }
  };
  if (type == DataType::kFloat32) {
    sum(float{});
  } else if (type == DataType::kInt32) {
    sum(int32_t{});
  } else {
    FAIL() << "the transport tests reduce float32 and int32 only";
  }
}

}  // namespace loom::testing
