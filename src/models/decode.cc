// src/models/decode.cc — greedy / beam-search decoding over a step decoder, with or without the
// key/value cache.
//
// Shapes: Bs sources in a chunk, S padded source length, K beam width, N = rows (hypotheses) alive,
// D model width, V target vocabulary, t the position being decoded.
//
// Beam search (per source, all sources of a chunk advance in lock-step):
//   * K rows per source; at t = 0 only the first is live (the others score −inf), so K = 1 is greedy.
//   * Each step: candidates (k, v) score s_k + log p(v | hyp_k), pad and bos excluded (bos only when it is not also
//   eos), and opt.suppress but eos (suppressed_in_decoder); the best 2K
//     by score (ties: lower k, then lower v). Walking them in order, an eos candidate ranked < K
//     becomes a finished hypothesis; other candidates fill the K new rows.
//   * A source stops when (a) it has K finished hypotheses and the K-th best of them scores at least
//     as well as the best live hypothesis scored at its current length (Hugging Face's rule; with
//     K = 1 it is greedy's "stop at the first eos", since the eos candidate outranked the others of
//     the same length); or (b) no live hypothesis can still beat the best finished one: scores only
//     decrease, so a live log-probability s ≤ 0 ends with a score ≤ s / longest^length_penalty
//     (longest = the source's limit, plus its eos when one still fits); or (c) at the limit: a row of
//     `limit` tokens takes one more step, where its eos is scored whatever its rank — as fairseq forces
//     eos at its limit — so a cut-off row is charged for the end it never chose and scores against the
//     others on equal terms; an eos that ranks < K there ends its row as any eos does, the others are
//     Hypothesis::truncated. Only where the limit is the decoder's whole position table (config.max_len)
//     has the eos no position left: those rows end as they are, without it. The answer is the finished
//     hypothesis of highest score = logprob / length^length_penalty, length counting the eos.
// The search is deterministic: no randomness, fixed tie-breaking, kernels independent of threads.
//
// Sampling (sample_chunk) runs the same step decoder one row per source: each step draws the next
// token with sample_token from the row's logits (pad, bos and suppressed_in_decoder masked to −inf) using the
// source's own Generator, adds its log-probability, and ends the source at eos or at its maximum length (truncated), as
// greedy search does (a source at its limit draws once more: an eos ends it, anything else leaves it
// truncated, charged for the eos); with an argmax draw it yields greedy's tokens and log-probabilities.
#include "tfm/models/decode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "kernels/cross_entropy_scalar.h"
#include "models/decode_internal.h"
#include "tfm/autograd.h"
#include "tfm/inference.h"
#include "tfm/ops/elementwise.h"

namespace tfm {
namespace detail {
namespace {

// rows (R) of t (N, ...) → (R, ...), a copy (inference only).
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  Shape s = t.shape();
  const int64_t N = s[0], row = N ? t.numel() / N : 0;
  s[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(s, t.dtype());
  const size_t bytes = static_cast<size_t>(row) * (t.dtype() == DType::BOOL ? 1 : sizeof(float));
  auto* dst = static_cast<unsigned char*>(t.dtype() == DType::BOOL ? static_cast<void*>(out.data_bool())
                                                                    : static_cast<void*>(out.data()));
  const auto* src = static_cast<const unsigned char*>(t.dtype() == DType::BOOL ? static_cast<const void*>(t.data_bool())
                                                                                : static_cast<const void*>(t.data()));
  for (size_t r = 0; r < rows.size(); ++r) std::memcpy(dst + r * bytes, src + static_cast<size_t>(rows[r]) * bytes, bytes);
  return out;
}

// ---- full decoder (no cache) ----------------------------------------------------------------------
class FullDecoder : public StepDecoder {
 public:
  FullDecoder(const Model& model, const EncodedSources& enc, std::vector<int64_t> row_source)
      : model_(model), enc_(enc) {
    row_source_ = std::move(row_source);
    prefix_.assign(row_source_.size(), {});
  }

