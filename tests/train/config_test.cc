// tests/train/config_test.cc — TrainConfig: JSON round trip, validation, fields set from their
// command-line text, and the task preset.
#include "tfm/train/config.h"

#include <gtest/gtest.h>

namespace tfm::train {
namespace {

TEST(TrainConfig, JsonRoundTripAndValidation) {
  TrainConfig c = task_preset(data::Task::REVERSE, Arch::ENCODER);
  c.out_dir = "/tmp/x";
  c.optimizer = OptimizerKind::ADAMW;
  c.label_smoothing = 0.1f;
  const TrainConfig d = TrainConfig::from_json(c.to_json());
  EXPECT_EQ(d.to_json(), c.to_json());
  // An optimizer outside the closed set cannot be stored: it is refused where it is read.
  EXPECT_THROW(TrainConfig::from_json(R"({"optimizer": "sgd"})"), std::invalid_argument);
  TrainConfig bad = c;
  EXPECT_THROW(set_field(bad, "optimizer", "sgd"), std::invalid_argument);
  bad = c;
  bad.task.reset();
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  EXPECT_THROW(TrainConfig::from_json("{\"lr\": \"fast\"}"), std::invalid_argument);
}

TEST(TrainConfig, SetFieldParsesCommandLineTextAndNamesTheKey) {
  TrainConfig c;
  set_field(c, "lr", "3e-4");
  set_field(c, "d_model", "32");
  set_field(c, "norm_first", "true");
  set_field(c, "activation", "gelu");
  set_field(c, "schedule", "inverse_sqrt");
  set_field(c, "task", "sort");
  set_field(c, "seed", "18446744073709551615");
  EXPECT_FLOAT_EQ(c.lr, 3e-4f);
  EXPECT_EQ(c.model.d_model, 32);
  EXPECT_EQ(c.model.norm_first, true);
  EXPECT_EQ(c.model.activation, Activation::GELU);
  EXPECT_EQ(c.schedule, Schedule::INVERSE_SQRT);
  EXPECT_EQ(c.task, data::Task::SORT);
  EXPECT_EQ(c.seed, 18446744073709551615ull);
  EXPECT_EQ(field_text(c, "lr"), "0.0003");
  EXPECT_EQ(field_text(c, "activation"), "gelu");
  EXPECT_EQ(field_text(TrainConfig{}, "task"), "");  // unset
  const auto expect_error = [&](const std::string& key, const std::string& text, const std::string& message) {
    try {
      set_field(c, key, text);
      ADD_FAILURE() << key << " = " << text << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  };
  expect_error("d_model", "32.5", "train config: d_model must be an integer, got '32.5'");
  expect_error("lr", "fast", "train config: lr must be a number, got 'fast'");
  expect_error("norm_first", "yes", "train config: norm_first must be true or false, got 'yes'");
  expect_error("seed", "-1", "train config: seed must be a non-negative integer, got '-1'");
  expect_error("pad_id", "4294967296", "train config: pad_id must be an integer in range, got '4294967296'");
  expect_error("activation", "tanh",
               "train config: unknown activation 'tanh' (expected relu, gelu, gelu_tanh, glu, geglu or swiglu)");
  expect_error("src_tokens", "word", "train config: src_tokens: unknown tokenization 'word' (expected char, space or byte)");
  expect_error("task", "rot13", "train config: unknown task 'rot13' (expected reverse, copy or sort)");
  expect_error("d_modle", "8", "train config: unknown key 'd_modle'");
  EXPECT_EQ(c.model.d_model, 32);  // a refused value changes nothing
}

// The run directories written before the typed configs: keys in byte order, "task": "" for TSV data,
// no norm_type / positional / scale_embeddings. They keep loading, with the architecture's embedding
// scale.
TEST(TrainConfig, ReadsTheRunDirectoryFormatItWroteBefore) {
  const TrainConfig c = TrainConfig::from_json(R"({"batch_size": 128, "batch_tokens": 0, "clip_norm": 1.0,
      "epochs": 10, "eval_every": 0, "label_smoothing": 0.0, "lr": 0.0010000000474974513, "max_steps": 0,
      "max_tokens": 256, "optimizer": "adam", "out_dir": "runs/x", "schedule": "auto", "seed": 0,
      "skip_nonfinite": false, "src_tokens": "char", "strict": false, "task": "", "task_train_size": 20000,
      "task_valid_size": 1000, "tgt_tokens": "space", "time_budget": 0.0, "train_path": "a.tsv",
      "valid_path": "b.tsv", "warmup": 100})");
  EXPECT_FALSE(c.task.has_value());
  EXPECT_EQ(c.tgt_tokens, data::Tokenization::SPACE);
  EXPECT_EQ(c.epochs, 10);
  const ModelConfig m = ModelConfig::from_json(R"({"activation": "relu", "arch": "encoder", "bos_id": 20,
      "d_model": 64, "dim_feedforward": 256, "dropout": 0.0, "eos_id": 21, "layer_norm_eps": 1e-05,
      "max_len": 512, "nhead": 4, "norm_first": false, "num_decoder_layers": 2, "num_encoder_layers": 2,
      "pad_id": 0, "src_vocab_size": 22, "tgt_vocab_size": 22, "tie_embeddings": false})");
  EXPECT_EQ(m.arch, Arch::ENCODER);
  EXPECT_FALSE(m.scales_embeddings());
  ModelConfig s = m;
  s.arch = Arch::SEQ2SEQ;
  EXPECT_TRUE(s.scales_embeddings());
}

TEST(TrainConfig, TaskPresetChangesOnlyWhatTheTasksNeed) {
  const TrainConfig base;
  const TrainConfig p = task_preset(data::Task::REVERSE, Arch::SEQ2SEQ);
  EXPECT_EQ(p.task, data::Task::REVERSE);
  EXPECT_EQ(p.model.arch, Arch::SEQ2SEQ);
  EXPECT_EQ(p.max_steps, 1600);
  EXPECT_FLOAT_EQ(p.lr, 2e-3f);
  EXPECT_EQ(p.model.dropout, 0.0f);
  EXPECT_EQ(p.batch.batch_size, 256);
  EXPECT_EQ(p.model.d_model, base.model.d_model);
  EXPECT_EQ(p.warmup, base.warmup);
  EXPECT_EQ(p.clip_norm, base.clip_norm);
}

// init_from is a saved field (a resumed run knows where its weights came from), and the keys it fixes
// are the model's, its tokenizations, and none of the training options.
TEST(TrainConfig, InitFromIsSavedAndFixesTheModelFields) {
  TrainConfig c;
  set_field(c, "init_from", "runs/nb4");
  EXPECT_EQ(TrainConfig::from_json(c.to_json()).init_from, "runs/nb4");
  EXPECT_EQ(TrainConfig::from_json("{}").init_from, "");
  for (const char* k : {"d_model", "arch", "head_dim", "positional", "scale_embeddings", "max_len", "pad_id", "norm_first",
                        "share_layers", "src_tokens", "tgt_tokens"})
    EXPECT_TRUE(fixed_by_init_from(k)) << k;
  for (const char* k : {"dropout", "drop_path", "lr", "max_steps", "batch_size", "init_from", "out_dir", "task", "seed"})
    EXPECT_FALSE(fixed_by_init_from(k)) << k;
}

}  // namespace
}  // namespace tfm::train
