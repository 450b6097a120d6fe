// tfm/models/generate.h — text generation with a decoder-only language model (arch DECODER).
//
// Incremental decoding with the key/value cache: the prompt is fed once, then each new token runs
// the model on that token alone (Model::lm_logits with a TransformerEncoderCache), so a token costs
// O(context) attention rather than a forward over the whole context. The next token is drawn from
// the last logits by sample_token (tfm/models/sampling.h): temperature 0 or top_k 1 is greedy.
//
// Window: the model was trained on contexts of at most block = config.max_len tokens, the length of
// its position table. The prompt's last min(length, block) tokens start the context. When a new
// token would not fit, the window slides: the context restarts from the last ⌈block/2⌉ tokens
// (the new one included), re-fed into a fresh cache at positions 0, 1, ... — a full recomputation
// every block/2 tokens rather than one per token, so long generations stay O(block) per token on
// average. The uncached path (use_cache = false) applies the same windows and runs the full causal
// forward of the window at every step; both give the same logits up to float32 rounding.
//
// Determinism: sample s draws its tokens from Generator(seed, s·2³²), one counter per token, and
// every kernel is independent of the thread count: a seed gives the same samples on any machine
// thread count, and sample s does not depend on num_samples.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tfm/models/model.h"
#include "tfm/models/sampling.h"

namespace tfm {

// The most samples one call draws: every sample's tokens (and generate_text's text) are kept until the
// call returns, set up for all samples before the first token (56 bytes a sample through generate_text),
// so a typo's billions of samples would exhaust memory before any output; 2^20 samples take under 60 MiB.
inline constexpr int64_t kMaxSamples = int64_t(1) << 20;

struct GenerateOptions {
  int64_t max_new_tokens = 256;  // ≥ 0 tokens after the prompt, per sample
  SamplingOptions sampling;
  int64_t num_samples = 1;       // in [1, kMaxSamples] samples, one after the other
  uint64_t seed = 0;
  // Called after each drawn token (after on_token) with the sample's generated ids so far (the newest
  // last); true ends the sample right after it. A stop text: stop_at_text (tfm/models/model_dir.h),
  // which matches the decoded text whatever the tokens' cuts.
  std::function<bool(int64_t sample, const std::vector<int32_t>& generated)> stop_after;
  // A sample also ends right after producing the model's eos_id (config), unless ignore_eos.
  bool ignore_eos = false;
  // Token ids never drawn (their logits are −inf for the draw): a model directory's are
  // never_generated (tfm/models/model_dir.h): <pad>, <bos> unless it is also <eos>, <unk>, padded rows.
  std::vector<int32_t> suppress;
  bool use_cache = true;         // false: recompute the window's full forward every step (tests)
  // With the cache, a fresh window's tokens run as one causal pass (a prefill); false feeds them one
  // position per model call instead (the same tokens, slower: bench/gpt2_generate.py's baseline).
  bool prefill = true;
  // Called with each step's next-token logits (V) before the draw, when set (tests, tools).
  std::function<void(int64_t sample, const float* logits, int64_t V)> on_logits;
};

// Called with every generated token as soon as it is drawn (streaming); sample in [0, num_samples).
using TokenCallback = std::function<void(int64_t sample, int32_t token)>;

// Throws std::invalid_argument naming the option when max_new_tokens < 0, num_samples is outside
// [1, kMaxSamples] or a sampling option is out of range (check_sampling_options): generate()'s own checks
// of its options, for a front end to run before it says anything else about the call.
void check_generate_options(const GenerateOptions& opt);

// prompt: token ids (non-empty, each in [0, V)). Returns the generated ids of each sample (the prompt
// not included; ending with the token stop_after accepted, or with eos). Throws when `suppress` leaves no token. Runs under InferenceMode (the caller's
// precision) and in eval mode, restoring the model's training flag afterwards (do not generate
// concurrently with training the same model). Throws std::invalid_argument for an architecture
// other than DECODER, an empty prompt, an id outside the vocabulary, or bad options.
std::vector<std::vector<int32_t>> generate(const Model& model, const std::vector<int32_t>& prompt,
                                           const GenerateOptions& options = {}, const TokenCallback& on_token = {});

}  // namespace tfm
