// Device reduction kernels: one grid-stride kernel per (element kind, op),
// 16-byte vector body with element-wise head and tail, and the launchers
// behind CudaReduceInto / CudaScaleForAvg.
#include <atomic>
#include <string>

#include "collectives/reduce/cuda/reduce_cuda.h"
#include "collectives/reduce/cuda/reduce_ops.h"
#include "transports/cuda/cuda_runtime.h"

namespace loom {
namespace {

using cuda_reduce::ApplyElem;
using cuda_reduce::Bf16;
using cuda_reduce::Half;
using cuda_reduce::ScaleElem;
using cuda_reduce::SplitForVectors;
using cuda_reduce::StorageOf;
using cuda_reduce::VectorSplit;

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;  // 8 x 256 = 2048 threads: a full SM on sm_80/sm_90
constexpr int kMaxDevices = 64;

// 16 bytes of elements, moved with one 128-bit load or store.
template <class S>
struct alignas(16) Pack {
  static constexpr int kElems = 16 / sizeof(S);
  S e[kElems];
};

template <class S>
__device__ __forceinline__ Pack<S> LoadPack(const S* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  Pack<S> out;
  memcpy(&out, &raw, sizeof(out));
  return out;
}

template <class S>
__device__ __forceinline__ void StorePack(S* p, const Pack<S>& v) {
  uint4 raw;
  memcpy(&raw, &v, sizeof(raw));
  *reinterpret_cast<uint4*>(p) = raw;
}

// Elements [0, head) and [head + packs * kElems, count) one at a time; the
// packs in between as 16-byte vectors. Each thread reads an element before
// it writes it and no other thread touches it, so dst == a or dst == b is safe.
template <class E, class Op>
__global__ void __launch_bounds__(kThreads)
    ReduceKernel(typename StorageOf<E>::type* dst, const typename StorageOf<E>::type* a,
                 const typename StorageOf<E>::type* b, size_t head, size_t packs, size_t count) {
  using S = typename StorageOf<E>::type;
  constexpr int kV = Pack<S>::kElems;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  S* vd = dst + head;
  const S* va = a + head;
  const S* vb = b + head;
  for (size_t p = tid; p < packs; p += stride) {
    const Pack<S> x = LoadPack(va + p * kV);
    const Pack<S> y = LoadPack(vb + p * kV);
    Pack<S> r;
#pragma unroll
    for (int j = 0; j < kV; ++j) r.e[j] = ApplyElem<E, Op>(x.e[j], y.e[j]);
    StorePack(vd + p * kV, r);
  }
  const size_t tail = head + packs * kV;
  for (size_t i = tid; i < head; i += stride) dst[i] = ApplyElem<E, Op>(a[i], b[i]);
  for (size_t i = tail + tid; i < count; i += stride) dst[i] = ApplyElem<E, Op>(a[i], b[i]);
}

template <class E>
__global__ void __launch_bounds__(kThreads)
    ScaleKernel(typename StorageOf<E>::type* buf, int nranks, size_t head, size_t packs,
                size_t count) {
  using S = typename StorageOf<E>::type;
  constexpr int kV = Pack<S>::kElems;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  S* vbuf = buf + head;
  for (size_t p = tid; p < packs; p += stride) {
    Pack<S> x = LoadPack(vbuf + p * kV);
#pragma unroll
    for (int j = 0; j < kV; ++j) x.e[j] = ScaleElem<E>(x.e[j], nranks);
    StorePack(vbuf + p * kV, x);
  }
  const size_t tail = head + packs * kV;
  for (size_t i = tid; i < head; i += stride) buf[i] = ScaleElem<E>(buf[i], nranks);
  for (size_t i = tail + tid; i < count; i += stride) buf[i] = ScaleElem<E>(buf[i], nranks);
}

// dst = src * scalar (kProd's element semantics), the scalar taken from
// `at` (device memory, read by every thread) when not null, else `value`.
template <class E>
__global__ void __launch_bounds__(kThreads)
    PreMulKernel(typename StorageOf<E>::type* dst, const typename StorageOf<E>::type* src,
                 typename StorageOf<E>::type value, const typename StorageOf<E>::type* at,
                 size_t head, size_t packs, size_t count) {
  using S = typename StorageOf<E>::type;
  using cuda_reduce::ProdOp;
  constexpr int kV = Pack<S>::kElems;
  const S s = at != nullptr ? *at : value;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  S* vd = dst + head;
  const S* vs = src + head;
  for (size_t p = tid; p < packs; p += stride) {
    const Pack<S> x = LoadPack(vs + p * kV);
    Pack<S> r;
#pragma unroll
    for (int j = 0; j < kV; ++j) r.e[j] = ApplyElem<E, ProdOp>(x.e[j], s);
    StorePack(vd + p * kV, r);
  }
  const size_t tail = head + packs * kV;
  for (size_t i = tid; i < head; i += stride) dst[i] = ApplyElem<E, ProdOp>(src[i], s);
  for (size_t i = tail + tid; i < count; i += stride) dst[i] = ApplyElem<E, ProdOp>(src[i], s);
}

// Blocks for `work` independent units: enough to cover it, at most a full
// device's worth (the kernels stride over the rest).
Result<unsigned> GridFor(size_t work) {
  static std::atomic<int> sm_count[kMaxDevices] = {};
  int dev = 0;
  LOOM_TRY(cuda::CudaStatus(cudaGetDevice(&dev), "cudaGetDevice"));
  int sms = dev < kMaxDevices ? sm_count[dev].load(std::memory_order_relaxed) : 0;
  if (sms == 0) {
    LOOM_TRY(cuda::CudaStatus(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                              "cudaDeviceGetAttribute(MultiProcessorCount)"));
    if (dev < kMaxDevices) sm_count[dev].store(sms, std::memory_order_relaxed);
  }
  const size_t cap = static_cast<size_t>(sms) * kBlocksPerSm;
  const size_t need = (work + kThreads - 1) / kThreads;
  return static_cast<unsigned>(need < cap ? (need == 0 ? 1 : need) : cap);
}

using ReduceLaunch = Status (*)(void*, const void*, const void*, size_t, cudaStream_t);
using ScaleLaunch = Status (*)(void*, size_t, int, cudaStream_t);

template <class E, class Op>
Status LaunchReduce(void* dst, const void* a, const void* b, size_t count, cudaStream_t stream) {
  using S = typename StorageOf<E>::type;
  const void* ptrs[3] = {dst, a, b};
  const VectorSplit split = SplitForVectors(count, sizeof(S), ptrs, 3);
  const size_t rest = count - split.packs * Pack<S>::kElems;
  LOOM_ASSIGN_OR_RETURN(const unsigned blocks, GridFor(split.packs > rest ? split.packs : rest));
  ReduceKernel<E, Op>
      <<<blocks, kThreads, 0, stream>>>(static_cast<S*>(dst), static_cast<const S*>(a),
                                        static_cast<const S*>(b), split.head, split.packs, count);
  return cuda::CudaStatus(cudaGetLastError(), "ReduceKernel launch");
}

template <class E>
Status LaunchScale(void* buf, size_t count, int nranks, cudaStream_t stream) {
  using S = typename StorageOf<E>::type;
  const void* ptrs[1] = {buf};
  const VectorSplit split = SplitForVectors(count, sizeof(S), ptrs, 1);
  const size_t rest = count - split.packs * Pack<S>::kElems;
  LOOM_ASSIGN_OR_RETURN(const unsigned blocks, GridFor(split.packs > rest ? split.packs : rest));
  ScaleKernel<E><<<blocks, kThreads, 0, stream>>>(static_cast<S*>(buf), nranks, split.head,
                                                  split.packs, count);
  return cuda::CudaStatus(cudaGetLastError(), "ScaleKernel launch");
}

using PreMulLaunch = Status (*)(void*, const void*, size_t, const void*, const void*, cudaStream_t);

template <class E>
Status LaunchPreMul(void* dst, const void* src, size_t count, const void* value, const void* at,
                    cudaStream_t stream) {
  using S = typename StorageOf<E>::type;
  const void* ptrs[2] = {dst, src};
  const VectorSplit split = SplitForVectors(count, sizeof(S), ptrs, 2);
  const size_t rest = count - split.packs * Pack<S>::kElems;
  LOOM_ASSIGN_OR_RETURN(const unsigned blocks, GridFor(split.packs > rest ? split.packs : rest));
  S v{};
  if (at == nullptr) memcpy(&v, value, sizeof v);
  PreMulKernel<E><<<blocks, kThreads, 0, stream>>>(static_cast<S*>(dst), static_cast<const S*>(src),
                                                   v, static_cast<const S*>(at), split.head,
                                                   split.packs, count);
  return cuda::CudaStatus(cudaGetLastError(), "PreMulKernel launch");
}

struct LaunchTable {
  ReduceLaunch reduce[kNumDataTypes][kNumRedOps];
  ScaleLaunch scale[kNumDataTypes];
  PreMulLaunch premul[kNumDataTypes];
};

template <class E>
void Fill(LaunchTable& t, DataType type) {
  const int i = static_cast<int>(type);
  t.reduce[i][static_cast<int>(RedOp::kSum)] = &LaunchReduce<E, cuda_reduce::SumOp>;
  t.reduce[i][static_cast<int>(RedOp::kProd)] = &LaunchReduce<E, cuda_reduce::ProdOp>;
  t.reduce[i][static_cast<int>(RedOp::kMax)] = &LaunchReduce<E, cuda_reduce::MaxOp>;
  t.reduce[i][static_cast<int>(RedOp::kMin)] = &LaunchReduce<E, cuda_reduce::MinOp>;
  t.reduce[i][static_cast<int>(RedOp::kAvg)] = &LaunchReduce<E, cuda_reduce::SumOp>;
  t.scale[i] = &LaunchScale<E>;
  t.premul[i] = &LaunchPreMul<E>;
}

const LaunchTable& Table() {
  static const LaunchTable table = [] {
    LaunchTable t{};
    Fill<int8_t>(t, DataType::kInt8);
    Fill<uint8_t>(t, DataType::kUint8);
    Fill<int32_t>(t, DataType::kInt32);
    Fill<uint32_t>(t, DataType::kUint32);
    Fill<int64_t>(t, DataType::kInt64);
    Fill<uint64_t>(t, DataType::kUint64);
    Fill<Half>(t, DataType::kFloat16);
    Fill<float>(t, DataType::kFloat32);
    Fill<double>(t, DataType::kFloat64);
    Fill<Bf16>(t, DataType::kBfloat16);
    return t;
  }();
  return table;
}

}  // namespace

Status CudaReduceInto(void* dst, const void* a, const void* b, size_t count, DataType type,
                      RedOp op, cudaStream_t stream) {
  if (!IsValid(type) || !IsValid(op)) {
    return InvalidArgument("CudaReduceInto: invalid datatype " +
                           std::to_string(static_cast<int>(type)) + " or op " +
                           std::to_string(static_cast<int>(op)));
  }
  if (count == 0) return Status::Ok();
  return Table().reduce[static_cast<int>(type)][static_cast<int>(op)](dst, a, b, count, stream);
}

Status CudaScaleForAvg(void* buf, size_t count, DataType type, int nranks, cudaStream_t stream) {
  if (!IsValid(type) || nranks < 1) {
    return InvalidArgument("CudaScaleForAvg: invalid datatype " +
                           std::to_string(static_cast<int>(type)) + " or nranks " +
                           std::to_string(nranks));
  }
  if (count == 0 || nranks == 1) return Status::Ok();
  return Table().scale[static_cast<int>(type)](buf, count, nranks, stream);
}

Status CudaPreMulInto(void* dst, const void* src, size_t count, DataType type,
                      const PreMulScalar& scalar, cudaStream_t stream) {
  if (!IsValid(type) || scalar.type != type) {
    return InvalidArgument("CudaPreMulInto: invalid datatype " +
                           std::to_string(static_cast<int>(type)) + " or a scalar of another type");
  }
  if (count == 0) return Status::Ok();
  const bool at = scalar.where == PreMulScalar::Where::kPointer;
  if (at && scalar.pointer == nullptr)
    return InvalidArgument("CudaPreMulInto: null scalar pointer");
  return Table().premul[static_cast<int>(type)](dst, src, count, scalar.value,
                                                at ? scalar.pointer : nullptr, stream);
}

}  // namespace loom
