// src/models/generate.cc — tfm::generate: prompt → samples from a decoder-only language model.
//
// Per sample: seq holds the prompt and every token drawn so far; the model's context is the window
// seq[w0:], of at most block = max_len tokens. With the cache, a fresh window is fed at once
// (lm_logits prefills it in one causal pass) and each later step feeds only the newest token at
// position cache.length(); without it, every step runs the window's full causal forward. When the
// window would exceed block, w0 moves so that the last ⌈block/2⌉ tokens remain, and the cache is
// refilled from them (tfm/models/generate.h).
#include "tfm/models/generate.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "models/decode_internal.h"
#include "tfm/inference.h"

namespace tfm {

void check_generate_options(const GenerateOptions& opt) {
  if (opt.max_new_tokens < 0)
    throw std::invalid_argument("generate: max_new_tokens must be ≥ 0, got " + std::to_string(opt.max_new_tokens));
  if (opt.num_samples < 1)
    throw std::invalid_argument("generate: num_samples must be ≥ 1, got " + std::to_string(opt.num_samples));
  if (opt.num_samples > kMaxSamples)  // before anything is allocated for them
    throw std::invalid_argument("generate: num_samples must be at most " + std::to_string(kMaxSamples) + ", got " +
                                std::to_string(opt.num_samples) + " (every sample is kept until the call returns)");
  check_sampling_options(opt.sampling);
}

std::vector<std::vector<int32_t>> generate(const Model& model, const std::vector<int32_t>& prompt,
                                           const GenerateOptions& opt, const TokenCallback& on_token) {
  const ModelConfig& c = model.config();
  if (c.family().data != DataKind::TEXT)
    throw std::invalid_argument("generate: needs a language model (arch decoder), got arch " +
                                std::string(enum_name(c.arch)));
  const int64_t V = c.tgt_vocab_size, block = c.max_len;
  if (prompt.empty()) throw std::invalid_argument("generate: the prompt is empty (at least one token is needed)");
  const auto check_ids = [V](const std::vector<int32_t>& ids, const char* what) {
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= V)
        throw std::invalid_argument(std::string("generate: ") + what + " id " + std::to_string(ids[i]) +
                                    " at position " + std::to_string(i) + " is outside the vocabulary [0, " +
                                    std::to_string(V) + ")");
  };
  check_ids(prompt, "prompt");
  check_ids(opt.suppress, "suppressed");
  std::vector<char> suppressed(static_cast<size_t>(V), 0);
  for (int32_t id : opt.suppress) suppressed[static_cast<size_t>(id)] = 1;
  if (std::count(suppressed.begin(), suppressed.end(), 1) == V)
    throw std::invalid_argument("generate: every token of the vocabulary is suppressed");
  const int32_t eos = opt.ignore_eos || c.eos_id < 0 || c.eos_id >= V ? -1 : c.eos_id;
  check_generate_options(opt);
  if (block < 1) throw std::invalid_argument("generate: the model's max_len (block size) must be ≥ 1");
  InferenceMode scope(InferenceMode::current_precision());  // no tape; weights packed once
  EvalModeGuard eval(model);

  const size_t keep = static_cast<size_t>((block + 1) / 2);  // tokens kept when the window slides
  std::vector<float> masked(opt.suppress.empty() ? 0 : static_cast<size_t>(V));  // the logits drawn from
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(opt.num_samples));
  for (int64_t s = 0; s < opt.num_samples; ++s) {
    Generator gen{opt.seed, static_cast<uint64_t>(s) << 32};
    std::vector<int32_t> seq = prompt;
    size_t w0 = seq.size() > static_cast<size_t>(block) ? seq.size() - static_cast<size_t>(block) : 0;
    TransformerEncoderCache cache;
    bool refill = true;  // the cache must be (re)built from seq[w0:]
    std::vector<int32_t>& gen_ids = out[static_cast<size_t>(s)];
    for (int64_t step = 0; step < opt.max_new_tokens; ++step) {
      Tensor logits;  // (1, T, V); the next token's are the last row
      if (opt.use_cache && !refill) {
        logits = model.lm_logits({seq.back()}, 1, 1, cache.length(), &cache);
      } else {
        const std::vector<int32_t> window(seq.begin() + static_cast<std::ptrdiff_t>(w0), seq.end());
        const int64_t T = static_cast<int64_t>(window.size());
        if (opt.use_cache) {
          cache = model.make_lm_cache(1, block);
          refill = false;
          if (opt.prefill || T == 1) {
            logits = model.lm_logits(window, 1, T, 0, &cache, /*last_only=*/true);
          } else {  // position 0 alone, then the rest one position per call
            model.lm_logits({window[0]}, 1, 1, 0, &cache);
            logits = model.lm_logits(std::vector<int32_t>(window.begin() + 1, window.end()), 1, T - 1, 1, &cache,
                                     /*last_only=*/true);
          }
        } else {
          logits = model.lm_logits(window, 1, T, 0, nullptr, /*last_only=*/true);
        }
      }
      const float* last = logits.data() + (logits.size(1) - 1) * V;
      if (opt.on_logits) opt.on_logits(s, last, V);
      if (!masked.empty()) {
        for (int64_t i = 0; i < V; ++i) masked[static_cast<size_t>(i)] = suppressed[static_cast<size_t>(i)] ? -INFINITY : last[i];
        last = masked.data();
      }
      const int32_t v = sample_token(last, V, opt.sampling, gen);
      seq.push_back(v);
      gen_ids.push_back(v);
      if (on_token) on_token(s, v);
      if (v == eos) break;
      if (opt.stop_after && opt.stop_after(s, gen_ids)) break;
      if (seq.size() - w0 > static_cast<size_t>(block)) {  // the next step's context would not fit
        w0 = seq.size() - keep;
        refill = true;
      }
    }
  }
  return out;
}

}  // namespace tfm