  Tensor step(const std::vector<int32_t>& tokens) override {
    const int64_t N = static_cast<int64_t>(row_source_.size()), T = position_ + 1;
    if (static_cast<int64_t>(tokens.size()) != N) throw std::invalid_argument("step: one token per row expected");
    std::vector<int32_t> ids;
    ids.reserve(static_cast<size_t>(N * T));
    for (int64_t n = 0; n < N; ++n) {
      prefix_[static_cast<size_t>(n)].push_back(tokens[static_cast<size_t>(n)]);
      ids.insert(ids.end(), prefix_[static_cast<size_t>(n)].begin(), prefix_[static_cast<size_t>(n)].end());
    }
    const Tensor tgt = model_.embed_target(ids, N, T);            // (N, T, D)
    const Tensor memory = gather_rows(enc_.memory, row_source_);  // (N, S, D)
    const Tensor mem_kpm = gather_rows(enc_.kpm, row_source_);    // (N, S)
    const Tensor h = model_.decoder().forward(tgt, memory, Tensor(), Tensor(), Tensor(), mem_kpm,
                                                    /*tgt_is_causal=*/true);  // (N, T, D)
    const int64_t D = h.size(2);
    Tensor last = Tensor::empty({N, 1, D});  // h[:, T-1, :]
    for (int64_t n = 0; n < N; ++n)
      std::memcpy(last.data() + n * D, h.data() + (n * T + T - 1) * D, sizeof(float) * static_cast<size_t>(D));
    ++position_;
    const Tensor logits = model_.project(last);  // (N, 1, V)
    return logits.reshape({N, logits.size(2)});
  }

  void select_rows(const std::vector<int64_t>& rows) override {
    std::vector<std::vector<int32_t>> prefix;
    std::vector<int64_t> src;
    for (int64_t r : rows) {
      prefix.push_back(prefix_.at(static_cast<size_t>(r)));
      src.push_back(row_source_.at(static_cast<size_t>(r)));
    }
    prefix_ = std::move(prefix);
    row_source_ = std::move(src);
  }

 private:
  const Model& model_;
  const EncodedSources& enc_;
  std::vector<std::vector<int32_t>> prefix_;  // (N, position_)
};

// ---- cached decoder -------------------------------------------------------------------------------
// Embeds one token per row and runs the decoder stack's own forward with its cache: self-attention
// reads the keys/values of the earlier positions (the causal mask), cross-attention the memory's
// keys/values projected at the first step; row n reads source row_source[n] of the encoded batch.
class CachedDecoder : public StepDecoder {
 public:
  CachedDecoder(const Model& model, const EncodedSources& enc, std::vector<int64_t> row_source,
                int64_t capacity)
      : model_(model),
        enc_(enc),
        cache_(static_cast<size_t>(model.decoder().num_layers()), std::max<int64_t>(capacity, 1), row_source,
               enc.lengths) {
    row_source_ = std::move(row_source);
  }

  Tensor step(const std::vector<int32_t>& tokens) override {
    const ModelConfig& c = model_.config();
    const int64_t N = static_cast<int64_t>(row_source_.size());
    if (static_cast<int64_t>(tokens.size()) != N) throw std::invalid_argument("step: one token per row expected");
    if (position_ >= c.max_len)
      throw std::invalid_argument("decode: position " + std::to_string(position_) + " beyond max_len " +
                                  std::to_string(c.max_len));
    // x = tgt_embedding(token)·scale + positions[t]   (N, 1, D): Embedder::embed (·√D when the config scales
    // embeddings; sinusoidal pe, learned tgt_pos_embedding or none)
    const Tensor x = model_.embed_target(tokens, N, 1, position_);
    const Tensor h = model_.decoder().forward(x, enc_.memory, Tensor(), Tensor(), Tensor(), Tensor(),
                                              /*tgt_is_causal=*/true, /*memory_is_causal=*/false,
                                              &cache_);  // (N, 1, D)
    ++position_;
    const Tensor logits = model_.project(h);  // (N, 1, V)
    return logits.reshape({N, logits.size(2)});
  }

