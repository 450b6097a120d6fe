// tests/models/config_test.cc — ModelConfig: JSON round trip, defaults, errors that name the key.
#include "tfm/models/config.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace tfm {
namespace {

void expect_config_error(const std::string& text, const std::string& needle) {
  try {
    ModelConfig::from_json(text);
    ADD_FAILURE() << "no error for " << text;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, JsonRoundTrip) {
  ModelConfig c;
  c.arch = Arch::SEQ2SEQ;
  c.src_vocab_size = 11;
  c.tgt_vocab_size = 13;
  c.activation = Activation::GELU;
  c.norm_first = c.tie_embeddings = true;
  c.layer_norm_eps = 1e-6f;
  c.bos_id = 5;
  const ModelConfig d = ModelConfig::from_json(c.to_json());
  EXPECT_EQ(d.to_json(), c.to_json());
  EXPECT_EQ(d.arch, Arch::SEQ2SEQ);
  EXPECT_TRUE(d.tie_embeddings && d.norm_first);
  EXPECT_EQ(d.bos_id, 5);
  EXPECT_FLOAT_EQ(d.layer_norm_eps, 1e-6f);
  // Missing keys take the defaults.
  const ModelConfig e = ModelConfig::from_json(R"({"src_vocab_size": 7, "tgt_vocab_size": 9})");
  EXPECT_EQ(e.d_model, ModelConfig{}.d_model);
  EXPECT_EQ(e.arch, ModelConfig{}.arch);
}

TEST(ModelConfig, ErrorsNameTheKey) {
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "d_modle": 8})", "d_modle");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "d_model": "8"})", "d_model");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "dropout": true})", "dropout");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "arch": "rnn"})", "arch");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "d_model": 10, "nhead": 4})", "divisible");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "activation": "tanh"})", "tanh");
  expect_config_error(R"({"src_vocab_size": 0, "tgt_vocab_size": 9})", "vocab_size");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "eos_id": 9})", "eos_id");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "arch": "encoder", "tie_embeddings": true})",
                      "tie_embeddings");
  expect_config_error("[1, 2]", "object");
  expect_config_error("{", "JSON");
}

}  // namespace
}  // namespace tfm
