// tfm/random.h — the random-number generator behind dropout and initialisation.
//
// Counter-based: a Generator is (seed, offset). Each consumer takes a block of `n` counters and
// derives every random value from (seed, counter) alone (kernels::splitmix64, and dropout's
// kernels::dropout_hash built on it), so numbers never depend on thread count or visiting order,
// and saving (seed, offset) in a checkpoint is enough to resume the exact stream.
#pragma once

#include <cstdint>

namespace tfm {

struct Generator {
  uint64_t seed = 0;
  uint64_t offset = 0;
  // Every draw is 0 and costs nothing (no counter taken), and the initialisers (init_uniform, init_normal)
  // leave their tensors' values unset: for building a model whose weights are loaded right after, as
  // torch's skip_init does.
  bool no_draws = false;
  uint64_t take(uint64_t n) {  // first counter of a fresh block of n
    uint64_t o = offset;
    offset += n;
    return o;
  }
  float uniform();  // one value in [0, 1)
  float normal();   // one standard normal value (Box–Muller over two uniforms)
};

// The process-wide default generator (like torch's), used by modules unless told otherwise.
Generator& default_generator();
void manual_seed(uint64_t seed);  // resets the default generator to (seed, 0)

}  // namespace tfm
