// AdamW, elementwise, so a ZeRO shard updates exactly like the same
// elements of the full buffer.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::train {

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

// One step (step >= 1) on n elements: m and v are the moment buffers of the
// same elements; decay[i] != 0 applies weight decay to element i.
void AdamWUpdate(const AdamWConfig& cfg, int step, float* params, const float* grads, float* m,
                 float* v, const uint8_t* decay, size_t n);

}  // namespace loom::train
