// tests/models/model_configs.h — the small seq2seq that model_test.cc and decode_test.cc both build:
// width 16, 4 heads, 2 encoder and 2 decoder layers (so the stacks' final norms and the paths between
// layers run), FFN 40, dropout 0.1 (a test that forgets eval() shows it). A test changes what it needs
// (vocabularies, max_len, dropout) on the copy it gets.
//
// To add a shared configuration: a function here, used by at least two test files of this folder.
#pragma once

#include <string>

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

}  // namespace tfm::testing
