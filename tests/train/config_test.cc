// tests/train/config_test.cc — TrainConfig: JSON round trip, validation, fields set from their
// command-line text, and the task preset.
#include "tfm/train/config.h"

#include <gtest/gtest.h>

#include "tfm/models/model.h"
#include "train/step.h"

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

// share_embeddings: an encoder–decoder first (joint_vocab cannot make one), then one vocabulary — joint_vocab's, or a
// task's (its two sides have one already).
TEST(TrainConfig, ShareEmbeddingsNamesWhatItNeedsFirst) {
  const auto error_of = [](const TrainConfig& c) {
    try {
      c.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  TrainConfig c = task_preset(data::Task::REVERSE, Arch::SEQ2SEQ);
  c.out_dir = "/tmp/x";
  c.model.share_embeddings = true;
  EXPECT_EQ(error_of(c), "");
  c = task_preset(data::Task::REVERSE, Arch::ENCODER);
  c.out_dir = "/tmp/x";
  c.model.share_embeddings = true;
  EXPECT_EQ(error_of(c),
            "train config: share_embeddings needs an encoder–decoder (arch seq2seq: the encoder reads "
            "the decoder's embedding table)");
  TrainConfig pairs;  // TSV pairs: joint_vocab
  pairs.out_dir = "/tmp/x";
  pairs.train_path = "t.tsv";
  pairs.valid_path = "v.tsv";
  pairs.model.arch = Arch::SEQ2SEQ;
  pairs.model.share_embeddings = true;
  EXPECT_EQ(
      error_of(pairs),
      "train config: share_embeddings needs joint_vocab (one vocabulary, so one embedding table, for both sides)");
  pairs.joint_vocab = true;
  EXPECT_EQ(error_of(pairs), "");
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
  expect_error("src_tokens", "word", "train config: 'src_tokens': unknown tokenization 'word' (expected char, space, byte, spm or gpt2-bpe)");
  expect_error("task", "rot13", "train config: unknown task 'rot13' (expected reverse, copy or sort)");
  expect_error("d_modle", "8", "train config: unknown key 'd_modle'");
  // A value a float cannot hold, or that JSON could not save in the run's config.json (inf, nan).
  expect_error("weight_decay", "1e39",
               "train config: weight_decay must be a finite number within float's range, got '1e39'");
  expect_error("clip_norm", "inf", "train config: clip_norm must be a finite number within float's range, got 'inf'");
  expect_error("lr", "nan", "train config: lr must be a finite number within float's range, got 'nan'");
  expect_error("lr", "1e-50", "train config: lr must be a finite number within float's range, got '1e-50'");
  EXPECT_EQ(c.model.d_model, 32);  // a refused value changes nothing
}

// The value of a train option (tfm/train/options.h) is named by the option in errors, not by the key it sets: the
// user wrote --layers or --tokens, never num_encoder_layers or src_tokens. A closed set whose noun is the option's
// name says it already ("unknown task").
TEST(TrainConfig, SetFieldFromAnOptionNamesTheOption) {
  TrainConfig c;
  const auto expect_error = [&](const std::string& key, const std::string& text, const std::string& option,
                                const std::string& message) {
    try {
      set_field(c, key, text, option);
      ADD_FAILURE() << "--" << option << " " << text << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  };
  expect_error("num_encoder_layers", "x", "layers", "train config: --layers must be an integer, got 'x'");
  expect_error("num_decoder_layers", "-1.5", "decoder-layers",
               "train config: --decoder-layers must be an integer, got '-1.5'");
  expect_error("seed", "-1", "seed", "train config: --seed must be a non-negative integer, got '-1'");
  expect_error("max_steps", "99999999999999999999", "max-steps",  // an integer, too large: said so
               "train config: --max-steps must be an integer in range, got '99999999999999999999'");
  expect_error("lr", "inf", "lr", "train config: --lr must be a finite number within float's range, got 'inf'");
  expect_error("weight_decay", "-1e-46", "weight-decay",  // float would make it 0, not the value given
               "train config: --weight-decay must be a finite number within float's range, got '-1e-46'");
  expect_error("norm_first", "yes", "norm-first", "train config: --norm-first must be true or false, got 'yes'");
  expect_error(
      "src_tokens", "wordpiece", "tokens",
      "train config: --tokens: unknown tokenization 'wordpiece' (expected char, space, byte, spm or gpt2-bpe)");
  expect_error("spm_type", "word", "spm-type",
               "train config: --spm-type: unknown spm_type 'word' (expected unigram or bpe)");
  expect_error("task", "rot13", "task", "train config: unknown task 'rot13' (expected reverse, copy or sort)");
  EXPECT_EQ(c.model.num_encoder_layers, TrainConfig{}.model.num_encoder_layers);  // a refused value changes nothing
  set_field(c, "num_decoder_layers", "3", "layers");
  EXPECT_EQ(c.model.num_decoder_layers, 3);
}

// fuzz_train_config found it: a JSON number beyond float's range became inf in a float field, passed the
// checks that only ask for ≥ 0, and was written back as null, which the run's resume could not read.
TEST(TrainConfig, JsonNumberBeyondFloatIsRefusedNamingTheKey) {
  for (const char* key : {"weight_decay", "clip_norm", "lr"}) {
    const std::string text = std::string(R"({"task": "reverse", "out_dir": "r", ")") + key + R"(": -1e39})";
    try {
      TrainConfig::from_json(text);
      ADD_FAILURE() << text << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("train config: '") + key +
                    "' must be a number of magnitude at most 3.4028234663852886e+38, got -1e+39");
    }
  }
  try {
    TrainConfig::from_json(R"({"model": {"layer_norm_eps": 1e300}})");
    ADD_FAILURE() << "layer_norm_eps 1e300 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("layer_norm_eps"), std::string::npos) << e.what();
  }
  try {
    TrainConfig::from_json(R"({"task": "reverse", "out_dir": "r", "lr": 1e-50})");
    ADD_FAILURE() << "lr 1e-50 was accepted (as 0)";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "train config: 'lr' must be 0 or of magnitude at least 1.401298464324817e-45, got 1e-50");
  }
  TrainConfig c = task_preset(data::Task::REVERSE, Arch::ENCODER);  // the largest float is kept as it is
  c.out_dir = "r";
  c.weight_decay = std::numeric_limits<float>::max();
  EXPECT_EQ(TrainConfig::from_json(c.to_json()).to_json(), c.to_json());
  c.weight_decay = std::numeric_limits<float>::denorm_min();  // and the least
  EXPECT_EQ(TrainConfig::from_json(c.to_json()).to_json(), c.to_json());
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
  EXPECT_EQ(m.positional_value(), Positional::SINUSOIDAL);  // absent: the architecture's, as before
  EXPECT_EQ(m.with_arch_defaults().to_json(), ModelConfig::from_json(m.with_arch_defaults().to_json()).to_json());
  ModelConfig s = m;
  s.arch = Arch::SEQ2SEQ;
  EXPECT_TRUE(s.scales_embeddings());
  // Explicit values keep their meaning under any architecture: a saved decoder config with the encoder's
  // choices stays post-norm, relu, sinusoidal, untied.
  s.arch = Arch::DECODER;
  EXPECT_FALSE(s.norm_first_value());
  EXPECT_EQ(s.activation_value(), Activation::RELU);
  EXPECT_FALSE(s.ties_embeddings());
  EXPECT_EQ(c.decay_params_value(), DecayParams::ALL);  // absent in old run directories
  EXPECT_EQ(c.beta1, 0.9f);
  EXPECT_EQ(c.beta2, 0.999f);
  EXPECT_EQ(c.min_lr, 0.0f);
}

// The decoder architecture's defaults (ModelConfig's table) and its training defaults; each can be set.
TEST(TrainConfig, DecoderArchDefaultsAndOptimizerFields) {
  TrainConfig c;
  set_field(c, "arch", "decoder");
  EXPECT_EQ(c.model.arch, Arch::DECODER);
  EXPECT_TRUE(c.model.norm_first_value());
  EXPECT_EQ(c.model.activation_value(), Activation::GELU);
  EXPECT_EQ(c.model.positional_value(), Positional::LEARNED);
  EXPECT_TRUE(c.model.ties_embeddings());
  EXPECT_FALSE(c.model.scales_embeddings());
  EXPECT_EQ(c.decay_params_value(), DecayParams::MATRICES);
  const ModelConfig r = c.model.with_arch_defaults();
  EXPECT_EQ(r.norm_first, true);
  EXPECT_EQ(r.tie_embeddings, true);
  EXPECT_EQ(r.positional, Positional::LEARNED);
  // Given values win, in any order with --arch.
  TrainConfig d;
  set_field(d, "norm_first", "false");
  set_field(d, "tie_embeddings", "false");
  set_field(d, "activation", "relu");
  set_field(d, "arch", "decoder");
  set_field(d, "decay_params", "all");
  set_field(d, "beta1", "0.85");
  set_field(d, "beta2", "0.99");
  set_field(d, "min_lr", "1e-4");
  EXPECT_FALSE(d.model.norm_first_value());
  EXPECT_FALSE(d.model.ties_embeddings());
  EXPECT_EQ(d.model.activation_value(), Activation::RELU);
  EXPECT_EQ(d.decay_params_value(), DecayParams::ALL);
  EXPECT_FLOAT_EQ(d.beta1, 0.85f);
  EXPECT_FLOAT_EQ(d.beta2, 0.99f);
  EXPECT_FLOAT_EQ(d.min_lr, 1e-4f);
  EXPECT_EQ(field_text(d, "decay_params"), "all");
  EXPECT_EQ(field_text(TrainConfig{}, "decay_params"), "");  // unset: by architecture
  d.out_dir = "/tmp/x";
  d.task = data::Task::REVERSE;
  const TrainConfig back = TrainConfig::from_json(d.to_json());
  EXPECT_EQ(back.to_json(), d.to_json());
  EXPECT_EQ(back.decay_params, DecayParams::ALL);
  EXPECT_NO_THROW(d.validate());
  // Validation names the field.
  const auto expect_invalid = [&](auto change, const std::string& key) {
    TrainConfig bad = d;
    change(bad);
    try {
      bad.validate();
      ADD_FAILURE() << key << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  expect_invalid([](TrainConfig& t) { t.beta1 = 1.0f; }, "train config: beta1 must be in [0, 1), got 1");
  expect_invalid([](TrainConfig& t) { t.beta2 = -0.1f; }, "beta2 must be in [0, 1), got -0.1");
  expect_invalid([](TrainConfig& t) { t.min_lr = 1.0f; }, "min_lr must be in [0, lr], got 1 (lr 0.001)");  // above lr
  // Each range check names its one key and the value given (as typed: %g, no float rounding noise).
  expect_invalid([](TrainConfig& t) { t.max_steps = -5; }, "train config: max_steps must be ≥ 0, got -5");
  expect_invalid([](TrainConfig& t) { t.epochs = -1; }, "train config: epochs must be ≥ 0, got -1");
  expect_invalid([](TrainConfig& t) { t.time_budget = -2; }, "time_budget must be ≥ 0 seconds, got -2");
  expect_invalid([](TrainConfig& t) { t.lr = -1; }, "lr must be a positive number, got -1");
  expect_invalid([](TrainConfig& t) { t.label_smoothing = 1.5f; }, "label_smoothing must be in [0, 1), got 1.5");
  expect_invalid([](TrainConfig& t) { t.clip_norm = -1; }, "clip_norm must be ≥ 0 (0: no clipping), got -1");
  expect_invalid([](TrainConfig& t) { t.batch.batch_size = 0; }, "batch_size must be ≥ 1 (or batch_tokens ≥ 1), got 0");
  expect_invalid([](TrainConfig& t) { t.warmup = -1; }, "warmup must be ≥ 0, got -1");
  expect_invalid([](TrainConfig& t) { t.eval_every = -1; }, "eval_every must be ≥ 0, got -1");
  expect_invalid([](TrainConfig& t) { t.max_tokens = 0; }, "max_tokens must be ≥ 1, got 0");
  expect_invalid([](TrainConfig& t) { t.ema = 1.5f; }, "ema (--ema) must be a decay in (0, 1), e.g. 0.999, got 1.5");
  expect_invalid([](TrainConfig& t) { t.model.arch = Arch::ENCODER; t.model.tie_embeddings = true; }, "tie_embeddings");
  EXPECT_THROW(set_field(d, "decay_params", "biases"), std::invalid_argument);
  EXPECT_THROW(TrainConfig::from_json(R"({"decay_params": "some"})"), std::invalid_argument);
  // A language model needs only its (target) vocabulary.
  ModelConfig lm = c.model;
  lm.tgt_vocab_size = 30;
  EXPECT_NO_THROW(lm.validate());
  lm.tgt_vocab_size = 0;
  lm.src_vocab_size = 30;
  EXPECT_THROW(lm.validate(), std::invalid_argument);
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

// nanoGPT's CPU "baby" recipe: the values of its config and README command line, and a valid run once
// the text is given.
TEST(TrainConfig, NanogptBabyPresetIsNanogptsCpuRecipe) {
  TrainConfig p = preset_config(Preset::NANOGPT_BABY);
  EXPECT_EQ(p.model.arch, Arch::DECODER);
  EXPECT_EQ(p.tgt_tokens, data::Tokenization::CHAR);
  EXPECT_EQ(p.model.num_decoder_layers, 4);  // the language model's stack is its decoder
  EXPECT_EQ(p.model.nhead, 4);
  EXPECT_EQ(p.model.d_model, 128);
  EXPECT_EQ(p.model.dim_feedforward, 4 * 128);
  EXPECT_EQ(p.model.dropout, 0.0f);
  EXPECT_FALSE(p.model.bias);
  EXPECT_EQ(p.block_size, 64);
  EXPECT_EQ(p.batch.batch_size, 12);
  EXPECT_EQ(p.max_steps, 2000);
  EXPECT_EQ(p.warmup, 100);
  EXPECT_EQ(p.optimizer, OptimizerKind::ADAMW);
  EXPECT_FLOAT_EQ(p.lr, 1e-3f);
  EXPECT_FLOAT_EQ(p.min_lr, 1e-4f);
  EXPECT_FLOAT_EQ(p.beta1, 0.9f);
  EXPECT_FLOAT_EQ(p.beta2, 0.99f);
  EXPECT_FLOAT_EQ(p.weight_decay, 0.1f);
  EXPECT_EQ(p.decay_params_value(), DecayParams::MATRICES);
  EXPECT_FLOAT_EQ(p.clip_norm, 1.0f);
  EXPECT_EQ(p.label_smoothing, 0.0f);
  EXPECT_EQ(enum_from_name<Preset>("nanogpt-baby"), Preset::NANOGPT_BABY);
  p.text_path = "t.txt";
  p.out_dir = "run";
  EXPECT_NO_THROW(p.validate());
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

// The run's optimizer (make_optimizer) carries the config's betas, and weight decay reaches exactly
// the parameters decay_params selects: one step from the same gradients equals Adam built by hand
// with those flags, bitwise, and differs from decaying every parameter on the 1-dim ones only.
TEST(TrainConfig, MakeOptimizerAppliesBetasAndDecayParams) {
  ModelConfig mc;
  mc.arch = Arch::DECODER;
  mc.tgt_vocab_size = mc.src_vocab_size = 11;
  mc.d_model = 8;
  mc.nhead = 2;
  mc.num_decoder_layers = 1;
  mc.dim_feedforward = 16;
  mc.max_len = 8;
  TrainConfig c;
  c.model = mc;
  c.optimizer = OptimizerKind::ADAMW;
  c.lr = 0.05f;
  c.weight_decay = 0.5f;
  c.beta1 = 0.5f;
  c.beta2 = 0.9f;
  // Three models from one seed: the run's optimizer, Adam by hand with the matrices' flags, and every
  // parameter decayed.
  auto stepped = [&](auto make) {
    Generator g{3, 0};
    Model m(mc, g);
    auto opt = make(m);
    for (auto& [k, p] : m.named_parameters())
      for (int64_t i = 0; i < p.numel(); ++i) p.data()[i] += 0.1f;  // no zero bias: decay shows everywhere
    for (float gv : {0.25f, 1.0f}) {  // two steps: the first Adam step is ±lr whatever the betas
      for (auto& [k, p] : m.named_parameters()) p.mutable_grad() = Tensor::full(p.shape(), gv);
      opt->step();
    }
    return m.named_parameters();
  };
  const NamedTensors run = stepped([&](Model& m) { return make_optimizer(c, m); });
  const NamedTensors hand = stepped([&](Model& m) -> std::unique_ptr<Optimizer> {
    std::vector<bool> flags;
    for (const auto& [k, p] : m.named_parameters()) flags.push_back(p.dim() >= 2);
    return std::make_unique<Adam>(m.named_parameters(), 0.05f, 0.5f, 0.9f, 1e-8f, 0.5f, true, flags);
  });
  TrainConfig all = c;
  all.decay_params = DecayParams::ALL;
  const NamedTensors every = stepped([&](Model& m) { return make_optimizer(all, m); });
  int differ = 0;
  for (const auto& [k, p] : run) {
    const Tensor& h = hand.at(k);
    for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(p.data()[i], h.data()[i]) << k;
    bool same = true;
    for (int64_t i = 0; i < p.numel(); ++i) same = same && p.data()[i] == every.at(k).data()[i];
    EXPECT_EQ(same, p.dim() >= 2) << k;  // only the 1-dim parameters (biases, norms) escape the decay
    differ += same ? 0 : 1;
  }
  EXPECT_GT(differ, 0);
  // Other betas change the step: the betas are the optimizer's.
  TrainConfig torch_betas = c;
  torch_betas.beta1 = 0.9f;
  torch_betas.beta2 = 0.999f;
  const NamedTensors other = stepped([&](Model& m) { return make_optimizer(torch_betas, m); });
  EXPECT_NE(other.at("embedding.weight").data()[0], run.at("embedding.weight").data()[0]);
}

}  // namespace
}  // namespace tfm::train
