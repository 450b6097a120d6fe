// src/train/config.cc — TrainConfig: JSON through fields(), validation, the task preset.
#include "tfm/train/config.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "json_fields.h"

namespace tfm::train {
namespace {

// ", got <v>" of a range check's message, a real as it was typed (number_text).
std::string got(int64_t v) { return ", got " + std::to_string(v); }
std::string got(double v) { return ", got " + number_text(v); }

}  // namespace

std::string TrainConfig::to_json(bool with_model) const {
  JsonWriter w;
  fields(*this, w);
  if (with_model) w.j["model"] = ordered_json::parse(model.to_json());
  return w.j.dump(2);
}

TrainConfig TrainConfig::from_json(const std::string& text) {
  ordered_json j = parse_json(text, "train config");
  if (!j.is_object()) throw std::invalid_argument("train config: expected a JSON object, got " + j.dump());
  // Run directories write "task": "" for TSV data; "task" absent or null says the same.
  if (j.contains("task") && j["task"] == "") j.erase("task");
  TrainConfig c;
  JsonReader r(j, "train config");
  fields(c, r);
  r.ignore("model");
  r.finish();
  // The model may be a template whose vocabulary sizes the trainer fills in from the data.
  if (j.contains("model")) c.model = ModelConfig::from_json(j.at("model").dump(), /*validate_sizes=*/false);
  return c;
}

TrainConfig TrainConfig::with_run_defaults() const {
  TrainConfig c = *this;
  // char (the default) becomes space; spm, byte and gpt2 stay, for validate() to refuse by name.
  if (c.task)
    for (data::Tokenization* t : {&c.src_tokens, &c.tgt_tokens})
      if (*t == data::Tokenization::CHAR) *t = data::Tokenization::SPACE;
  if (c.epochs == 0 && c.max_steps == 0 && c.time_budget == 0) c.epochs = kDefaultEpochs;
  return c;
}

void TrainConfig::validate() const {
  const auto bad = [](const std::string& field, const std::string& why) {
    throw std::invalid_argument("train config: " + field + " " + why);
  };
  // With init_from the trainer checks the directory's model; the trainer also refuses arch decoder
  // without text (a configuration may name the decoder before its data).
  if (init_from.empty() && text() && model.family().data != DataKind::TEXT)
    bad("arch", "must be decoder for text data (a language model trains on text), got " +
                    std::string(enum_name(model.arch)));
  if (text()) {
    if (task || !train_path.empty() || !valid_path.empty())
      bad("text_path", "is a language model's data; it excludes a task and TSV files");
    if (tgt_tokens == data::Tokenization::SPACE)
      bad("tgt_tokens", "must be char or byte for text data (not space), or spm or gpt2-bpe for subwords");
    if (src_tokens != tgt_tokens) bad("src_tokens", "must equal tgt_tokens for text data (one vocabulary)");
    if (block_size < 1) bad("block_size", "must be ≥ 1" + got(block_size));
    if (valid_text_path.empty() && !(valid_fraction > 0 && valid_fraction < 1))
      bad("valid_fraction", "must be in (0, 1) when there is no validation text" + got(valid_fraction));
    if (batch.batch_tokens != 0) bad("batch_tokens", "does not apply to text data (a batch is batch_size windows)");
  } else {
    if (!valid_text_path.empty()) bad("valid_text_path", "needs text_path");
    if (!token_cache.empty()) bad("token_cache", "needs text_path");
    if (!task && (train_path.empty() || valid_path.empty()))
      bad("data", "needs a task, both a training and a validation file, or a text");
  }
  validate_subwords();
  if (!task && (src_tokens == data::Tokenization::BYTE) != (tgt_tokens == data::Tokenization::BYTE))
    bad("src_tokens/tgt_tokens", "byte on one side needs byte on the other (the two vocabularies share the <pad> id)");
  if (max_tokens < 1) bad("max_tokens", "must be ≥ 1" + got(max_tokens));
  if (task_train_size < 1) bad("task_train_size", "must be ≥ 1" + got(task_train_size));
  if (task_valid_size < 1) bad("task_valid_size", "must be ≥ 1" + got(task_valid_size));
  if (epochs < 0) bad("epochs", "must be ≥ 0" + got(epochs));
  if (max_steps < 0) bad("max_steps", "must be ≥ 0" + got(max_steps));
  if (!(time_budget >= 0)) bad("time_budget", "must be ≥ 0 seconds" + got(time_budget));
  if (!(lr > 0) || !std::isfinite(lr)) bad("lr", "must be a positive number" + got(lr));
  if (warmup < 0) bad("warmup", "must be ≥ 0" + got(warmup));
  if (!(weight_decay >= 0)) bad("weight_decay", "must be ≥ 0" + got(weight_decay));
  if (decay_params) enum_name(*decay_params);
  if (!(beta1 >= 0 && beta1 < 1)) bad("beta1", "must be in [0, 1)" + got(beta1));
  if (!(beta2 >= 0 && beta2 < 1)) bad("beta2", "must be in [0, 1)" + got(beta2));
  if (!(min_lr >= 0 && min_lr <= lr))
    bad("min_lr", "must be in [0, lr]" + got(min_lr) + " (lr" + got(lr).substr(5) + ")");
  if (!(label_smoothing >= 0 && label_smoothing < 1))
    bad("label_smoothing", "must be in [0, 1)" + got(label_smoothing));
  if (!(clip_norm >= 0)) bad("clip_norm", "must be ≥ 0 (0: no clipping)" + got(clip_norm));
  if (batch.batch_tokens < 0)
    bad("batch_tokens", "must be ≥ 0 (0: batches of batch_size examples)" + got(batch.batch_tokens));
  if (batch.batch_tokens == 0 && batch.batch_size < 1)
    bad("batch_size", "must be ≥ 1 (or batch_tokens ≥ 1)" + got(batch.batch_size));
  if (eval_every < 0) bad("eval_every", "must be ≥ 0" + got(eval_every));
  if (patience < 0) bad("patience", "must be ≥ 0 (0: no early stopping)" + got(patience));
  if (ema && !(*ema > 0 && *ema < 1)) bad("ema", "(--ema) must be a decay in (0, 1), e.g. 0.999" + got(*ema));
  if (dtype == Precision::INT8)
    bad("dtype", "(--dtype) int8 is for inference (eval, translate, generate, forward, bench --mode infer); "
                 "train in f32 or bf16");
  if (out_dir.empty()) bad("out_dir", "is required");
  if (grad_shards < 0) bad("grad_shards", "must be ≥ 0 (0: one part per process)" + got(grad_shards));
  model.validate(/*check_sizes=*/false);
}

void TrainConfig::validate_subwords() const {
  const auto bad = [](const std::string& field, const std::string& why) {
    throw std::invalid_argument("train config: " + field + " " + why);
  };
  using data::Tokenization;
  if (spm_max_lines < 1) bad("spm_max_lines", "must be ≥ 1" + got(spm_max_lines));
  if (src_vocab_size < 0) bad("src_vocab_size", "must be ≥ 0" + got(src_vocab_size));
  if (tgt_vocab_size < 0) bad("tgt_vocab_size", "must be ≥ 0" + got(tgt_vocab_size));
  if (vocab_size < 0) bad("vocab_size", "must be ≥ 0" + got(vocab_size));
  const bool src_spm = src_tokens == Tokenization::SPM, tgt_spm = tgt_tokens == Tokenization::SPM;
  const bool one = text() || joint_vocab;  // one vocabulary: vocab_size / spm_model
  // A run from a model directory uses its tokenizers (its config then says spm with no sizes).
  const bool from_dir = !init_from.empty();
  // A task's tokens are numbers, read space-separated (Run::Run sets char to space): subwords and bytes do not apply.
  for (const Tokenization t : {src_tokens, tgt_tokens})
    if (task && t != Tokenization::CHAR && t != Tokenization::SPACE)
      bad("src_tokens/tgt_tokens", std::string(enum_name(t)) + " does not apply to a built-in task (its tokens are numbers)");
  if (from_dir && (src_vocab_size || tgt_vocab_size || vocab_size || !src_spm_model.empty() || !tgt_spm_model.empty() ||
                   !spm_model.empty() || joint_vocab))
    bad("init_from", "takes the vocabularies and tokenizers from the model directory; the subword fields must stay unset");
  if (joint_vocab) {
    if (task || text()) bad("joint_vocab", "applies to TSV pairs (a task or a language model has one vocabulary already)");
    if (src_tokens != tgt_tokens) bad("joint_vocab", "needs src_tokens equal to tgt_tokens");
  }
  // Each side's own fields apply to a TSV spm side without joint_vocab; the shared ones otherwise.
  const auto side = [&](bool spm, int64_t size, const std::string& model, const char* size_key, const char* model_key,
                        const char* tokens_key) {
    const bool own = spm && !one;
    if (!own && size != 0)
      bad(size_key, one ? "is for one side; with " + std::string(text() ? "text data" : "joint_vocab") + " give vocab_size"
                        : "needs " + std::string(tokens_key) + " spm");
    if (!own && !model.empty())
      bad(model_key, one ? "is for one side; with " + std::string(text() ? "text data" : "joint_vocab") + " give spm_model"
                         : "needs " + std::string(tokens_key) + " spm");
    if (own && !from_dir && size == 0 && model.empty() && (vocab_size > 0 || !spm_model.empty()))
      bad(vocab_size > 0 ? "vocab_size" : "spm_model",
          "is the one vocabulary of text data or joint_vocab: TSV pairs without joint_vocab take one per side (" +
              std::string(size_key) + " or " + model_key + ", and the target's), or give joint_vocab for one");
    if (own && !from_dir && (size > 0) == !model.empty())
      bad(tokens_key, "spm needs exactly one of " + std::string(size_key) + " (train a model) and " + model_key +
                          " (a .model file)");
  };
  side(src_spm, src_vocab_size, src_spm_model, "src_vocab_size", "src_spm_model", "src_tokens");
  side(tgt_spm, tgt_vocab_size, tgt_spm_model, "tgt_vocab_size", "tgt_spm_model", "tgt_tokens");
  const bool shared_spm = one && tgt_spm;
  if (shared_spm && !from_dir && (vocab_size > 0) == !spm_model.empty())
    bad("vocab_size/spm_model", std::string("exactly one is needed with spm tokens for ") +
                                    (text() ? "text data" : "joint_vocab") + " (train a model, or a .model file)");
  if (model.share_embeddings && init_from.empty()) {  // the architecture first: joint_vocab would not help
    const ModelFamily& f = model.family();
    if (!(f.encoder_layers && f.decoder_layers))
      bad("share_embeddings",
          "needs an encoder–decoder (arch seq2seq: the encoder reads the decoder's embedding table)");
    if (!joint_vocab && !task)  // a task's two sides have one vocabulary already
      bad("share_embeddings", "needs joint_vocab (one vocabulary, so one embedding table, for both sides)");
  }
  if (!shared_spm && (vocab_size != 0 || !spm_model.empty()))
    bad(vocab_size != 0 ? "vocab_size" : "spm_model", "needs spm tokens and text data or joint_vocab");
  // GPT-2's BPE: a language model's tokenizer (its vocabulary has no <pad>, which TSV pairs need).
  const bool bpe = tgt_tokens == Tokenization::GPT2_BPE || src_tokens == Tokenization::GPT2_BPE;
  if (bpe && !text())
    bad("src_tokens/tgt_tokens", "gpt2-bpe applies to text data (a language model): TSV pairs and tasks are padded to "
                                 "one length, and GPT-2's vocabulary has no <pad> token");
  if (bpe && !from_dir && (bpe_vocab.empty() || bpe_merges.empty()))
    bad("bpe_vocab/bpe_merges", "gpt2-bpe needs both files (GPT-2's encoder.json or vocab.json, and vocab.bpe or merges.txt)");
  if (from_dir && (!bpe_vocab.empty() || !bpe_merges.empty()))
    bad("init_from", "takes the tokenizer from the model directory; bpe_vocab and bpe_merges must stay unset");
  if (!bpe && (!bpe_vocab.empty() || !bpe_merges.empty()))
    bad(!bpe_vocab.empty() ? "bpe_vocab" : "bpe_merges", "needs gpt2-bpe tokens");
}

void check_out_is_not_init_from(const TrainConfig& c) {
  std::error_code ec;
  if (!c.init_from.empty() && std::filesystem::equivalent(c.init_from, c.out_dir, ec))
    throw std::invalid_argument("train config: out_dir " + c.out_dir + " is the init_from directory; " +
                                "a fine-tuning run writes into a new directory (its source stays as it is)");
}

TrainConfig task_preset(data::Task task, Arch arch) {
  TrainConfig c;
  c.task = task;
  c.model.arch = arch;
  c.max_steps = 1600;
  c.lr = 2e-3f;
  c.model.dropout = 0.0f;
  c.batch.batch_size = 256;
  return c;
}

TrainConfig preset_config(Preset preset) {
  TrainConfig c;
  switch (preset) {
    case Preset::NANOGPT_BABY:
      c.model.arch = Arch::DECODER;
      c.src_tokens = c.tgt_tokens = data::Tokenization::CHAR;
      c.model.num_decoder_layers = 4;
      c.model.nhead = 4;
      c.model.d_model = 128;
      c.model.dim_feedforward = 512;
      c.model.dropout = 0.0f;
      c.model.bias = false;
      c.block_size = 64;
      c.batch.batch_size = 12;
      c.max_steps = 2000;
      c.warmup = 100;
      c.optimizer = OptimizerKind::ADAMW;
      c.lr = 1e-3f;
      c.min_lr = 1e-4f;
      c.beta2 = 0.99f;
      c.weight_decay = 0.1f;
      c.decay_params = DecayParams::MATRICES;
      c.clip_norm = 1.0f;
      c.eval_every = 250;
      break;
  }
  return c;
}

}  // namespace tfm::train