  void select_rows(const std::vector<int64_t>& rows) override {
    cache_.select_rows(rows);
    std::vector<int64_t> src;
    for (int64_t r : rows) src.push_back(row_source_.at(static_cast<size_t>(r)));
    row_source_ = std::move(src);
  }

 private:
  const Model& model_;
  const EncodedSources& enc_;
  TransformerDecoderCache cache_;  // per layer: keys/values (N, capacity, D), memory's (Bs, S, 2D)
};

}  // namespace

EncodedSources encode_sources(const Model& model, const std::vector<std::vector<int32_t>>& sources) {
  const ModelConfig& c = model.config();
  EncodedSources e;
  e.Bs = static_cast<int64_t>(sources.size());
  int64_t S = 1;  // at least one (padding) column, so an empty source still has a defined memory
  for (const auto& s : sources) S = std::max<int64_t>(S, static_cast<int64_t>(s.size()));
  if (S > c.max_len)
    throw std::invalid_argument("decode: source of length " + std::to_string(S) + " exceeds max_len " +
                                std::to_string(c.max_len));
  e.S = S;
  std::vector<int32_t> ids(static_cast<size_t>(e.Bs * S), c.pad_id);
  for (int64_t b = 0; b < e.Bs; ++b) {
    const auto& s = sources[static_cast<size_t>(b)];
    for (size_t j = 0; j < s.size(); ++j) {
      if (s[j] == c.pad_id)
        throw std::invalid_argument("decode: source " + std::to_string(b) + " contains the pad id at position " +
                                    std::to_string(j));
      ids[static_cast<size_t>(b * S) + j] = s[j];
    }
    e.lengths.push_back(static_cast<int64_t>(s.size()));
  }
  e.memory = model.encode(ids, e.Bs, S, &e.kpm);  // (Bs, S, D), kpm (Bs, S)
  return e;
}

std::unique_ptr<StepDecoder> make_cached_decoder(const Model& model, const EncodedSources& enc,
                                                 std::vector<int64_t> row_source, int64_t capacity) {
  return std::make_unique<CachedDecoder>(model, enc, std::move(row_source), capacity);
}
std::unique_ptr<StepDecoder> make_full_decoder(const Model& model, const EncodedSources& enc,
                                               std::vector<int64_t> row_source) {
  return std::make_unique<FullDecoder>(model, enc, std::move(row_source));
}

}  // namespace detail

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr int64_t kChunk = 64;  // sources decoded together (bounds the caches' memory)

double normalized(double logprob, int64_t length, float penalty) {
  return logprob / std::pow(static_cast<double>(std::max<int64_t>(length, 1)), static_cast<double>(penalty));
}

// The start token, never generated: −1 (none) when it is the end token too (a BART-style </s> that starts
// and ends a sequence), which then ends a hypothesis as any end token does.
int32_t never_generated_bos(const ModelConfig& c) { return c.bos_id != c.eos_id ? c.bos_id : -1; }

// log_softmax of logits row (V) into out, in double (kernels::log_softmax_row_scalar, the scorer's
// too); pad and bos get −inf (never generated; bos −1: none).
void log_softmax_row(const float* z, int64_t V, int32_t pad, int32_t bos, std::vector<double>& out) {
  out.resize(static_cast<size_t>(V));
  const double lse = kernels::log_softmax_row_scalar(z, V, pad, bos).lse;
  for (int64_t v = 0; v < V; ++v) out[static_cast<size_t>(v)] = (v == pad || v == bos) ? kNegInf : z[v] - lse;
}

// The ids of opt.suppress a decoder never generates: all but eos, which ends a prediction (predict() passes the
// target vocabulary's marks, eos among them, for arch "encoder"). Log-probabilities are not renormalized without
// them: a prediction's logprob is the model's, as the scorer computes it.
std::vector<int32_t> suppressed_in_decoder(const ModelConfig& c, const DecodeOptions& opt) {
  std::vector<int32_t> ids;
  for (const int32_t id : opt.suppress)
    if (id >= 0 && id < c.tgt_vocab_size && id != c.eos_id) ids.push_back(id);
  return ids;
}

struct Live {
  std::vector<int32_t> tokens;  // generated so far (no bos)
  double logprob = kNegInf;
};

// Each source's limit in generated tokens (eos not counted): DecodeOptions::max_len, or 2·its length + 10, at most
// config.max_len (a token at position p needs p < max_len; bos is at 0). A row at its limit feeds one more position to
// score its eos, where that position exists: `positions` is the most any row feeds, the cache's capacity.
struct Limits {
  std::vector<int64_t> tokens;  // (Bs)
  std::vector<char> eos_fits;   // (Bs) position tokens[b] exists: the limit's step scores the eos
  int64_t positions = 1;
};

Limits source_limits(const ModelConfig& c, const detail::EncodedSources& enc, const DecodeOptions& opt) {
  Limits l;
  for (const int64_t n : enc.lengths) {
    const int64_t lim = std::min<int64_t>(opt.max_len > 0 ? opt.max_len : 2 * n + 10, c.max_len);
    l.tokens.push_back(lim);
    l.eos_fits.push_back(lim < c.max_len);
    l.positions = std::max(l.positions, lim + l.eos_fits.back());
  }
  return l;
}

std::vector<Hypothesis> search_chunk(const Model& model, const std::vector<std::vector<int32_t>>& sources,
                                     const DecodeOptions& opt) {
  const ModelConfig& c = model.config();
  const int64_t Bs = static_cast<int64_t>(sources.size()), K = opt.beam, V = c.tgt_vocab_size;
  const detail::EncodedSources enc = detail::encode_sources(model, sources);
  const Limits lim_of = source_limits(c, enc, opt);
  const std::vector<int64_t>& limit = lim_of.tokens;
  const int64_t longest = lim_of.positions;
  std::vector<int64_t> row_source;
  for (int64_t b = 0; b < Bs; ++b)
    for (int64_t k = 0; k < K; ++k) row_source.push_back(b);
  std::unique_ptr<detail::StepDecoder> dec =
      opt.use_cache ? detail::make_cached_decoder(model, enc, row_source, longest)
                    : detail::make_full_decoder(model, enc, row_source);

  // Per source: its live rows (K, contiguous in the decoder, in `active` order) and finished list.
  std::vector<std::vector<Live>> live(static_cast<size_t>(Bs), std::vector<Live>(static_cast<size_t>(K)));
  std::vector<std::vector<Hypothesis>> finished(static_cast<size_t>(Bs));
  std::vector<int64_t> active(static_cast<size_t>(Bs));
  std::iota(active.begin(), active.end(), 0);
  for (auto& l : live) l[0].logprob = 0.0;
  std::vector<int32_t> tokens(static_cast<size_t>(Bs * K), c.bos_id);
  std::vector<double> lp;
  std::vector<std::pair<double, int64_t>> cand;  // (score, k·V + v)
  const std::vector<int32_t> suppressed = suppressed_in_decoder(c, opt);

  // with_eos: logprob counts an eos (chosen, or charged at the limit); truncated: the model did not end it.
  auto finish = [&](int64_t b, std::vector<int32_t> toks, double logprob, bool with_eos, bool truncated) {
    const int64_t len = static_cast<int64_t>(toks.size()) + (with_eos ? 1 : 0);
    Hypothesis h;
    h.tokens = std::move(toks);
    h.logprob = static_cast<float>(logprob);
    h.score = static_cast<float>(normalized(logprob, len, opt.length_penalty));
    h.truncated = truncated;
    finished[static_cast<size_t>(b)].push_back(std::move(h));
  };
  std::vector<double> eos_lp(static_cast<size_t>(K));  // (K) each live row's log p(eos), for the limit's step
  std::vector<char> ended(static_cast<size_t>(K));

  for (int64_t t = 0; !active.empty(); ++t) {
    const Tensor logits = dec->step(tokens);  // (N, V), N = active·K
    std::vector<int64_t> next_rows, next_active;
    std::vector<int32_t> next_tokens;
    for (size_t a = 0; a < active.size(); ++a) {
      const int64_t b = active[a];
      auto& beams = live[static_cast<size_t>(b)];
      const int64_t lim = limit[static_cast<size_t>(b)];
      const bool at_limit = t == lim;  // the rows hold `lim` tokens: only their eos is still scored
      cand.clear();
      for (int64_t k = 0; k < K; ++k) {
        if (beams[static_cast<size_t>(k)].logprob == kNegInf) continue;
        log_softmax_row(logits.data() + (static_cast<int64_t>(a) * K + k) * V, V, c.pad_id, never_generated_bos(c), lp);
        eos_lp[static_cast<size_t>(k)] = lp[static_cast<size_t>(c.eos_id)];
        for (const int32_t id : suppressed) lp[static_cast<size_t>(id)] = kNegInf;
        for (int64_t v = 0; v < V; ++v)
          if (lp[static_cast<size_t>(v)] != kNegInf)
            cand.emplace_back(beams[static_cast<size_t>(k)].logprob + lp[static_cast<size_t>(v)], k * V + v);
      }
      const size_t top = std::min(cand.size(), static_cast<size_t>(2 * K));
      std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(top), cand.end(),
                        [](const auto& x, const auto& y) { return x.first > y.first || (x.first == y.first && x.second < y.second); });
      std::vector<Live> next;
      std::vector<int64_t> parents;
      if (at_limit) {  // the eos ranked < K end their rows; every other live row is charged for its eos
        std::fill(ended.begin(), ended.end(), 0);
        for (size_t r = 0; r < std::min(top, static_cast<size_t>(K)); ++r)
          if (cand[r].second % V == c.eos_id) {
            const int64_t k = cand[r].second / V;
            ended[static_cast<size_t>(k)] = 1;
            finish(b, beams[static_cast<size_t>(k)].tokens, cand[r].first, true, false);
          }
        for (int64_t k = 0; k < K; ++k) {
          const Live& h = beams[static_cast<size_t>(k)];
          if (h.logprob != kNegInf && !ended[static_cast<size_t>(k)])
            finish(b, h.tokens, h.logprob + eos_lp[static_cast<size_t>(k)], true, true);
        }
        continue;  // source done
      }
      for (size_t r = 0; r < top && static_cast<int64_t>(next.size()) < K; ++r) {
        const int64_t k = cand[r].second / V;
        const int32_t v = static_cast<int32_t>(cand[r].second % V);
        if (v == c.eos_id) {
          if (r < static_cast<size_t>(K)) finish(b, beams[static_cast<size_t>(k)].tokens, cand[r].first, true, false);
          continue;
        }
        Live h;
        h.tokens = beams[static_cast<size_t>(k)].tokens;
        h.tokens.push_back(v);
        h.logprob = cand[r].first;
        next.push_back(std::move(h));
        parents.push_back(k);
      }
      const auto& fin = finished[static_cast<size_t>(b)];
      const bool eos_fits = lim_of.eos_fits[static_cast<size_t>(b)];
      bool done = next.empty();
      if (!done && !fin.empty()) {
        std::vector<double> scores;  // finished scores, best first
        for (const auto& h : fin) scores.push_back(h.score);
        std::sort(scores.rbegin(), scores.rend());
        double live_now = kNegInf, live_bound = kNegInf;
        for (const auto& h : next) {
          live_now = std::max(live_now, normalized(h.logprob, t + 1, opt.length_penalty));
          live_bound = std::max(live_bound, normalized(h.logprob, lim + (eos_fits ? 1 : 0), opt.length_penalty));
        }
        // K finished, the K-th best at least as good as the best live one scored at its current
        // length; or no live one can win even at its longest.
        done = (static_cast<int64_t>(scores.size()) >= K && scores[static_cast<size_t>(K - 1)] >= live_now) ||
               scores[0] >= live_bound;
      }
      if (done) continue;  // source done: its rows are dropped, live hypotheses discarded
      if (t + 1 >= lim && !eos_fits) {  // the position table's end: the live rows end here without eos
        for (auto& h : next) finish(b, std::move(h.tokens), h.logprob, false, true);
        continue;
      }
      while (static_cast<int64_t>(next.size()) < K) {  // fewer candidates than beams (tiny vocab)
        next.push_back(Live{});
        parents.push_back(0);
      }
      for (int64_t k = 0; k < K; ++k) {
        next_rows.push_back(static_cast<int64_t>(a) * K + parents[static_cast<size_t>(k)]);
        next_tokens.push_back(next[static_cast<size_t>(k)].tokens.empty() ? c.bos_id
                                                                          : next[static_cast<size_t>(k)].tokens.back());
      }
      beams = std::move(next);
      next_active.push_back(b);
    }
    active = std::move(next_active);
    tokens = std::move(next_tokens);
    bool identity = next_rows.size() == static_cast<size_t>(logits.size(0));
    for (size_t r = 0; identity && r < next_rows.size(); ++r) identity = next_rows[r] == static_cast<int64_t>(r);
    if (!active.empty() && !identity) dec->select_rows(next_rows);  // greedy rarely needs a copy
  }

