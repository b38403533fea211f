// The header a CUDA build of PyTorch generates and a CPU-only one does not
// ship; only the compile check of csrc/device_work.cc (a CPU-only PyTorch)
// uses this stand-in.
#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS
