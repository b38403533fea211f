// Throughput of the device reduction kernels against the device's own
// device-to-device copy (the practical memory-bandwidth ceiling): one
// markdown table row per (type, op) with GB/s and % of the copy.
//
//   reduce_cuda_bench [--bytes N] [--iters N] [--quick]
// Bytes are per buffer (default 256 MiB). A reduction moves 3x (read a and
// b, write dst) and a copy 2x (read, write): both rates count every byte
// read and written, so "% of copy" compares like with like.
// Exits 77 with a message when there is no device (ctest: skipped).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/reduce/cuda/reduce_cuda.h"
#include "transports/cuda/cuda_runtime.h"

namespace loom {
namespace {

constexpr int kSkip = 77;

struct Options {
  size_t bytes = size_t{256} << 20;
  int iters = 20;
};

// Runs `body` iters times between two timing events after 3 warm-ups and
// returns the mean milliseconds per call.
template <class F>
Result<double> TimeMs(cudaStream_t s, int iters, F&& body) {
  for (int i = 0; i < 3; ++i) LOOM_TRY(body());
  LOOM_ASSIGN_OR_RETURN(cuda::Event start, cuda::Event::Create(true));
  LOOM_ASSIGN_OR_RETURN(cuda::Event stop, cuda::Event::Create(true));
  LOOM_TRY(start.Record(s));
  for (int i = 0; i < iters; ++i) LOOM_TRY(body());
  LOOM_TRY(stop.Record(s));
  LOOM_TRY(stop.Synchronize());
  LOOM_ASSIGN_OR_RETURN(float ms, start.ElapsedMsUntil(stop));
  return static_cast<double>(ms) / iters;
}

Status Run(const Options& opt) {
  cudaDeviceProp prop{};
  int dev = 0;
  LOOM_CUDA_TRY(cudaGetDevice(&dev));
  LOOM_CUDA_TRY(cudaGetDeviceProperties(&prop, dev));
  std::printf("device %d: %s, %d SMs, %.1f GiB; %zu MiB per buffer, %d iterations\n\n", dev,
              prop.name, prop.multiProcessorCount,
              static_cast<double>(prop.totalGlobalMem) / (1 << 30), opt.bytes >> 20, opt.iters);

  LOOM_ASSIGN_OR_RETURN(cuda::Stream stream, cuda::Stream::Create());
  const cudaStream_t s = stream.get();
  void* buf[3] = {};
  for (void*& p : buf) {
    LOOM_CUDA_TRY(cudaMalloc(&p, opt.bytes));
    // 0x3C in every byte is a normal, finite, positive value in every type
    // (fp16 1.06, bf16 and fp32 0.0115): no subnormal or NaN paths timed.
    LOOM_CUDA_TRY(cudaMemsetAsync(p, 0x3C, opt.bytes, s));
  }

  LOOM_ASSIGN_OR_RETURN(const double copy_ms, TimeMs(s, opt.iters, [&] {
                          return cuda::CudaStatus(cudaMemcpyAsync(buf[2], buf[0], opt.bytes,
                                                                  cudaMemcpyDeviceToDevice, s),
                                                  "cudaMemcpyAsync(D2D)");
                        }));
  const double copy_gbs = 2.0 * static_cast<double>(opt.bytes) / (copy_ms * 1e6);
  std::printf("| kernel | type | op | us/call | GB/s (r+w) | %% of D2D copy |\n");
  std::printf("|---|---|---|---:|---:|---:|\n");
  std::printf("| memcpy D2D | - | - | %.1f | %.0f | 100 |\n", copy_ms * 1e3, copy_gbs);

  struct Case {
    DataType type;
    RedOp op;
  };
  const Case cases[] = {
      {DataType::kFloat32, RedOp::kSum},  {DataType::kFloat32, RedOp::kMax},
      {DataType::kBfloat16, RedOp::kSum}, {DataType::kFloat16, RedOp::kSum},
      {DataType::kFloat64, RedOp::kSum},  {DataType::kInt32, RedOp::kSum},
      {DataType::kInt8, RedOp::kSum},     {DataType::kUint64, RedOp::kProd},
      {DataType::kBfloat16, RedOp::kMin},
  };
  for (const Case& c : cases) {
    const size_t count = opt.bytes / SizeOf(c.type);
    LOOM_ASSIGN_OR_RETURN(const double ms, TimeMs(s, opt.iters, [&] {
                            return CudaReduceInto(buf[2], buf[0], buf[1], count, c.type, c.op, s);
                          }));
    const double gbs = 3.0 * static_cast<double>(opt.bytes) / (ms * 1e6);
    std::printf("| reduce | %s | %s | %.1f | %.0f | %.0f |\n", std::string(Name(c.type)).c_str(),
                std::string(Name(c.op)).c_str(), ms * 1e3, gbs, 100.0 * gbs / copy_gbs);
  }
  for (DataType t : {DataType::kFloat32, DataType::kBfloat16}) {
    const size_t count = opt.bytes / SizeOf(t);
    LOOM_ASSIGN_OR_RETURN(const double ms, TimeMs(s, opt.iters, [&] {
                            return CudaScaleForAvg(buf[2], count, t, 3, s);
                          }));
    const double gbs = 2.0 * static_cast<double>(opt.bytes) / (ms * 1e6);
    std::printf("| scale (avg) | %s | /3 | %.1f | %.0f | %.0f |\n", std::string(Name(t)).c_str(),
                ms * 1e3, gbs, 100.0 * gbs / copy_gbs);
  }
  // A PreMulSum's scaling (dst = src * scalar), the scalar read by the
  // kernel from device memory (the ncclScalarDevice case).
  for (DataType t : {DataType::kFloat32, DataType::kBfloat16}) {
    const size_t count = opt.bytes / SizeOf(t);
    const Reduction red = Reduction::PreMulSumAt(buf[1], t);  // bytes 0x3C..: a finite scalar
    LOOM_ASSIGN_OR_RETURN(const double ms, TimeMs(s, opt.iters, [&] {
                            return CudaPreMulInto(buf[2], buf[0], count, t, red.scalar, s);
                          }));
    const double gbs = 2.0 * static_cast<double>(opt.bytes) / (ms * 1e6);
    std::printf("| premul | %s | *s | %.1f | %.0f | %.0f |\n", std::string(Name(t)).c_str(),
                ms * 1e3, gbs, 100.0 * gbs / copy_gbs);
  }
  LOOM_TRY(stream.Synchronize());
  for (void* p : buf) LOOM_CUDA_TRY(cudaFree(p));
  return Status::Ok();
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  loom::Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--bytes" && i + 1 < argc) {
      opt.bytes = std::strtoull(argv[++i], nullptr, 0);
    } else if (arg == "--iters" && i + 1 < argc) {
      opt.iters = std::atoi(argv[++i]);
    } else if (arg == "--quick") {
      opt.bytes = size_t{4} << 20;
      opt.iters = 3;
    } else {
      std::fprintf(stderr, "usage: %s [--bytes N] [--iters N] [--quick]\n", argv[0]);
      return 2;
    }
  }
  if (opt.bytes < 16 || opt.iters < 1) {
    std::fprintf(stderr, "reduce_cuda_bench: --bytes must be >= 16 and --iters >= 1\n");
    return 2;
  }
  if (loom::cuda::DeviceCount() == 0) {
    std::printf("SKIP: no CUDA device; reduce_cuda_bench needs a GPU\n");
    return loom::kSkip;
  }
  const loom::Status st = loom::Run(opt);
  if (!st.ok()) {
    std::fprintf(stderr, "reduce_cuda_bench: %s\n", st.ToString().c_str());
    return 1;
  }
  return 0;
}
