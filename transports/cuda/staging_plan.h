// Pinned-host staging for device buffers on transports that cannot read GPU
// memory (TCP, shared memory without IPC, verbs without GPUDirect): the
// pipeline of chunk copies and network steps through a ring of `depth`
// pinned slots. Pure: the plan is data, executed by the CUDA transport and
// tested here without a GPU.
//
// Send (device -> network), chunk i uses slot i % depth:
//   D2H(i) : device[off, off+len) -> slot      waits for Send(i - depth) (slot free)
//   Send(i): slot -> network                   waits for D2H(i)
// Receive (network -> device):
//   Recv(i): network -> slot                   waits for H2D(i - depth) (slot free)
//   H2D(i) : slot -> device[off, off+len)      waits for Recv(i)
// (a receive that reduces runs the reduction kernel from the mapped slot in
// place of H2D, with the same dependencies).
//
// Steps are listed in issue order: the copy engine runs up to `depth` chunks
// ahead of the network, so copy of chunk i+1.. overlaps the network on chunk i.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace loom::cuda {

enum class StagingDir { kDeviceToNet, kNetToDevice };

struct StagingStep {
  enum class Kind : uint8_t { kDeviceToHost, kNetSend, kNetRecv, kHostToDevice };
  Kind kind;
  size_t chunk;   // chunk index, 0-based
  size_t offset;  // byte offset of the chunk in the device buffer
  size_t bytes;   // chunk length (the last chunk may be shorter)
  int slot;       // pinned slot index in [0, depth)
  int64_t after;  // index in the plan of the step this one waits for; -1 = none
};
const char* StagingStepKindName(StagingStep::Kind kind);

struct StagingPlan {
  size_t chunk_bytes = 0;
  int depth = 0;            // slots actually used: min(requested depth, chunks)
  size_t pinned_bytes = 0;  // depth * chunk_bytes: the pinned buffer to allocate
  std::vector<StagingStep> steps;
};

// Builds the plan for moving `bytes` through chunks of `chunk_bytes` with
// `depth` slots. `align` (the element size, or 1) must divide chunk_bytes so
// that a reduction never splits an element across chunks.
// Errors (kInvalidArgument): chunk_bytes == 0, depth < 1, align == 0, or
// chunk_bytes not a multiple of align. bytes == 0 is an empty plan.
// Pure and thread-safe.
Result<StagingPlan> PlanStaging(StagingDir dir, size_t bytes, size_t chunk_bytes, int depth,
                                size_t align = 1);

// One line per step ("0 D2H chunk 0 [0, 4096) slot 0 after -"), for logs
// (TRACE, NET) and test failure messages.
std::string Describe(const StagingPlan& plan);

}  // namespace loom::cuda
