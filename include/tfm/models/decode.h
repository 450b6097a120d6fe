// tfm/models/decode.h — greedy and beam-search decoding with a key/value cache.
//
// With the cache, each new target token runs the decoder on that token alone: self-attention reads
// the cached keys/values of earlier positions, cross-attention the memory's keys/values projected
// once. Without it (use_cache = false) every step re-runs the decoder on the whole prefix; both give
// the same tokens. Beam search scores hypotheses by log-probability / length^length_penalty; beam = 1
// is greedy decoding.
#pragma once

#include <cstdint>
#include <vector>

#include "tfm/models/seq2seq.h"

namespace tfm {

struct DecodeOptions {
  int beam = 1;
  int64_t max_len = 0;  // 0: 2·source length + 10
  float length_penalty = 1.0f;
  bool use_cache = true;
};

// sources: token ids (no bos/eos). Returns the predicted target ids (without bos/eos) per source, in
// order. For arch "encoder" this is the argmax at every source position (beam ignored).
std::vector<std::vector<int32_t>> decode(const Seq2SeqModel& model, const std::vector<std::vector<int32_t>>& sources,
                                         const DecodeOptions& options = {});

}  // namespace tfm
