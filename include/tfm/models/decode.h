// tfm/models/decode.h — greedy and beam-search decoding with a key/value cache.
//
// With the cache, each new target token runs the decoder on that token alone: self-attention reads
// the cached keys/values of earlier positions, cross-attention the memory's keys/values projected
// once. Without it (use_cache = false) every step re-runs the decoder on the whole prefix; both give
// the same tokens. Beam search scores hypotheses by log-probability / length^length_penalty; beam = 1
// is greedy decoding. A source stops when its best candidate is eos or at its maximum length
// (src/models/decode.cc describes the search step by step).
// Sampled decoding (DecodeOptions::sample) is the greedy decoder with each argmax replaced by a draw
// from tfm::sample_token (tfm/models/sampling.h); with temperature 0 or top_k 1 it is greedy decoding.
#pragma once

#include <cstdint>
#include <vector>

#include "tfm/models/model.h"
#include "tfm/models/sampling.h"

namespace tfm {

// The widest beam decode takes: each hypothesis of the beam holds its own key/value cache and scores
// every target token at every step, so memory and time grow with the beam; beams used in practice are
// 1–16, and a width of millions (a typo) would run until memory runs out.
inline constexpr int kMaxBeam = 1024;

// Sources decoded together when a caller does not say (tfm translate and eval --batch-size, Python's
// translate and evaluate): enough rows to keep the matmuls efficient, few enough that a batch's longest
// source pads the others little (batches are sorted by length).
inline constexpr int64_t kDecodeBatchSize = 64;

struct DecodeOptions {
  int beam = 1;
  // The longest prediction in target tokens (eos not counted). A prediction that reaches it takes one more
  // step, where only its eos is scored: chosen there (in beam search: ranked among the best `beam`), the
  // prediction is whole; otherwise it ends there, charged for the eos it did not choose (as fairseq forces
  // eos at its limit, so beam search ranks cut rows against finished ones on equal terms) and
  // Hypothesis::truncated. At config.max_len, the decoder's whole position table, no position is left for
  // that step: a prediction there ends without eos. 0: 2·source length + 10, at most config.max_len; a value
  // above config.max_len throws.
  int64_t max_len = 0;
  float length_penalty = 1.0f;
  bool use_cache = true;
  // Sampling instead of search (beam must be 1). Source i draws its tokens from the Generator
  // (seed, sample_streams[i]·2³²) — one counter per token — so its sample depends only on the seed
  // and its stream, not on batching or threads. sample_streams empty: stream i = the index i.
  bool sample = false;
  SamplingOptions sampling;
  uint64_t seed = 0;
  std::vector<uint64_t> sample_streams;  // empty, or one per source
  // Token ids no prediction picks (search, draw, an encoder's argmax), except a decoder's eos, which ends its
  // prediction (pad and bos a decoder never generates anyway). predict() passes the target vocabulary's own
  // <pad>, <bos> and <eos> (for arch "encoder": a word is what a position predicts) and its line-break tokens
  // (a prediction is one line: the byte tokens <0x0A>, <0x0D>). Ids, not the config's special ids: an imported
  // model's config may name ids that are real tokens in its vocabulary.
  std::vector<int32_t> suppress;
};

// The checks of decoding options that need no model, naming the field (std::invalid_argument): beam in
// [1, kMaxBeam], max_len ≥ 0, length_penalty ≥ 0, sample only with beam 1 and its sampling options in
// range (check_sampling_options). decode and predict check with it; a front end calls it to fail before it
// loads a model (check_decode_options(TrainedModel, ...) in tfm/models/model_dir.h adds the model's own).
void check_decode_options(const DecodeOptions& options);

// One decoded target: tokens without bos/eos; logprob = Σ log p of the tokens and of the eos (chosen, or
// charged at the limit; none only at config.max_len); score = logprob / length^length_penalty, length
// counting that eos. truncated: it reached its maximum length (DecodeOptions::max_len) and the model did not
// end it there, so a longer limit may let it go on (never for arch "encoder", whose prediction has one token
// per source position). Beam search is not exact: its stopping rule is Hugging Face's (a source stops once
// its beam-th best finished score beats the best live row's score at its current length), so on some inputs
// a wider beam returns a lower score than a narrower one, or than greedy.
struct Hypothesis {
  std::vector<int32_t> tokens;
  float logprob = 0;
  float score = 0;
  bool truncated = false;
};

// sources: token ids (no bos/eos, no pad). Runs in an InferenceMode scope (no tape, packed weights) and in eval mode
// (the model's training flag is restored afterwards, so do not decode concurrently with training the same model). pad
// and bos are never generated. Sources are decoded together in chunks of similar length; a source longer than
// config.max_len throws. Returns the predicted target ids (without bos/eos) per source, in order. For arch "encoder"
// this is the argmax (or, sampling, a draw) at every source position (beam ignored).
std::vector<std::vector<int32_t>> decode(const Model& model, const std::vector<std::vector<int32_t>>& sources,
                                         const DecodeOptions& options = {});
// The same search, also returning each best hypothesis' log-probability and score.
std::vector<Hypothesis> decode_hypotheses(const Model& model, const std::vector<std::vector<int32_t>>& sources,
                                          const DecodeOptions& options = {});

}  // namespace tfm