namespace tfm::train {
namespace {

// Sets the field named `key` from its command-line text; `found` tells whether a field matched. Errors name the
// value as `option` names it (set_field).
class TextSetter {
 public:
  TextSetter(const std::string& key, const std::string& text, const std::string& option)
      : key_(key), text_(text), option_(option) {}
  template <typename T>
  void operator()(const char* key, std::optional<T>& out) {
    if (key_ != key) return;
    T v{};
    (*this)(key, v);
    out = v;
  }
  template <typename T>
  void operator()(const char* key, T& out) {
    if (key_ != key) return;
    found = true;
    if constexpr (std::is_enum_v<T>) {
      try {
        out = enum_from_name<T>(text_);
      } catch (const std::invalid_argument& e) {
        // "'src_tokens': unknown tokenization ..."; from an option "--tokens: unknown tokenization ...", and no
        // prefix where the closed set's noun is the option's name ("unknown task ...").
        const std::string prefix = option_.empty()                 ? enum_key_prefix<T>(key)
                                   : option_ == EnumNames<T>::noun ? std::string()
                                                                   : "--" + option_ + ": ";
        throw std::invalid_argument("train config: " + prefix + e.what());
      }
    } else if constexpr (std::is_same_v<T, std::string>) {
      out = text_;
    } else if constexpr (std::is_same_v<T, bool>) {
      if (text_ != "true" && text_ != "false") wrong("true or false");
      out = text_ == "true";
    } else {
      // The whole text must be the number, and it must fit the field.
      using Wide = std::conditional_t<std::is_floating_point_v<T>, double,
                                      std::conditional_t<std::is_unsigned_v<T>, unsigned long long, long long>>;
      const char* expected = std::is_floating_point_v<T> ? "a number" : "an integer";
      if (std::is_unsigned_v<T> && !text_.empty() && text_[0] == '-') wrong("a non-negative integer");
      size_t used = 0;
      Wide v{};
      try {
        if constexpr (std::is_floating_point_v<T>) v = std::stod(text_, &used);
        else if constexpr (std::is_unsigned_v<T>) v = std::stoull(text_, &used);
        else v = std::stoll(text_, &used);
      } catch (const std::out_of_range&) {  // beyond the widest type: a number, too large
        wrong(std::is_floating_point_v<T> ? "a finite number within float's range" : "an integer in range");
      } catch (const std::invalid_argument&) {  // no number
        wrong(expected);
      }
      if (used != text_.size()) wrong(expected);
      if constexpr (std::is_integral_v<T>)
        if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) wrong("an integer in range");
      // inf, nan, or beyond float (JSON could not save the run's config), or a nonzero value float would make 0
      // (1e-50: a learning rate of 0 without a word)
      if constexpr (std::is_floating_point_v<T>)
        if (!(std::abs(v) <= static_cast<Wide>(std::numeric_limits<T>::max())) || (v != 0 && static_cast<T>(v) == 0))
          wrong("a finite number within float's range");
      out = static_cast<T>(v);
    }
  }
  bool found = false;

