// Throughput of loom::ReduceInto (dst = a + b) per type and size, single
// thread; bytes/second counts the bytes of dst, like the "c = a + b" anchor
// in shared/anchors/RESULTS.md. BM_Copy sets memcpy against loom::CopyBytes
// with destination minus source, mod 4096, 0 or 8 (transports/copy.h: rep
// movsb's cliff).
//
//   reduce_bench [--benchmark_filter=float] [--isa=portable|avx2|avx512]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "collectives/reduce/reduce.h"
#include "transports/copy.h"

namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, FreeDeleter>;

// 64-byte aligned and written once, so neither page faults nor split
// cache lines show up in the timing.
Buffer MakeTouched(size_t bytes, int fill) {
  Buffer b(static_cast<char*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
  if (!b) std::abort();
  std::memset(b.get(), fill, bytes);
  return b;
}

void BM_ReduceSum(benchmark::State& state, loom::DataType type) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / loom::SizeOf(type);
  // 0x01 bytes: finite, non-NaN values in every type, so no special path.
  Buffer a = MakeTouched(bytes, 0x01);
  Buffer b = MakeTouched(bytes, 0x01);
  Buffer dst = MakeTouched(bytes, 0);
  for (auto _ : state) {
    loom::ReduceInto(dst.get(), a.get(), b.get(), count, type, loom::RedOp::kSum);
    benchmark::DoNotOptimize(dst.get());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void SizeArgs(benchmark::internal::Benchmark* b) {
  for (int64_t bytes :
       {int64_t{4} << 10, int64_t{256} << 10, int64_t{16} << 20, int64_t{256} << 20})
    b->Arg(bytes);
}

BENCHMARK_CAPTURE(BM_ReduceSum, float, loom::DataType::kFloat32)->Apply(SizeArgs);
BENCHMARK_CAPTURE(BM_ReduceSum, double, loom::DataType::kFloat64)->Apply(SizeArgs);
BENCHMARK_CAPTURE(BM_ReduceSum, half, loom::DataType::kFloat16)->Apply(SizeArgs);
BENCHMARK_CAPTURE(BM_ReduceSum, bfloat16, loom::DataType::kBfloat16)->Apply(SizeArgs);
BENCHMARK_CAPTURE(BM_ReduceSum, int32, loom::DataType::kInt32)->Apply(SizeArgs);

using CopyFn = void (*)(void*, const void*, size_t);
void Memcpy(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
}

void BM_Copy(benchmark::State& state, CopyFn copy, size_t skew) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  // One allocation, so that the distance between the two is known.
  const size_t gap = (bytes + 4095) / 4096 * 4096 + 4096;
  Buffer both = MakeTouched(gap + bytes + 64, 0x01);
  const char* src = both.get();
  char* dst = both.get() + gap + skew;
  for (auto _ : state) {
    copy(dst, src, bytes);
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void CopySizeArgs(benchmark::internal::Benchmark* b) {
  for (int64_t bytes : {int64_t{4} << 10, int64_t{64} << 10, int64_t{256} << 10, int64_t{16} << 20})
    b->Arg(bytes);
}

BENCHMARK_CAPTURE(BM_Copy, memcpy_skew0, Memcpy, 0)->Apply(CopySizeArgs);
BENCHMARK_CAPTURE(BM_Copy, memcpy_skew8, Memcpy, 8)->Apply(CopySizeArgs);
BENCHMARK_CAPTURE(BM_Copy, CopyBytes_skew0, loom::CopyBytes, 0)->Apply(CopySizeArgs);
BENCHMARK_CAPTURE(BM_Copy, CopyBytes_skew8, loom::CopyBytes, 8)->Apply(CopySizeArgs);

}  // namespace

int main(int argc, char** argv) {
  // Our own flag first, so benchmark::Initialize does not reject it.
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.substr(0, 6) != "--isa=") continue;
    const std::string_view name = arg.substr(6);
    loom::ReduceIsa isa = loom::ReduceIsa::kPortable;
    if (name == "avx2") {
      isa = loom::ReduceIsa::kAvx2;
    } else if (name == "avx512") {
      isa = loom::ReduceIsa::kAvx512;
    } else if (name != "portable") {
      std::fprintf(stderr, "unknown --isa=%.*s (portable, avx2, avx512)\n",
                   static_cast<int>(name.size()), name.data());
      return 2;
    }
    if (!loom::ForceReduceIsa(isa)) {
      std::fprintf(stderr, "this CPU cannot run --isa=%.*s\n", static_cast<int>(name.size()),
                   name.data());
      return 2;
    }
    for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
    --argc;
    --i;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("reduce_isa",
                              std::to_string(static_cast<int>(loom::ActiveReduceIsa())));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
