// AdamW with bias correction (Loshchilov & Hutter), decoupled weight decay.
#include "trainer/adamw.h"

#include <cmath>

namespace loom::train {

void AdamWUpdate(const AdamWConfig& cfg, int step, float* params, const float* grads, float* m,
                 float* v, const uint8_t* decay, size_t n) {
  const float c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(cfg.beta1), step));
  const float c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(cfg.beta2), step));
  for (size_t i = 0; i < n; ++i) {
    const float g = grads[i];
    m[i] = cfg.beta1 * m[i] + (1.0f - cfg.beta1) * g;
    v[i] = cfg.beta2 * v[i] + (1.0f - cfg.beta2) * g * g;
    const float mhat = m[i] / c1;
    const float vhat = v[i] / c2;
    const float wd = decay[i] != 0 ? cfg.weight_decay * params[i] : 0.0f;
    params[i] -= cfg.lr * (mhat / (std::sqrt(vhat) + cfg.eps) + wd);
  }
}

}  // namespace loom::train
