// src/train/options.cc — the table of `tfm train`'s options and the one resolution of what was given
// (tfm/train/options.h).
//
// To add an option: its field (a member and a line in fields(), tfm/train/config.h or
// tfm/models/config.h, with its check in validate()), then one row below. Its type, choices and default
// follow from the field; the CLI and the Python package pick it up from this table.
#include "tfm/train/options.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include "quote.h"
#include "tfm/models/model_dir.h"
#include "tfm/threads.h"
#include "tfm/train/trainer.h"
#include "train/checkpoint.h"

namespace tfm::train {
namespace {

// Finds a field by key in TrainConfig's and then ModelConfig's fields() and records its type.
struct TypeOf {
  explicit TypeOf(const std::string& k) : key(k) {}

  const std::string& key;
  bool found = false;
  OptionType type = OptionType::TEXT;
  std::vector<std::string> choices;

  template <typename T>
  void operator()(const char* k, const std::optional<T>&) {
    T v{};
    (*this)(k, v);
  }
  template <typename T>
  void operator()(const char* k, const T&) {
    if (found || key != k) return;
    found = true;
    if constexpr (std::is_enum_v<T>) {
      type = OptionType::CHOICE;
      for (const auto& [value, name] : EnumNames<T>::names) {
        bool alias = false;  // only a value's first spelling is offered
        for (const auto& [v2, n2] : EnumNames<T>::names) {
          if (n2 == name) break;
          alias = alias || v2 == value;
        }
        if (!alias) choices.emplace_back(name);
      }
    } else if constexpr (std::is_same_v<T, bool>) {
      type = OptionType::FLAG;
    } else if constexpr (std::is_same_v<T, std::string>) {
      type = OptionType::TEXT;
    } else if constexpr (std::is_floating_point_v<T>) {
      type = OptionType::FLOAT;
    } else {
      type = std::is_unsigned_v<T> ? OptionType::UINT : OptionType::INT;
    }
  }
};

// A row: name, keys, group, help (and relations). Type, choices and default come from the field.
struct Row {
  const char* name;
  std::vector<std::string> keys;
  const char* group;
  std::string help;
  std::vector<std::string> needs = {}, excludes = {};
};

std::vector<TrainOption> build_table() {
  const std::vector<Row> rows = {
      // ---- data ----
      {"task",
       {"task"},
       "data",
       "built-in task (its preset: 1600 steps, --lr 2e-3, --dropout 0, --batch-size 256)",
       {},
       {"train"}},
      {"train", {"train_path"}, "data", "training pairs, one 'source<TAB>target' a line", {"valid"}, {"text"}},
      {"valid", {"valid_path"}, "data", "validation pairs (same format)", {"train"}},
      {"src-tokens", {"src_tokens"}, "data", "source tokenization"},
      {"tgt-tokens", {"tgt_tokens"}, "data", "target tokenization"},
      {"tokens",
       {"src_tokens", "tgt_tokens"},
       "data",
       "tokenization of the text (or of both TSV sides)",
       {},
       {"src-tokens", "tgt-tokens"}},
      {"strict", {"strict"}, "data", "a blank, malformed or over-long line is an error (otherwise: skip and count)"},
      {"max-tokens", {"max_tokens"}, "data", "longest accepted TSV side, in tokens"},
      {"task-train-size", {"task_train_size"}, "data", "task examples per epoch (fresh each epoch)"},
      {"text",
       {"text_path"},
       "data",
       "language model: train on this text file (UTF-8 for --tokens char)",
       {},
       {"task"}},
      {"valid-text",
       {"valid_text_path"},
       "data",
       "language model: validation text (else --valid-fraction)",
       {"text"},
       {"valid-fraction"}},
      {"valid-fraction",
       {"valid_fraction"},
       "data",
       "language model: share of --text's tokens, at its end, held out for validation",
       {"text"}},
      {"block-size", {"block_size"}, "data", "language model: context length (windows of N+1 tokens)", {"text"}},
      {"sequential",
       {"sequential"},
       "data",
       "language model: consecutive windows in order, not at random positions",
       {"text"}},
      {"token-cache",
       {"token_cache"},
       "data",
       "language model: keep the texts' token arrays in this directory, memory-mapped (big texts)",
       {"text"}},
      {"src-vocab-size", {"src_vocab_size"}, "data", "spm source side: train a SentencePiece model of N pieces on it"},
      {"tgt-vocab-size", {"tgt_vocab_size"}, "data", "spm target side: train a SentencePiece model of N pieces on it"},
      {"vocab-size",
       {"vocab_size"},
       "data",
       "spm language model or --joint-vocab: train one SentencePiece model of N pieces"},
      {"spm-type", {"spm_type"}, "data", "SentencePiece model type"},
      {"src-spm-model", {"src_spm_model"}, "data", "spm source side: use this SentencePiece .model file"},
      {"tgt-spm-model", {"tgt_spm_model"}, "data", "spm target side: use this SentencePiece .model file"},
      {"spm-model", {"spm_model"}, "data", "spm language model or --joint-vocab: use this SentencePiece .model file"},
      {"bpe-vocab", {"bpe_vocab"}, "data", "gpt2-bpe: GPT-2's vocabulary file (encoder.json or vocab.json)"},
      {"bpe-merges", {"bpe_merges"}, "data", "gpt2-bpe: GPT-2's merges file (vocab.bpe or merges.txt)"},
      {"joint-vocab",
       {"joint_vocab"},
       "data",
       "one vocabulary (one SentencePiece model with spm) for source and target"},
      {"spm-max-lines", {"spm_max_lines"}, "data", "at most N lines (evenly spaced) train a SentencePiece model"},
      // ---- how the run starts ----
      {"preset",
       {},
       "run",
       "start from a built-in recipe (train::preset_config; nanogpt-baby: nanoGPT's CPU Shakespeare-char model)",
       {"text"}},
      {"out", {"out_dir"}, "run", "output directory"},
      {"init-from",
       {"init_from"},
       "run",
       "fine-tune: start from the model, weights and vocabularies of this model directory (model options other than "
       "--dropout and --drop-path are refused)"},
      {"resume", {}, "run", "continue the run saved in DIR"},
      // ---- model ----
      {"arch", {"arch"}, "model", "model family (with --text: decoder)"},
      {"d-model", {"d_model"}, "model", "model width"},
      {"nhead", {"nhead"}, "model", "attention heads"},
      {"layers", {"num_encoder_layers", "num_decoder_layers"}, "model", "layers of each stack the model has"},
      {"encoder-layers", {"num_encoder_layers"}, "model", "encoder layers (overrides --layers; not for arch decoder)"},
      {"decoder-layers",
       {"num_decoder_layers"},
       "model",
       "decoder layers, the language model's stack (overrides --layers)"},
      {"dim-feedforward", {"dim_feedforward"}, "model", "feed-forward width"},
      {"dropout", {"dropout"}, "model", "dropout probability"},
      {"activation", {"activation"}, "model", "feed-forward activation (unset: decoder gelu, others relu)"},
      {"norm-first", {"norm_first"}, "model", "pre-norm layers (norm before attention / FFN; unset: decoder only)"},
      {"share-embeddings",
       {"share_embeddings"},
       "model",
       "seq2seq with --joint-vocab: the encoder reads the decoder's embedding (no src_embedding.weight)"},
      {"tie-embeddings",
       {"tie_embeddings"},
       "model",
       "seq2seq, decoder: share target embedding and output projection (unset: decoder only)"},
      {"head-dim", {"head_dim"}, "model", "query/key width per head (unset: d_model / nhead)"},
      {"v-head-dim", {"v_head_dim"}, "model", "value width per head (unset: the head dim)"},
      {"bias", {"bias"}, "model", "biases in every Linear, attention projection and norm of the layers"},
      {"qkv-bias", {"qkv_bias"}, "model", "attention q/k/v projection bias (unset: --bias)"},
      {"out-bias", {"out_bias"}, "model", "attention output projection bias (unset: --bias)"},
      {"ffn-bias", {"ffn_bias"}, "model", "feed-forward biases (unset: --bias)"},
      {"norm-bias", {"norm_bias"}, "model", "norm biases (unset: --bias; none with rms_norm)"},
      {"attn-scale", {"attn_scale"}, "model", "attention scores' factor (unset: 1/sqrt(head dim))"},
      {"norm-type", {"norm_type"}, "model", "norm of every layer and stack"},
      {"share-layers", {"share_layers"}, "model", "one set of layer weights used by every layer of a stack"},
      {"drop-path", {"drop_path"}, "model", "stochastic depth: probability of dropping a residual branch per sample"},
      {"positional", {"positional"}, "model", "positions (unset: decoder learned, others sinusoidal)"},
      {"scale-embeddings",
       {"scale_embeddings"},
       "model",
       "multiply embeddings by sqrt(d_model) (unset: seq2seq yes, others no)"},
      // ---- length ----
      {"epochs", {"epochs"}, "length", "passes over the training data (none of the three: 10 epochs)"},
      {"max-steps",
       {"max_steps"},
       "length",
       "optimizer steps (on --resume of a run whose time budget fixed its step count: replaces that count)"},
      {"time-budget",
       {"time_budget"},
       "length",
       "seconds of training, evaluation included; with --schedule cosine or auto the run fits its step count to "
       "it after the warmup and decays to --min-lr at that step (refused on --resume once fixed)"},
      // ---- optimisation ----
      {"lr", {"lr"}, "optimisation", "peak learning rate"},
      {"warmup", {"warmup"}, "optimisation", "linear warmup steps"},
      {"schedule",
       {"schedule"},
       "optimisation",
       "after warmup (auto: cosine to --min-lr when the length is known or fitted to --time-budget)"},
      {"optimizer", {"optimizer"}, "optimisation", "adam: L2 weight decay; adamw: decoupled"},
      {"weight-decay", {"weight_decay"}, "optimisation", "weight decay (L2 for adam, decoupled for adamw)"},
      {"decay-params",
       {"decay_params"},
       "optimisation",
       "parameters weight decay applies to (matrices: >= 2 dims; unset: the family's, decoder matrices)"},
      {"beta1", {"beta1"}, "optimisation", "Adam/AdamW first-moment decay rate"},
      {"beta2", {"beta2"}, "optimisation", "Adam/AdamW second-moment decay rate"},
      {"min-lr", {"min_lr"}, "optimisation", "learning rate the cosine schedule decays to"},
      {"label-smoothing",
       {"label_smoothing"},
       "optimisation",
       "label smoothing, as PyTorch's CrossEntropyLoss (train_loss includes its term; valid_loss is the plain "
       "cross-entropy)"},
      {"clip-norm", {"clip_norm"}, "optimisation", "clip the gradient 2-norm (0 = off)"},
      {"seed", {"seed"}, "optimisation", "seed for data, initialisation and dropout"},
      {"batch-size", {"batch_size"}, "optimisation", "examples per batch"},
      {"batch-tokens", {"batch_tokens"}, "optimisation", "padded tokens per batch (overrides --batch-size)"},
      {"eval-every",
       {"eval_every"},
       "optimisation",
       "steps between evaluations (0: each epoch in an --epochs run, 10 per --max-steps run, every 200 steps with "
       "--time-budget)"},
      {"skip-nonfinite", {"skip_nonfinite"}, "optimisation", "skip batches whose loss or gradient is not finite"},
      {"keep-best",
       {"keep_best"},
       "length",
       "after each evaluation that lowers the best validation loss, write that model to OUT/best (a model directory "
       "for eval, translate and generate)"},
      {"patience",
       {"patience"},
       "length",
       "early stopping: end the run once N evaluations in a row have not lowered the best validation loss (0: off)"},
      {"ema",
       {"ema"},
       "optimisation",
       "keep an exponential moving average of the weights with this decay in (0, 1), e.g. 0.999 (warm-up: "
       "min(DECAY, (1+t)/(10+t)) at step t); evaluation and model.safetensors use the average"},
      {"dtype",
       {"dtype"},
       "optimisation",
       "precision of the matmuls (the Linear layers', and attention's where the CPU has AVX512-BF16): f32, or "
       "bf16 (bfloat16 operands, float32 sums and weights; docs/bf16.md); kept on --resume"},
      {"grad-shards",
       {"grad_shards"},
       "optimisation",
       "cut each batch into G parts whose gradients add in a fixed order: the same weights for any number of "
       "processes dividing G (0: one part per process, i.e. 1 without mpirun)"},
      // ---- this process ----
      {"threads", {}, "run", std::string("threads (") + kThreadsZero + "; results do not depend on it)"},
      {"force",
       {},
       "run",
       "train into an --out that holds another run (its config.json): that run's files are deleted "
       "first (without --force such an --out is refused)"},
      {"comm-timeout",
       {},
       "run",
       "under mpirun: seconds a process waits for the others before the run stops with an error"},
      {"bucket-mb",
       {},
       "run",
       "under mpirun: MiB of gradient per message, each sent as soon as the backward has finished it (a speed setting: "
       "the result does not depend on it)"},
  };
  const TrainConfig defaults;
  const RunSettings run;
  const auto number = [](double v) { return number_text(v); };
  std::vector<TrainOption> table;
  for (const Row& r : rows) {
    TrainOption o;
    o.name = r.name;
    o.keys = r.keys;
    o.help = r.help;
    o.group = r.group;
    o.needs = r.needs;
    o.excludes = r.excludes;
    if (!r.keys.empty()) {
      TypeOf t{r.keys.front()};
      TrainConfig::fields(defaults, t);
      if (!t.found) ModelConfig::fields(defaults.model, t);
      if (!t.found) throw std::logic_error("train options: no field " + r.keys.front());
      o.type = t.type;
      o.choices = t.choices;
      o.default_text = field_text(defaults, r.keys.front());
      if (o.name == "dtype")  // int8 is for inference: not offered (TrainConfig::validate refuses it by name)
        o.choices.erase(std::remove(o.choices.begin(), o.choices.end(), "int8"), o.choices.end());
      if (o.type == OptionType::FLAG && !o.default_text.empty()) o.default_text = o.default_text == "true" ? "on" : "off";
    } else if (o.name == "preset") {
      o.type = OptionType::CHOICE;
      for (const auto& [value, name] : EnumNames<Preset>::names) o.choices.emplace_back(name);
    } else if (o.name == "force") {
      o.type = OptionType::FLAG;
      o.default_text = run.force ? "on" : "off";
    } else if (o.name == "threads") {
      o.type = OptionType::INT;
      o.default_text = std::to_string(run.threads);
    } else if (o.name == "comm-timeout") {
      o.type = OptionType::FLOAT;
      o.default_text = number(run.comm_timeout);
    } else if (o.name == "bucket-mb") {
      o.type = OptionType::FLOAT;
      o.default_text = number(run.bucket_mb);
    }
    table.push_back(std::move(o));
  }
  return table;
}

// A run setting's number, the whole text parsed.
template <typename T>
T run_number(const std::string& name, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw std::invalid_argument("--" + name + " must be a number, got " + quote_name(text));
  if constexpr (std::is_integral_v<T>) {  // its range is the caller's to check, and to say
    if (!(v >= static_cast<double>(std::numeric_limits<T>::min()) &&
          v <= static_cast<double>(std::numeric_limits<T>::max())) ||
        v != static_cast<double>(static_cast<T>(v)))
      throw std::invalid_argument("--" + name + " must be an integer, got " + quote_name(text));
  }
  return static_cast<T>(v);
}

}  // namespace

const std::vector<TrainOption>& train_options() {
  static const std::vector<TrainOption> table = build_table();
  return table;
}

const TrainOption& train_option(const std::string& name) {
  for (const TrainOption& o : train_options())
    if (o.name == name) return o;
  throw std::invalid_argument("unknown option --" + name);
}

// " (given as --tokens space)": the options given that set the config field a validate() message
// names first ("train config: tgt_tokens ...", "model config: src_tokens/tgt_tokens ..."), when their
// names are not the field's own; "" when none did.
static std::string given_as(const std::string& message, const std::vector<const TrainOption*>& in_order,
                            const std::map<std::string, std::string>& given) {
  std::string fields;
  for (const char* prefix : {"train config: ", "model config: "})
    if (message.rfind(prefix, 0) == 0) fields = message.substr(std::strlen(prefix));
  fields = fields.substr(0, fields.find_first_of(" ("));
  std::set<std::string> named_fields;  // "src_tokens/tgt_tokens": both
  for (size_t at = 0, end = 0; at < fields.size(); at = end + 1) {
    end = std::min(fields.find('/', at), fields.size());
    named_fields.insert(fields.substr(at, end - at));
  }
  std::string named;
  for (const TrainOption* o : in_order) {
    std::string own = o->name;  // --max-len sets max_len: already named by the message
    std::replace(own.begin(), own.end(), '-', '_');
    const bool sets = std::any_of(o->keys.begin(), o->keys.end(),
                                  [&](const std::string& k) { return k != own && named_fields.count(k); });
    if (!sets) continue;
    const std::string& v = given.at(o->name);
    const std::string text = o->type != OptionType::FLAG ? "--" + o->name + " " + v
                             : v == "true"               ? "--" + o->name
                                                         : "--no-" + o->name;
    named += (named.empty() ? "" : ", ") + text;
  }
  return named.empty() ? "" : " (given as " + named + ")";
}

TrainSetup resolve_train_options(const GivenOptions& given_list) {
  // The options as given, in train_options() order.
  std::map<std::string, std::string> given;
  for (const auto& [name, text] : given_list) {
    train_option(name);  // throws for an unknown name
    if (!given.emplace(name, text).second) throw std::invalid_argument("--" + name + " is given twice");
  }
  const auto has = [&](const std::string& n) { return given.count(n) > 0; };
  std::vector<const TrainOption*> in_order;
  for (const TrainOption& o : train_options())
    if (has(o.name)) in_order.push_back(&o);
  for (const TrainOption* o : in_order) {
    for (const auto& n : o->needs)
      if (!has(n)) throw std::invalid_argument("--" + o->name + " requires --" + n);
    for (const auto& n : o->excludes)
      if (has(n)) throw std::invalid_argument("--" + o->name + " excludes --" + n);
  }
  const auto names = [&](auto&& pick) {
    std::string s;
    for (const TrainOption* o : in_order)
      if (pick(*o)) s += (s.empty() ? "--" : ", --") + o->name;
    return s;
  };

  TrainSetup setup;
  if (has("threads")) {
    setup.run.threads = run_number<int>("threads", given.at("threads"));
    check_threads(setup.run.threads, "--threads");
  }
  if (has("force")) {
    const std::string& v = given.at("force");
    if (v != "true" && v != "false") throw std::invalid_argument("--force takes true or false, got '" + v + "'");
    setup.run.force = v == "true";
  }
  if (has("comm-timeout")) setup.run.comm_timeout = run_number<double>("comm-timeout", given.at("comm-timeout"));
  if (has("bucket-mb")) setup.run.bucket_mb = run_number<double>("bucket-mb", given.at("bucket-mb"));
  if (!(setup.run.comm_timeout > 0)) throw std::invalid_argument("--comm-timeout must be a positive number of seconds");
  if (!(setup.run.bucket_mb > 0) || setup.run.bucket_mb > 1024)
    throw std::invalid_argument("--bucket-mb must be in (0, 1024] MiB, got " + given.at("bucket-mb"));

  const auto is_length = [](const TrainOption& o) {
    return o.name == "epochs" || o.name == "max-steps" || o.name == "time-budget";
  };
  const auto is_run = [](const TrainOption& o) {
    return o.name == "threads" || o.name == "comm-timeout" || o.name == "bucket-mb";
  };
  const auto apply = [&](TrainConfig& c, const TrainOption& o) {  // errors name the option, not its keys
    for (const auto& k : o.keys) set_field(c, k, given.at(o.name), o.name);
  };
  // The length options replace the run's length together (on resume too).
  const bool length_given = std::any_of(in_order.begin(), in_order.end(), [&](const TrainOption* o) { return is_length(*o); });
  const auto set_length = [&](TrainConfig& c) {
    if (!length_given) return;
    c.epochs = c.max_steps = 0;
    c.time_budget = 0;
    for (const TrainOption* o : in_order)
      if (is_length(*o)) apply(c, *o);
  };

  if (has("resume")) {
    const std::string dir = given.at("resume");
    // A resumed run continues exactly as saved: an option silently ignored would look like it had
    // taken effect.
    const std::string fixed = names([&](const TrainOption& o) {
      return o.name != "resume" && o.name != "dtype" && !is_length(o) && !is_run(o);
    });
    if (!fixed.empty()) {
      std::string allowed;  // the run's length and the run settings, in table order
      for (const TrainOption& o : train_options())
        if (is_length(o) || is_run(o)) allowed += (allowed.empty() ? "--" : ", --") + o.name;
      throw std::invalid_argument("--resume continues the run with the settings saved in " + dir + "/config.json; only " +
                                  allowed + " (and --dtype naming the run's own) may be given with it (got " + fixed + ")");
    }
    setup.mode = StartMode::RESUME;
    if (std::filesystem::is_directory(dir) && !std::filesystem::exists(model_dir::path(dir, model_dir::CONFIG)))
      throw std::invalid_argument("--resume " + dir + ": no run to resume there (no " +
                                  model_dir::path(dir, model_dir::CONFIG) +
                                  "; a run writes it with its first checkpoint)");
    setup.config = load_train_config(dir);
    if (has("dtype")) {  // the run's own precision may be repeated; another would change its numbers
      TrainConfig asked = setup.config;
      set_field(asked, "dtype", given.at("dtype"), "dtype");
      if (asked.dtype == Precision::INT8) asked.validate();  // int8 trains nothing: said as a fresh run says it
      if (asked.dtype != setup.config.dtype)
        throw std::invalid_argument("--dtype " + given.at("dtype") + ": the run in " + dir + " trains in " +
                                    std::string(enum_name(setup.config.dtype)) +
                                    " (config.json \"dtype\"); --resume continues in it (start a new run, or "
                                    "--init-from its model, to change it)");
    }
    set_length(setup.config);
    return setup;
  }
  if (!has("out")) throw std::invalid_argument("--out is required");
  if (!has("task") && !has("train") && !has("text")) throw std::invalid_argument("--task or --train/--valid or --text is required");
  if (has("init-from")) {
    // A run started from a model directory takes the model from it: a model option would be ignored.
    std::string fixed = names([](const TrainOption& o) {
      return std::any_of(o.keys.begin(), o.keys.end(), [](const std::string& k) { return fixed_by_init_from(k); });
    });
    // A preset is a model too (its arch, sizes and tokenization), not only a training recipe.
    if (has("preset")) fixed += (fixed.empty() ? "" : ", ") + std::string("--preset, which sets the model's options");
    if (!fixed.empty())
      throw std::invalid_argument("--init-from takes the model (and its tokenizations) from the model directory; "
                                  "only --dropout and --drop-path of the model options may be given with it (got " +
                                  fixed + ")");
    setup.mode = StartMode::INIT_FROM;
  }
  TrainConfig& c = setup.config;
  if (has("preset")) {
    c = preset_config(enum_from_name<Preset>(given.at("preset")));
  } else if (has("task")) {
    TrainConfig task_and_arch;
    set_field(task_and_arch, "task", given.at("task"), "task");
    if (has("arch")) set_field(task_and_arch, "arch", given.at("arch"), "arch");
    c = task_preset(*task_and_arch.task, task_and_arch.model.arch);
  } else if (has("text") && !has("arch") && !has("init-from")) {
    set_field(c, "arch", "decoder");  // text data trains a language model
  }
  for (const TrainOption* o : in_order)
    if (!o->keys.empty() && !is_length(*o)) apply(c, *o);
  set_length(c);
  // Without --block-size, a model taken from a directory trains on windows no longer than those it was
  // trained on (the default could exceed its positions; an imported GPT-2's 1024 would be slow).
  if (has("init-from") && !has("block-size"))
    c.block_size = std::min(c.block_size, load_train_config(given.at("init-from")).block_size);
  // The data files' paths are saved absolute, so that --resume works from any working directory.
  for (std::string* p : {&c.train_path, &c.valid_path, &c.text_path, &c.valid_text_path})
    if (!p->empty()) *p = std::filesystem::absolute(*p).string();
  // A fresh run into another run's directory would mix the two (a kill before the first checkpoint
  // leaves the old checkpoint beside the new config), and it deletes the files a run writes: refused
  // unless --force (the trainer then deletes the old run's files), here before the data is read and by the
  // trainer again under the directory's lock (TrainHooks::replace_run).
  if (has("init-from")) check_out_is_not_init_from(c);  // before the refusal below, which would offer --resume
  if (!setup.run.force) refuse_existing_run(c.out_dir);
  // A layer count for a stack the family does not have would be ignored.
  const ModelFamily& f = c.model.family();
  for (const auto& [name, has_stack] : {std::pair{"encoder-layers", f.encoder_layers}, {"decoder-layers", f.decoder_layers}})
    if (has(name) && !has_stack && !has("init-from"))
      throw std::invalid_argument(std::string("--") + name + " does not apply to arch " +
                                  std::string(enum_name(c.model.arch)) + " (" + f.summary + "; its layers: " +
                                  (f.encoder_layers ? "--encoder-layers" : "--decoder-layers") + " or --layers)");
  // The run's own check, here so that a value refused names the option that gave it: validate() names
  // config fields ("train config: tgt_tokens must be ..."), which a command line may have set under
  // another name (--tokens, --layers, --ffn).
  try {
    c.with_run_defaults().validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(e.what() + given_as(e.what(), in_order, given));
  }
  return setup;
}

GivenOptions parse_train_args(const std::vector<std::string>& args) {
  GivenOptions given;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) throw std::invalid_argument("expected an option, got '" + a + "'");
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) value = name.substr(eq + 1), name = name.substr(0, eq);
    bool negated = false;
    if (name.rfind("no-", 0) == 0 && !std::any_of(train_options().begin(), train_options().end(),
                                                   [&](const TrainOption& o) { return o.name == name; })) {
      name = name.substr(3);
      negated = true;
    }
    const TrainOption& o = train_option(name);
    if (o.type == OptionType::FLAG) {
      // --x, --no-x, or --x=true / --x=false as CLI11 takes them; a flag given again replaces its value.
      std::string on = negated ? "false" : "true";
      if (eq != std::string::npos) {
        if (negated || (value != "true" && value != "false"))
          throw std::invalid_argument("--" + name + " is a flag: --" + name + ", --no-" + name + " or --" + name +
                                      "=true|false, got '" + a + "'");
        on = value;
      }
      const auto same = std::find_if(given.begin(), given.end(), [&](const auto& g) { return g.first == name; });
      if (same != given.end()) same->second = on;
      else given.emplace_back(name, on);
      continue;
    }
    if (negated) throw std::invalid_argument("--no-" + name + ": --" + name + " is not a flag");
    if (eq == std::string::npos) {
      if (i + 1 == args.size()) throw std::invalid_argument("--" + name + " needs a value");
      value = args[++i];
    }
    given.emplace_back(name, value);
  }
  return given;
}

}  // namespace tfm::train
