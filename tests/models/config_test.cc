// tests/models/config_test.cc — ModelConfig: JSON round trip, defaults, errors that name the key.
#include "tfm/models/config.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "tfm/modules/transformer.h"

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
  EXPECT_EQ(d.tie_embeddings, true);
  EXPECT_EQ(d.norm_first, true);
  EXPECT_EQ(d.bos_id, 5);
  EXPECT_FLOAT_EQ(d.layer_norm_eps, 1e-6f);
  // The layer variants round-trip; unset optionals are written as null and read back unset.
  c.attention.head_dim = 12;
  c.attention.qkv_bias = false;
  c.bias = false;
  c.ffn_bias = true;
  c.attention.attn_scale = 0.5f;
  c.share_layers = true;
  c.drop_path = 0.25f;
  c.positional = Positional::LEARNED;
  c.scale_embeddings = false;
  const ModelConfig v = ModelConfig::from_json(c.to_json());
  EXPECT_EQ(v.to_json(), c.to_json());
  EXPECT_EQ(v.attention.head_dim, 12);
  EXPECT_FALSE(v.attention.v_head_dim.has_value());
  EXPECT_EQ(v.attention.qkv_bias, false);
  EXPECT_FALSE(v.attention.out_bias.has_value());
  EXPECT_EQ(v.ffn_bias, true);
  EXPECT_FALSE(v.norm_bias.has_value());
  EXPECT_EQ(v.attention.attn_scale, 0.5f);
  EXPECT_TRUE(v.share_layers && !v.bias);
  EXPECT_EQ(v.drop_path, 0.25f);
  EXPECT_EQ(v.positional, Positional::LEARNED);
  EXPECT_EQ(v.scale_embeddings, false);
  // Missing keys take the defaults.
  const ModelConfig e = ModelConfig::from_json(R"({"src_vocab_size": 7, "tgt_vocab_size": 9})");
  EXPECT_EQ(e.d_model, ModelConfig{}.d_model);
  EXPECT_EQ(e.arch, ModelConfig{}.arch);
  // A config.json written before the layer variants existed: every variant at its default.
  EXPECT_FALSE(e.attention.head_dim || e.attention.v_head_dim || e.attention.qkv_bias || e.attention.out_bias || e.ffn_bias || e.norm_bias || e.attention.attn_scale);
  EXPECT_TRUE(e.bias);
  EXPECT_FALSE(e.share_layers);
  EXPECT_EQ(e.drop_path, 0.0f);
  EXPECT_EQ(e.positional, std::nullopt);  // the architecture's: sinusoidal
  EXPECT_EQ(e.positional_value(), Positional::SINUSOIDAL);
  EXPECT_EQ(e.layer_options().attention.head_dim, std::nullopt);
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
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "head_dim": 0})", "head_dim");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "v_head_dim": -2})", "v_head_dim");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "attn_scale": 0})", "attn_scale");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "drop_path": 1})", "drop_path");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "drop_path": -0.1})", "drop_path");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "qkv_bias": 1})", "qkv_bias");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "positional": "rope"})", "rope");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "positional": "learned", "max_len": 0})",
                      "learned position table");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "norm_type": "rms_norm", "norm_bias": true})",
                      "norm_bias");
  expect_config_error(R"({"src_vocab_size": 7, "tgt_vocab_size": 9, "norm_type": "batch_norm"})", "batch_norm");
  expect_config_error("[1, 2]", "object");
  expect_config_error("{", "JSON");
}

}  // namespace
}  // namespace tfm
