// CudaDeviceOps: the DeviceOps interface (transports/cuda/device_ops.h) on
// the CUDA runtime. It launches the reduction kernels, so it lives with them,
// above the transports that only see the interface.
#pragma once

#include "transports/cuda/device_ops.h"

namespace loom::cuda {

// A process-wide instance. Only meaningful when DeviceCount() > 0.
DeviceOps& CudaDeviceOps();

}  // namespace loom::cuda
