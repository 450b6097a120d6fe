// tfm/models/sampling.h — drawing the next token from a row of logits: temperature, top-k, top-p.
//
// One draw = one counter of the caller's Generator (tfm/random.h), so the same seed gives the same
// tokens for any thread count, and a caller that gives each sequence its own stream of counters
// makes the draws independent of how sequences are batched.
#pragma once

#include <cstdint>
#include <string>

#include "tfm/random.h"

namespace tfm {

// The filters apply in this order, as in Hugging Face's generate (and nanoGPT for temperature and
// top-k): logits / temperature; top-k keeps the k largest logits; top-p (nucleus) sorts the survivors by
// probability, highest first, ties by lower id, and keeps the shortest prefix whose probability sums to
// at least top_p (so never fewer than one token); the token is drawn from the softmax over what is left.
// One difference from both: at an exact tie at the k-th largest logit, top-k keeps the lowest ids, k
// tokens exactly, where Hugging Face's TopKLogitsWarper and nanoGPT (`logits < topk(logits, k)[-1]`)
// keep every token tied with the k-th (ten equal logits and k 3: tfm draws ids 0, 1, 2; they draw all ten).
// "At least top_p" holds for the decimal a user types: top_p is a double (0.2 read as nearly as a double
// holds it, where a float's 0.20000000298 let two tokens of 0.1 fall short), and a prefix whose computed mass
// falls short of top_p·total by no more than the rounding error of the double sums behind both counts as
// reaching it (src/models/sampling.cc bounds it). Ten equal logits at top_p 0.1, 0.2, ..., 0.9 keep exactly
// 1, 2, ..., 9 tokens; a hundred at 0.07 exactly seven.
// temperature 0 or top_k 1 is the argmax (first maximum, lowest id on ties) and consumes no counter.
struct SamplingOptions {
  float temperature = 1;  // ≥ 0, finite; 0 = greedy (a front end reading a double: float32_option)
  int64_t top_k = 0;      // ≥ 0; 0 = no cut
  double top_p = 1;       // in (0, 1]; 1 = no cut
};

// Throws std::invalid_argument naming the option when one is out of range.
void check_sampling_options(const SamplingOptions& opt);

// `value` as the float32 an option is kept in (SamplingOptions::temperature, or any option held as a float), for a
// front end that reads it as a double (a command line's text, a Python float): a finite value that float32 would
// turn into ±inf or 0 (beyond ±3.4e38, or nonzero and at most 7e-46 in magnitude, half the least subnormal)
// throws std::invalid_argument "<name> must be representable as a float32, got <value>", naming the value given
// (its shortest decimal: 1e+39, 1e-50) where the option's own range check would see, and name, the rounded inf
// or 0 (or take a temperature of 1e-50 as 0, greedy, without a word). Infinities and NaN pass through as
// themselves, for the option's range check to refuse by their names; anything else is rounded to nearest.
float float32_option(double value, const std::string& name);

// logits (V): −inf entries are never drawn (a caller masks forbidden tokens that way); at least one
// entry must be neither −inf nor NaN (+inf entries share the whole mass). Draws one uniform from `gen` unless the
// options make it an argmax. Throws std::invalid_argument for bad options, V < 1, or no such entry.
int32_t sample_token(const float* logits, int64_t V, const SamplingOptions& opt, Generator& gen);

}  // namespace tfm
