// Ranks-as-threads harness and reference values.
#include "tests/harness.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "collectives/reduce/reduce.h"

namespace loom::testing {

void RunRanks(int n, const std::function<void(Communicator&)>& body, CommConfig config) {
  auto id = UniqueId::Create();
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto comm = Communicator::Create(id.value(), r, n, config);
      ASSERT_TRUE(comm.ok()) << "rank " << r << ": " << comm.status().ToString();
      body(*comm.value());
      // A body that broke or aborted its communicator on purpose skips this.
      if (comm.value()->AsyncError().ok()) {
        Status s = comm.value()->Finalize();
        EXPECT_TRUE(s.ok()) << "rank " << r << " finalize: " << s.ToString();
      }
    });
  }
  for (auto& t : threads) t.join();
}

double GetElem(const void* buf, size_t i, DataType type) {
  switch (type) {
    case DataType::kInt8: return static_cast<const int8_t*>(buf)[i];
    case DataType::kUint8: return static_cast<const uint8_t*>(buf)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(buf)[i];
    case DataType::kUint32: return static_cast<const uint32_t*>(buf)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kUint64: return static_cast<double>(static_cast<const uint64_t*>(buf)[i]);
    case DataType::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBfloat16: return Bf16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
  }
  return 0;
}

void SetElem(void* buf, size_t i, DataType type, double v) {
  const auto w = static_cast<int64_t>(v);  // integers wrap through int64
  switch (type) {
    case DataType::kInt8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(w); break;
    case DataType::kUint8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(w); break;
    case DataType::kInt32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(w); break;
    case DataType::kUint32: static_cast<uint32_t*>(buf)[i] = static_cast<uint32_t>(w); break;
    case DataType::kInt64: static_cast<int64_t*>(buf)[i] = w; break;
    case DataType::kUint64: static_cast<uint64_t*>(buf)[i] = static_cast<uint64_t>(w); break;
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = FloatToHalf(static_cast<float>(v)); break;
    case DataType::kBfloat16: static_cast<uint16_t*>(buf)[i] = FloatToBf16(static_cast<float>(v)); break;
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
  }
}

double InputValue(int rank, size_t i, RedOp op) {
  const size_t h = static_cast<size_t>(rank) * 7 + i * 13;
  if (op == RedOp::kProd) {
    // Magnitudes are powers of two up to 2^8: exact in every type.
    static const double kVals[3] = {-1, 2, 1};
    return kVals[h % 3];
  }
  return static_cast<double>(h % 5) - 2;  // -2..2: sums of 8 ranks stay exact
}

void FillInput(void* buf, size_t count, DataType type, int rank, size_t offset, RedOp op) {
  for (size_t i = 0; i < count; ++i) SetElem(buf, i, type, InputValue(rank, offset + i, op));
}

void ExpectedReduction(void* out, size_t count, DataType type, RedOp op, int n, size_t offset) {
  // InputValue repeats every 15 indices: reduce one period, then tile it.
  constexpr size_t kPeriod = 15;
  const size_t es = SizeOf(type);
  const size_t head = count < kPeriod ? count : kPeriod;
  std::vector<char> tmp(kPeriod * es);
  FillInput(out, head, type, 0, offset, op);
  for (int r = 1; r < n; ++r) {
    FillInput(tmp.data(), head, type, r, offset, op);
    ReduceInto(out, out, tmp.data(), head, type, op);
  }
  if (op == RedOp::kAvg) ScaleForAvg(out, head, type, n);
  char* o = static_cast<char*>(out);
  for (size_t i = head; i < count; ++i) std::memcpy(o + i * es, o + (i - kPeriod) * es, es);
}

size_t CountMismatches(const void* a, const void* b, size_t count, DataType type) {
  const size_t es = SizeOf(type);
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    bad += std::memcmp(static_cast<const char*>(a) + i * es, static_cast<const char*>(b) + i * es,
                       es) != 0;
  }
  return bad;
}

}  // namespace loom::testing