  std::vector<Hypothesis> best(static_cast<size_t>(Bs));
  for (int64_t b = 0; b < Bs; ++b) {
    const auto& f = finished[static_cast<size_t>(b)];
    size_t i_best = 0;
    for (size_t i = 1; i < f.size(); ++i)
      if (f[i].score > f[i_best].score) i_best = i;
    if (!f.empty()) best[static_cast<size_t>(b)] = f[i_best];
  }
  return best;
}

// Generator of source b: (seed, stream·2³²), stream = sample_streams[b] or b.
Generator source_generator(const DecodeOptions& opt, const std::vector<uint64_t>& streams, size_t b) {
  return Generator{opt.seed, (streams.empty() ? static_cast<uint64_t>(b) : streams[b]) << 32};
}

// Sampled decoding of a chunk: one decoder row per source, dropped when the source ends.
std::vector<Hypothesis> sample_chunk(const Model& model, const std::vector<std::vector<int32_t>>& sources,
                                     const std::vector<uint64_t>& streams, const DecodeOptions& opt) {
  const ModelConfig& c = model.config();
  const int64_t Bs = static_cast<int64_t>(sources.size()), V = c.tgt_vocab_size;
  const detail::EncodedSources enc = detail::encode_sources(model, sources);
  const Limits lim_of = source_limits(c, enc, opt);
  const std::vector<int64_t>& limit = lim_of.tokens;
  const int64_t longest = lim_of.positions;
  std::vector<int64_t> row_source(static_cast<size_t>(Bs));
  std::iota(row_source.begin(), row_source.end(), 0);
  std::unique_ptr<detail::StepDecoder> dec = opt.use_cache
                                                 ? detail::make_cached_decoder(model, enc, row_source, longest)
                                                 : detail::make_full_decoder(model, enc, row_source);
  std::vector<Generator> gen;
  for (size_t b = 0; b < sources.size(); ++b) gen.push_back(source_generator(opt, streams, b));
  std::vector<Hypothesis> out(static_cast<size_t>(Bs));
  std::vector<double> logprob(static_cast<size_t>(Bs), 0.0);
  std::vector<int64_t> active = row_source;  // source of each decoder row
  std::vector<int32_t> tokens(static_cast<size_t>(Bs), c.bos_id);
  std::vector<float> row(static_cast<size_t>(V));
  std::vector<double> lp;
  const std::vector<int32_t> suppressed = suppressed_in_decoder(c, opt);
  for (int64_t t = 0; !active.empty(); ++t) {
    const Tensor logits = dec->step(tokens);  // (N, V), N = active sources
    std::vector<int64_t> next_rows, next_active;
    std::vector<int32_t> next_tokens;
    for (size_t a = 0; a < active.size(); ++a) {
      const size_t b = static_cast<size_t>(active[a]);
      const float* z = logits.data() + static_cast<int64_t>(a) * V;
      std::copy(z, z + V, row.begin());
      const int32_t bos = never_generated_bos(c);
      row[static_cast<size_t>(c.pad_id)] = -INFINITY;
      if (bos >= 0) row[static_cast<size_t>(bos)] = -INFINITY;
      for (const int32_t id : suppressed) row[static_cast<size_t>(id)] = -INFINITY;
      const int32_t v = sample_token(row.data(), V, opt.sampling, gen[b]);
      log_softmax_row(z, V, c.pad_id, bos, lp);
      Hypothesis& h = out[b];
      const bool eos = v == c.eos_id, at_limit = t == limit[b];  // at_limit: only the eos is still scored
      logprob[b] += lp[static_cast<size_t>(at_limit ? c.eos_id : v)];
      if (!eos && !at_limit) h.tokens.push_back(v);
      const bool table_end = !eos && t + 1 >= limit[b] && !lim_of.eos_fits[b];  // no position for an eos
      if (eos || at_limit || table_end) {
        const bool with_eos = !table_end;
        h.logprob = static_cast<float>(logprob[b]);
        h.score = static_cast<float>(
            normalized(logprob[b], static_cast<int64_t>(h.tokens.size()) + (with_eos ? 1 : 0), opt.length_penalty));
        h.truncated = !eos;
        continue;
      }
      next_rows.push_back(static_cast<int64_t>(a));
      next_active.push_back(active[a]);
      next_tokens.push_back(v);
    }
    if (!next_active.empty() && next_rows.size() != active.size()) dec->select_rows(next_rows);
    active = std::move(next_active);
    tokens = std::move(next_tokens);
  }
  return out;
}

