// tfm/models/sampling.h — drawing the next token from a row of logits: temperature, top-k, top-p.
//
// One draw = one counter of the caller's Generator (tfm/random.h), so the same seed gives the same
// tokens for any thread count, and a caller that gives each sequence its own stream of counters
// makes the draws independent of how sequences are batched.
#pragma once

#include <cstdint>

#include "tfm/random.h"

namespace tfm {

// The filters apply in this order, as in Hugging Face's generate (and nanoGPT for temperature and
// top-k): logits / temperature; top-k keeps the k largest logits (ties: lower id first); top-p
// (nucleus) sorts the survivors by probability, highest first, ties by lower id, and keeps the
// shortest prefix whose probability sums to at least top_p (so never fewer than one token); the
// token is drawn from the softmax over what is left.
// temperature 0 or top_k 1 is the argmax (first maximum, lowest id on ties) and consumes no counter.
struct SamplingOptions {
  float temperature = 1;  // ≥ 0, finite; 0 = greedy
  int64_t top_k = 0;      // ≥ 0; 0 = no cut
  float top_p = 1;        // in (0, 1]; 1 = no cut
};

// Throws std::invalid_argument naming the option when one is out of range.
void check_sampling_options(const SamplingOptions& opt);

// logits (V): −inf entries are never drawn (a caller masks forbidden tokens that way); at least one
// entry must be neither −inf nor NaN (+inf entries share the whole mass). Draws one uniform from `gen` unless the
// options make it an argmax. Throws std::invalid_argument for bad options, V < 1, or no such entry.
int32_t sample_token(const float* logits, int64_t V, const SamplingOptions& opt, Generator& gen);

}  // namespace tfm
