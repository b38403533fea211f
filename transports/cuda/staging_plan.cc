// Staging pipeline plans: chunking and the slot-reuse dependencies.
#include "transports/cuda/staging_plan.h"

#include <algorithm>

namespace loom::cuda {

const char* StagingStepKindName(StagingStep::Kind kind) {
  switch (kind) {
    case StagingStep::Kind::kDeviceToHost:
      return "D2H";
    case StagingStep::Kind::kNetSend:
      return "Send";
    case StagingStep::Kind::kNetRecv:
      return "Recv";
    case StagingStep::Kind::kHostToDevice:
      return "H2D";
  }
  return "?";
}

Result<StagingPlan> PlanStaging(StagingDir dir, size_t bytes, size_t chunk_bytes, int depth,
                                size_t align) {
  if (chunk_bytes == 0 || depth < 1 || align == 0 || chunk_bytes % align != 0) {
    return InvalidArgument("staging plan: chunk size " + std::to_string(chunk_bytes) +
                           " must be a positive multiple of the element size " +
                           std::to_string(align) + ", and depth (" + std::to_string(depth) +
                           ") at least 1");
  }
  StagingPlan plan;
  plan.chunk_bytes = chunk_bytes;
  if (bytes == 0) return plan;
  const size_t chunks = (bytes + chunk_bytes - 1) / chunk_bytes;
  plan.depth = static_cast<int>(std::min<size_t>(static_cast<size_t>(depth), chunks));
  plan.pinned_bytes = static_cast<size_t>(plan.depth) * chunk_bytes;
  plan.steps.reserve(2 * chunks);

  // The first step of each chunk fills its slot; the second drains it.
  const bool send = dir == StagingDir::kDeviceToNet;
  const auto fill = send ? StagingStep::Kind::kDeviceToHost : StagingStep::Kind::kNetRecv;
  const auto drain = send ? StagingStep::Kind::kNetSend : StagingStep::Kind::kHostToDevice;
  std::vector<int64_t> fill_at(chunks, -1), drain_at(chunks, -1);
  auto emit = [&](StagingStep::Kind kind, size_t c, int64_t after) {
    const size_t off = c * chunk_bytes;
    plan.steps.push_back(StagingStep{kind, c, off, std::min(chunk_bytes, bytes - off),
                                     static_cast<int>(c % static_cast<size_t>(plan.depth)), after});
    return static_cast<int64_t>(plan.steps.size() - 1);
  };

  // Fills run up to depth chunks ahead of drains. A fill of chunk c reuses
  // the slot of chunk c - depth, whose drain was emitted before (c < i + depth
  // when it is emitted, so c - depth < i), so `after` always points backwards.
  size_t next_fill = 0;
  for (size_t i = 0; i < chunks; ++i) {
    while (next_fill < chunks && next_fill < i + static_cast<size_t>(plan.depth)) {
      const size_t c = next_fill++;
      const int64_t after =
          c >= static_cast<size_t>(plan.depth) ? drain_at[c - static_cast<size_t>(plan.depth)] : -1;
      fill_at[c] = emit(fill, c, after);
    }
    drain_at[i] = emit(drain, i, fill_at[i]);
  }
  return plan;
}

std::string Describe(const StagingPlan& plan) {
  std::string out;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const StagingStep& s = plan.steps[i];
    out += std::to_string(i) + " " + StagingStepKindName(s.kind) + " chunk " +
           std::to_string(s.chunk) + " [" + std::to_string(s.offset) + ", " +
           std::to_string(s.offset + s.bytes) + ") slot " + std::to_string(s.slot) + " after " +
           (s.after < 0 ? std::string("-") : std::to_string(s.after)) + "\n";
  }
  return out;
}

}  // namespace loom::cuda