// Without a decoder: argmax at every source position (one forward, no search); sampling: a draw at every
// position, source b's draws from its own Generator. Neither picks opt.suppress (predict(): the target
// vocabulary's <pad>, <bos>, <eos>; a position's prediction is a word, and a <pad> would vanish from the
// output and shift the rest). The log-probabilities reported are the model's own, over the whole vocabulary.
std::vector<Hypothesis> decode_encoder(const Model& model, const std::vector<std::vector<int32_t>>& sources,
                                       const std::vector<uint64_t>& streams, const DecodeOptions& opt) {
  const ModelConfig& c = model.config();
  data::TokenBatch batch;
  batch.B = static_cast<int64_t>(sources.size());
  batch.S = 1;
  for (const auto& s : sources) batch.S = std::max<int64_t>(batch.S, static_cast<int64_t>(s.size()));
  batch.src.assign(static_cast<size_t>(batch.B * batch.S), c.pad_id);
  for (int64_t b = 0; b < batch.B; ++b)
    std::copy(sources[static_cast<size_t>(b)].begin(), sources[static_cast<size_t>(b)].end(),
              batch.src.begin() + b * batch.S);
  const Tensor logits = model.forward(batch);  // (B, S, V)
  const int64_t V = c.tgt_vocab_size;
  std::vector<Hypothesis> out(sources.size());
  std::vector<double> lp;
  std::vector<float> row(static_cast<size_t>(V));
  for (int64_t b = 0; b < batch.B; ++b) {
    Hypothesis& h = out[static_cast<size_t>(b)];
    double total = 0;
    const int64_t len = static_cast<int64_t>(sources[static_cast<size_t>(b)].size());
    Generator gen = source_generator(opt, streams, static_cast<size_t>(b));
    for (int64_t i = 0; i < len; ++i) {
      const float* z = logits.data() + (b * batch.S + i) * V;
      log_softmax_row(z, V, -1, -1, lp);
      std::copy(z, z + V, row.begin());
      for (const int32_t id : opt.suppress)
        if (id >= 0 && id < V) row[static_cast<size_t>(id)] = -INFINITY;
      const int64_t v = opt.sample ? sample_token(row.data(), V, opt.sampling, gen)
                                   : std::max_element(row.begin(), row.end()) - row.begin();  // first maximum
      h.tokens.push_back(static_cast<int32_t>(v));
      total += lp[static_cast<size_t>(v)];
    }
    h.logprob = static_cast<float>(total);
    h.score = static_cast<float>(normalized(total, len, opt.length_penalty));
  }
  return out;
}

}  // namespace

