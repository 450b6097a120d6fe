// tests/models/model_configs.h — the small seq2seq and language model that model_test.cc and
// decode_test.cc both build: width 16, 4 heads, 2 layers a stack (so the stacks' final norms and the
// paths between layers run), FFN 40, dropout 0.1 (a test that forgets eval() shows it). A test
// changes what it needs (vocabularies, max_len, dropout) on the copy it gets.
//
// To add a shared configuration: a function here, used by at least two test files of this folder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "test_util.h"
#include "tfm/data/batching.h"
#include "tfm/enum_names.h"
#include "tfm/models/config.h"
#include "tfm/ops/activation.h"

namespace tfm::testing {

// 11 source and 13 target tokens, width 16, max_len 64.
inline ModelConfig small_seq2seq(bool norm_first = false, bool tie = false, const std::string& act = "relu") {
  ModelConfig c;
  c.arch = Arch::SEQ2SEQ;
  c.src_vocab_size = 11;
  c.tgt_vocab_size = 13;
  c.d_model = 16;
  c.nhead = 4;
  c.num_encoder_layers = 2;
  c.num_decoder_layers = 2;
  c.dim_feedforward = 40;
  c.dropout = 0.1f;
  c.activation = enum_from_name<Activation>(act);
  c.norm_first = norm_first;
  c.tie_embeddings = tie;
  c.max_len = 64;
  return c;
}

// A per-position encoder (a tagger) over 20 tokens on both sides: d_model 16, 2 heads, FFN 32, `layers` layers.
inline ModelConfig tiny_encoder(int64_t layers) {
  ModelConfig c;
  c.arch = Arch::ENCODER;
  c.src_vocab_size = c.tgt_vocab_size = 20;
  c.d_model = 16;
  c.nhead = 2;
  c.num_encoder_layers = layers;
  c.dim_feedforward = 32;
  return c;
}

// A decoder-only language model over 13 tokens with its architecture's defaults (pre-norm, GELU,
// learned positions, tied output projection), context (max_len) 24.
inline ModelConfig small_decoder() {
  ModelConfig c;
  c.arch = Arch::DECODER;
  c.src_vocab_size = c.tgt_vocab_size = 13;
  c.d_model = 16;
  c.nhead = 4;
  c.num_decoder_layers = 2;
  c.dim_feedforward = 40;
  c.dropout = 0.1f;
  c.max_len = 24;
  return c;
}

// B random windows of T + 1 tokens, as a language model's batch: src = window[0:T], tgt_out =
// window[1:T+1] (B, T). Tokens avoid the specials (pad would be ignored by the loss).
inline data::TokenBatch random_lm_batch(const ModelConfig& c, int64_t B, int64_t T, uint64_t seed) {
  Rng r(seed);
  data::TokenBatch b;
  b.B = B;
  b.S = T;
  for (int64_t i = 0; i < B; ++i) {
    std::vector<int32_t> w(static_cast<size_t>(T + 1));
    for (auto& id : w) id = r.uniform_int(3, static_cast<int32_t>(c.tgt_vocab_size) - 1);
    b.src.insert(b.src.end(), w.begin(), w.end() - 1);
    b.tgt_out.insert(b.tgt_out.end(), w.begin() + 1, w.end());
  }
  return b;
}

}  // namespace tfm::testing
