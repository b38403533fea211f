// Counter-based random numbers: every value is a pure function of (seed,
// counters), so weights and data do not depend on layout or call order.
#pragma once

#include <cmath>
#include <cstdint>

namespace loom::train {

// splitmix64's finaliser: a bijective mix of 64 bits.
constexpr uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Hash of a seed and up to three counters (tensor, element, draw...).
constexpr uint64_t CounterHash(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  return Mix64(Mix64(Mix64(Mix64(seed) ^ a) ^ b) ^ c);
}

// Uniform in [0, 1) with 53 random bits.
inline double UniformAt(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  return static_cast<double>(CounterHash(seed, a, b, c) >> 11) * 0x1.0p-53;
}

// Standard normal (Box-Muller on two counter draws).
inline double NormalAt(uint64_t seed, uint64_t a, uint64_t b) {
  const double u1 = 1.0 - UniformAt(seed, a, b, 0);  // (0, 1]: log is finite
  const double u2 = UniformAt(seed, a, b, 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace loom::train