 private:
  [[noreturn]] void wrong(const char* expected) const {
    throw std::invalid_argument("train config: " + (option_.empty() ? key_ : "--" + option_) + " must be " + expected +
                                ", got " + quote_name(text_));
  }
  const std::string& key_;
  const std::string& text_;
  const std::string& option_;
};

}  // namespace

void set_field(TrainConfig& c, const std::string& key, const std::string& text, const std::string& option) {
  TextSetter set(key, text, option);
  TrainConfig::fields(c, set);
  if (!set.found) ModelConfig::fields(c.model, set);  // a key of both is the TrainConfig's
  if (!set.found) throw std::invalid_argument("train config: unknown key " + quote_name(key));
}

std::string field_text(const TrainConfig& c, const std::string& key) {
  JsonWriter w;
  ModelConfig::fields(c.model, w);
  TrainConfig::fields(c, w);  // after the model's: a key of both is the TrainConfig's
  if (!w.j.contains(key)) throw std::invalid_argument("train config: unknown key " + quote_name(key));
  const ordered_json& v = w.j.at(key);
  if (v.is_number_float()) return number_text(v.get<double>());  // as written on a command line: 0.001
  return v.is_string() ? v.get<std::string>() : v.is_null() ? std::string() : v.dump();
}

bool fixed_by_init_from(const std::string& key) {
  if (key == "dropout" || key == "drop_path") return false;
  if (key == "src_tokens" || key == "tgt_tokens") return true;
  for (const char* k : {"src_vocab_size", "tgt_vocab_size", "vocab_size", "spm_type", "src_spm_model", "tgt_spm_model",
                        "spm_model", "joint_vocab", "spm_max_lines", "bpe_vocab", "bpe_merges"})
    if (key == k) return true;
  const ModelConfig defaults;
  JsonWriter w;
  ModelConfig::fields(defaults, w);
  return w.j.contains(key);
}

}  // namespace tfm::train
