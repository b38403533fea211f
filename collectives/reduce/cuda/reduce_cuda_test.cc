// GPU test (label gpu, skips without a device): the device kernels against
// the CPU kernels for every type x op, on awkward sizes, misaligned and
// in-place buffers, bit for bit; and the kAvg division.
#include "collectives/reduce/cuda/reduce_cuda.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "collectives/reduce/reduce.h"
#include "transports/cuda/cuda_runtime.h"

namespace loom {
namespace {

constexpr DataType kAllTypes[] = {DataType::kInt8,    DataType::kUint8,   DataType::kInt32,
                                  DataType::kUint32,  DataType::kInt64,   DataType::kUint64,
                                  DataType::kFloat16, DataType::kFloat32, DataType::kFloat64,
                                  DataType::kBfloat16};
constexpr RedOp kAllOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg};

class CudaReduceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: reduction kernels not run";
    Result<cuda::Stream> s = cuda::Stream::Create();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    stream_ = std::move(s).value();
  }
  void TearDown() override {
    for (void* p : allocs_) EXPECT_EQ(cudaFree(p), cudaSuccess);
  }

  // Device copy of `bytes` plus `pad` bytes in front (for misalignment).
  char* DeviceCopy(const std::vector<uint8_t>& host, size_t pad) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, host.size() + pad + 16), cudaSuccess);
    allocs_.push_back(p);
    char* at = static_cast<char*>(p) + pad;
    EXPECT_EQ(cudaMemcpy(at, host.data(), host.size(), cudaMemcpyHostToDevice), cudaSuccess);
    return at;
  }
  std::vector<uint8_t> HostCopy(const char* dev, size_t bytes) {
    std::vector<uint8_t> out(bytes);
    EXPECT_TRUE(stream_.Synchronize().ok());
    EXPECT_EQ(cudaMemcpy(out.data(), dev, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

  cuda::Stream stream_;
  std::vector<void*> allocs_;
};

// Random bytes with a sprinkling of special values (NaN, Inf, +-0, subnormals)
// at every element width, so every kernel path meets them.
std::vector<uint8_t> Awkward(size_t n, DataType t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n * SizeOf(t));
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  const size_t es = SizeOf(t);
  for (size_t i = 0; i < n; i += 7) {
    const int kind = static_cast<int>(rng() % 4);
    if (kind == 0) std::memset(&v[i * es], 0, es);       // +0
    if (kind == 1) std::memset(&v[i * es], 0xFF, es);    // NaN, or -1
    if (kind == 2) v[i * es + es - 1] = 0x80;            // a sign bit, often -0 or tiny
    if (kind == 3 && es > 1) v[i * es + es - 1] = 0x7F;  // near Inf / NaN
  }
  return v;
}

std::string Label(DataType t, RedOp op, size_t n) {
  return std::string(Name(t)) + "/" + std::string(Name(op)) + " n=" + std::to_string(n);
}

TEST_F(CudaReduceTest, EveryTypeAndOpMatchesCpuOnAwkwardSizes) {
  for (DataType t : kAllTypes) {
    const size_t es = SizeOf(t);
    for (size_t n :
         {size_t{1}, size_t{2}, size_t{15}, size_t{17}, size_t{4099}, size_t{(1 << 20) + 3}}) {
      const std::vector<uint8_t> a = Awkward(n, t, n * 31 + es);
      const std::vector<uint8_t> b = Awkward(n, t, n * 17 + es + 1);
      const char* da = DeviceCopy(a, 0);
      const char* db = DeviceCopy(b, 0);
      char* dd = DeviceCopy(std::vector<uint8_t>(a.size()), 0);
      for (RedOp op : kAllOps) {
        std::vector<uint8_t> want(a.size());
        ReduceInto(want.data(), a.data(), b.data(), n, t, op);
        ASSERT_TRUE(CudaReduceInto(dd, da, db, n, t, op, stream_.get()).ok());
        ASSERT_EQ(HostCopy(dd, a.size()), want) << Label(t, op, n);
      }
    }
  }
}

TEST_F(CudaReduceTest, MisalignedAndInPlaceBuffers) {
  const size_t n = 1003;
  for (DataType t : kAllTypes) {
    const size_t es = SizeOf(t);
    const std::vector<uint8_t> a = Awkward(n, t, 1);
    const std::vector<uint8_t> b = Awkward(n, t, 2);
    for (RedOp op : {RedOp::kSum, RedOp::kMax}) {
      std::vector<uint8_t> want(a.size());
      ReduceInto(want.data(), a.data(), b.data(), n, t, op);
      // Same misalignment (head + vectors), then different ones (element-wise).
      struct Pads {
        size_t d, a, b;  // in elements, so always element-aligned
      };
      for (Pads p : {Pads{1, 1, 1}, Pads{2, 1, 0}, Pads{1, 2, 3}}) {
        char* dd = DeviceCopy(std::vector<uint8_t>(a.size()), p.d * es);
        ASSERT_TRUE(CudaReduceInto(dd, DeviceCopy(a, p.a * es), DeviceCopy(b, p.b * es), n, t, op,
                                   stream_.get())
                        .ok());
        ASSERT_EQ(HostCopy(dd, a.size()), want)
            << Label(t, op, n) << " pads " << p.d << "," << p.a << "," << p.b;
      }
      char* da = DeviceCopy(a, es);  // dst == a
      ASSERT_TRUE(CudaReduceInto(da, da, DeviceCopy(b, es), n, t, op, stream_.get()).ok());
      ASSERT_EQ(HostCopy(da, a.size()), want) << Label(t, op, n) << " in place (a)";
      char* db = DeviceCopy(b, 0);  // dst == b
      ASSERT_TRUE(CudaReduceInto(db, DeviceCopy(a, 0), db, n, t, op, stream_.get()).ok());
      ASSERT_EQ(HostCopy(db, a.size()), want) << Label(t, op, n) << " in place (b)";
      std::vector<uint8_t> self(a.size());
      ReduceInto(self.data(), a.data(), a.data(), n, t, op);
      char* dself = DeviceCopy(a, 0);  // dst == a == b
      ASSERT_TRUE(CudaReduceInto(dself, dself, dself, n, t, op, stream_.get()).ok());
      ASSERT_EQ(HostCopy(dself, a.size()), self) << Label(t, op, n) << " in place (a == b)";
    }
  }
}

TEST_F(CudaReduceTest, ScaleForAvgMatchesCpu) {
  for (DataType t : kAllTypes) {
    for (size_t n : {size_t{1}, size_t{33}, size_t{100003}}) {
      for (int nranks : {1, 2, 3, 8, 1000}) {
        const std::vector<uint8_t> v = Awkward(n, t, n + static_cast<size_t>(nranks));
        std::vector<uint8_t> want = v;
        ScaleForAvg(want.data(), n, t, nranks);
        char* d = DeviceCopy(v, SizeOf(t));
        ASSERT_TRUE(CudaScaleForAvg(d, n, t, nranks, stream_.get()).ok());
        ASSERT_EQ(HostCopy(d, v.size()), want) << Name(t) << " n=" << n << " nranks=" << nranks;
      }
    }
  }
}

TEST_F(CudaReduceTest, PreMulMatchesCpuWithTheScalarByValueAndOnTheDevice) {
  for (DataType t : kAllTypes) {
    const size_t es = SizeOf(t);
    for (size_t n : {size_t{1}, size_t{33}, size_t{100003}}) {
      const std::vector<uint8_t> v = Awkward(n, t, n * 3);
      const std::vector<uint8_t> sv = Awkward(1, t, n * 3 + 1);
      std::vector<uint8_t> want(v.size());
      PreMulInto(want.data(), v.data(), n, t, sv.data());
      for (bool on_device : {false, true}) {
        const Reduction red = on_device ? Reduction::PreMulSumAt(DeviceCopy(sv, 0), t)
                                        : Reduction::PreMulSum(sv.data(), t);
        // Out of place, dst misaligned against src, then in place.
        const char* src = DeviceCopy(v, es);
        char* dst = DeviceCopy(std::vector<uint8_t>(v.size()), 0);
        ASSERT_TRUE(CudaPreMulInto(dst, src, n, t, red.scalar, stream_.get()).ok());
        ASSERT_EQ(HostCopy(dst, v.size()), want) << Name(t) << " n=" << n << " dev=" << on_device;
        char* buf = DeviceCopy(v, 0);
        ASSERT_TRUE(CudaPreMulInto(buf, buf, n, t, red.scalar, stream_.get()).ok());
        ASSERT_EQ(HostCopy(buf, v.size()), want) << Name(t) << " in place n=" << n;
      }
    }
  }
}

TEST_F(CudaReduceTest, InvalidArgumentsLaunchNothing) {
  const Status bad_type = CudaReduceInto(nullptr, nullptr, nullptr, 4, static_cast<DataType>(42),
                                         RedOp::kSum, stream_.get());
  EXPECT_EQ(bad_type.code(), Code::kInvalidArgument);
  const Status bad_op = CudaReduceInto(nullptr, nullptr, nullptr, 4, DataType::kFloat32,
                                       static_cast<RedOp>(-1), stream_.get());
  EXPECT_EQ(bad_op.code(), Code::kInvalidArgument);
  EXPECT_EQ(CudaScaleForAvg(nullptr, 4, DataType::kFloat32, 0, stream_.get()).code(),
            Code::kInvalidArgument);
  // Nothing to do: no launch, so null pointers are fine.
  EXPECT_TRUE(
      CudaReduceInto(nullptr, nullptr, nullptr, 0, DataType::kInt8, RedOp::kSum, stream_.get())
          .ok());
  EXPECT_TRUE(CudaScaleForAvg(nullptr, 0, DataType::kInt8, 4, stream_.get()).ok());
  EXPECT_TRUE(stream_.Synchronize().ok());
}

}  // namespace
}  // namespace loom