void check_decode_options(const DecodeOptions& options) {
  if (options.beam < 1) throw std::invalid_argument("beam must be ≥ 1, got " + std::to_string(options.beam));
  if (options.beam > kMaxBeam)
    throw std::invalid_argument("beam must be at most " + std::to_string(kMaxBeam) + ", got " +
                                std::to_string(options.beam));
  if (options.max_len < 0)
    throw std::invalid_argument("max_len must be ≥ 0 (0: the default limit), got " + std::to_string(options.max_len));
  if (!(options.length_penalty >= 0.0f))
    throw std::invalid_argument("length_penalty must be ≥ 0, got " + std::to_string(options.length_penalty));
  if (options.sample) {
    if (options.beam != 1)
      throw std::invalid_argument("sample needs beam 1 (a draw replaces the search), got beam " +
                                  std::to_string(options.beam));
    check_sampling_options(options.sampling);
  }
}

std::vector<Hypothesis> decode_hypotheses(const Model& model, const std::vector<std::vector<int32_t>>& sources,
                                          const DecodeOptions& options) {
  if (model.family().data == DataKind::TEXT)
    throw std::invalid_argument("decode: arch decoder is a language model, it does not translate: use tfm generate "
                                "(and tfm eval --text)");
  check_decode_options(options);
  if (options.max_len > model.config().max_len)
    throw std::invalid_argument("decode: max_len " + std::to_string(options.max_len) + " exceeds the model's max_len " +
                                std::to_string(model.config().max_len) + " (the length of its position table)");
  if (!options.sample_streams.empty() && options.sample_streams.size() != sources.size())
    throw std::invalid_argument("decode: " + std::to_string(options.sample_streams.size()) + " sample_streams for " +
                                std::to_string(sources.size()) + " sources");
  // The streams of sources[first, last), for a chunk of them.
  const auto streams_of = [&](auto first, auto last) {
    std::vector<uint64_t> s;
    for (auto i = first; i != last; ++i)
      s.push_back(options.sample_streams.empty() ? static_cast<uint64_t>(*i) : options.sample_streams[static_cast<size_t>(*i)]);
    return s;
  };
  // No tape, and each Linear weight packed once for every step of every hypothesis; a caller's
  // InferenceMode precision (bf16) carries through, float32 otherwise.
  InferenceMode scope(InferenceMode::current_precision());
  EvalModeGuard eval(model);
  if (model.config().target_layout() == data::TargetLayout::PER_POSITION) {
    std::vector<Hypothesis> out;
    for (size_t i = 0; i < sources.size(); i += kChunk) {
      const std::vector<std::vector<int32_t>> chunk(sources.begin() + static_cast<std::ptrdiff_t>(i),
                                                    sources.begin() + static_cast<std::ptrdiff_t>(std::min(sources.size(), i + kChunk)));
      std::vector<size_t> idx(chunk.size());
      std::iota(idx.begin(), idx.end(), i);
      auto part = decode_encoder(model, chunk, streams_of(idx.begin(), idx.end()), options);
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }
  // Longest first, so a chunk holds similar lengths (less padding in memory and encoder).
  std::vector<size_t> order(sources.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sources[a].size() > sources[b].size(); });
  std::vector<Hypothesis> out(sources.size());
  for (size_t i = 0; i < order.size(); i += kChunk) {
    const size_t end = std::min(order.size(), i + kChunk);
    std::vector<std::vector<int32_t>> chunk;
    for (size_t j = i; j < end; ++j) chunk.push_back(sources[order[j]]);
    auto part = options.sample ? sample_chunk(model, chunk, streams_of(order.begin() + static_cast<std::ptrdiff_t>(i),
                                                                        order.begin() + static_cast<std::ptrdiff_t>(end)),
                                              options)
                               : search_chunk(model, chunk, options);
    for (size_t j = i; j < end; ++j) out[order[j]] = std::move(part[j - i]);
  }
  return out;
}

std::vector<std::vector<int32_t>> decode(const Model& model, const std::vector<std::vector<int32_t>>& sources,
                                         const DecodeOptions& options) {
  std::vector<std::vector<int32_t>> out;
  for (auto& h : decode_hypotheses(model, sources, options)) out.push_back(std::move(h.tokens));
  return out;
}

}  // namespace tfm
