// src/random.cc — the default generator and the scalar draws of tfm/random.h.
#include "tfm/random.h"

#include <cmath>

#include "kernels/kernels.h"

namespace tfm {

float Generator::uniform() { return no_draws ? 0.0f : kernels::uniform01(seed, take(1)); }

float Generator::normal() {
  if (no_draws) return 0.0f;
  // Box–Muller; u1 in (0, 1] so the log is finite.
  float u1 = 1.0f - uniform();
  float u2 = uniform();
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
}

Generator& default_generator() {
  static Generator g;
  return g;
}
void manual_seed(uint64_t seed) { default_generator() = Generator{seed, 0}; }

}  // namespace tfm
