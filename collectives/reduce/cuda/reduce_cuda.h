// Device reduction kernels: dst = a op b on device (or mapped) memory for
// every DataType x RedOp, and the kAvg division, launched on a stream.
// Bit-identical to the CPU kernels of collectives/reduce/reduce.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "base/status.h"
#include "loom/types.hpp"

namespace loom {

// Enqueues dst[i] = a[i] op b[i], i in [0, count), on `stream` and returns
// without waiting (stream order, like every CUDA launch).
//
// Contract:
//  - dst, a and b are device-accessible from the current device (device,
//    managed, mapped pinned, or a peer's IPC-mapped memory) and stay valid
//    until the work completes on `stream`. dst may equal a or b (or both);
//    any other overlap of dst with an input is undefined.
//  - Same element semantics as ReduceInto (reduce.h): integer wrap, one
//    IEEE rounding per float op without FMA, fp16/bf16 through fp32,
//    canonical NaN, max/min propagating NaN with max(+0,-0)=+0. kAvg
//    reduces as kSum; CudaScaleForAvg divides at the end.
//  - 16-byte vector loads and stores whenever dst, a and b share the same
//    offset modulo 16 (after an element-wise head); otherwise element-wise.
//  - Errors: an invalid type or op is kInvalidArgument (nothing launched);
//    a launch failure is kUnhandledCudaError naming the kernel. Faults of
//    the kernel itself surface later, at the stream's next synchronisation.
//  - count == 0 launches nothing and returns OK.
//  - Thread-safe; never blocks the host.
Status CudaReduceInto(void* dst, const void* a, const void* b, size_t count, DataType type,
                      RedOp op, cudaStream_t stream);

// Enqueues the final step of kAvg, buf[i] /= nranks in place, with
// ScaleForAvg's semantics (floats: one correctly rounded division; integers:
// truncation toward zero). nranks must be >= 1 (kInvalidArgument otherwise);
// 1 launches nothing. Same stream, error and threading contract as above.
Status CudaScaleForAvg(void* buf, size_t count, DataType type, int nranks, cudaStream_t stream);

// Enqueues a PreMulSum's scaling, dst[i] = src[i] * scalar with PreMulInto's
// semantics (reduce.h). A kPointer scalar is device memory (or memory the
// device can read), read by the kernel when it runs, in stream order; a
// kValue scalar is passed by value. dst may equal src. scalar.type must be
// `type` (kInvalidArgument otherwise). Same stream, error and threading
// contract as above.
Status CudaPreMulInto(void* dst, const void* src, size_t count, DataType type,
                      const PreMulScalar& scalar, cudaStream_t stream);

}  // namespace loom
