// src/train/trainer.cc — the training loop, its checkpoints and the trained-model directory
// (see tfm/train/trainer.h for the directory layout and the exact-resume argument).
//
// Structure: TrainConfig JSON ↔ struct; Dataset (task or TSV, encoded); State (everything that
// moves during training and must be saved to resume); evaluate (teacher-forced) and decode_metrics
// (greedy/beam decoding); write_checkpoint / read_checkpoint; run_training (the loop).
// To add a training option: a TrainConfig field, its line in to_json/from_json, its check in
// validate, its use in run_training, and the flag in src/cli/train_cmd.cc.
#include "tfm/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "io/file_util.h"
#include "tfm/autograd.h"
#include "tfm/inference.h"
#include "tfm/data/tasks.h"
#include "tfm/data/tsv.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/decode.h"
#include "tfm/optim.h"
#include "tfm/random.h"
#include "quote.h"

namespace tfm::train {

// EvalRow ↔ JSON for the history kept in trainer_state.safetensors (field names as in metrics.csv).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(EvalRow, step, epoch, lr, train_loss, valid_loss, valid_token_accuracy,
                                   valid_sequence_accuracy, tokens_per_sec, elapsed_seconds)

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kStateFile = "trainer_state.safetensors";
constexpr const char* kSrcVocabFile = "src_vocab.txt";
constexpr const char* kTgtVocabFile = "tgt_vocab.txt";
constexpr const char* kStateKey = "tfm_trainer_state";
constexpr int64_t kEvalBatch = 256;  // evaluation batch (examples); no gradients, so memory is small
constexpr int kFormatVersion = 1;
// --skip-nonfinite gives up after this many bad batches in a row: the weights themselves are then
// non-finite (or the data is), and skipping would loop forever without taking a step.
constexpr int64_t kMaxConsecutiveSkips = 100;

std::string join(const std::string& dir, const char* file) { return (fs::path(dir) / file).string(); }

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- data -------------------------------------------------------------------------------------------

struct Dataset {
  data::Vocab src_vocab, tgt_vocab;
  std::vector<data::Example> train;  // TSV: the whole file; task: regenerated each epoch
  std::vector<data::Example> valid;  // every validation pair (teacher-forced evaluation)
  // Decoding evaluation: TSV: each distinct validation source once, with all its accepted targets;
  // task: every generated sequence (one reference each).
  std::vector<Tokens> valid_sources;
  std::vector<std::vector<Tokens>> valid_references;
  std::vector<std::string> notes;  // skipped-line summaries for the user
};

data::Example task_example(const std::string& task, uint64_t seed, data::Split split, int64_t i) {
  auto t = data::make_task_example(task, seed, split, i);
  return {std::move(t.src), std::move(t.tgt)};
}

std::vector<data::Example> task_epoch(const TrainConfig& c, int64_t epoch) {
  std::vector<data::Example> out;
  out.reserve(static_cast<size_t>(c.task_train_size));
  for (int64_t i = 0; i < c.task_train_size; ++i)
    out.push_back(task_example(c.task, c.seed, data::Split::TRAIN, epoch * c.task_train_size + i));
  return out;
}

Tokens ids_to_strings(const data::Vocab& v, const std::vector<int32_t>& ids) {
  Tokens t;
  for (int32_t id : ids) t.push_back(v.token(id));
  return t;
}

// Groups (source, target) pairs by source, keeping first-appearance order.
void group_references(const std::vector<Tokens>& srcs, const std::vector<Tokens>& tgts, std::vector<Tokens>& sources,
                      std::vector<std::vector<Tokens>>& refs) {
  std::map<Tokens, size_t> where;
  for (size_t i = 0; i < srcs.size(); ++i) {
    auto [it, fresh] = where.emplace(srcs[i], sources.size());
    if (fresh) {
      sources.push_back(srcs[i]);
      refs.emplace_back();
    }
    refs[it->second].push_back(tgts[i]);
  }
}

Dataset load_dataset(const TrainConfig& c, const data::Vocab* src_vocab, const data::Vocab* tgt_vocab) {
  Dataset ds;
  std::vector<Tokens> vs, vt;
  if (!c.task.empty()) {
    ds.src_vocab = ds.tgt_vocab = data::task_vocab();
    for (int64_t i = 0; i < c.task_valid_size; ++i) {
      auto e = task_example(c.task, c.seed, data::Split::VALID, i);
      vs.push_back(ids_to_strings(ds.src_vocab, e.src));
      vt.push_back(ids_to_strings(ds.tgt_vocab, e.tgt));
      ds.valid.push_back(std::move(e));
    }
  } else {
    data::TsvOptions o;
    o.src_tokens = data::tokenization_from_name(c.src_tokens);
    o.tgt_tokens = data::tokenization_from_name(c.tgt_tokens);
    o.max_tokens = c.max_tokens;
    o.strict = c.strict;
    o.equal_lengths = c.model.arch == "encoder";
    const data::TsvData train = data::read_tsv(c.train_path, o);
    const data::TsvData valid = data::read_tsv(c.valid_path, o);
    for (const auto* d : {&train, &valid})
      if (!d->problems.empty()) ds.notes.push_back(d->summary());
    if (src_vocab && tgt_vocab) {  // resuming: the saved vocabularies, never rebuilt
      ds.src_vocab = *src_vocab;
      ds.tgt_vocab = *tgt_vocab;
    } else {
      std::vector<Tokens> s, t;
      for (const auto& p : train.pairs) s.push_back(p.src), t.push_back(p.tgt);
      ds.src_vocab = data::Vocab::build(s);
      ds.tgt_vocab = data::Vocab::build(t);
    }
    for (const auto& p : train.pairs) ds.train.push_back({ds.src_vocab.encode(p.src), ds.tgt_vocab.encode(p.tgt)});
    for (const auto& p : valid.pairs) {
      ds.valid.push_back({ds.src_vocab.encode(p.src), ds.tgt_vocab.encode(p.tgt)});
      vs.push_back(p.src);
      vt.push_back(p.tgt);
    }
  }
  if (c.task.empty()) {
    group_references(vs, vt, ds.valid_sources, ds.valid_references);
  } else {  // every generated sequence counts, repeats included ("accuracy on 1,000 sequences")
    ds.valid_sources = vs;
    for (auto& t : vt) ds.valid_references.push_back({std::move(t)});
  }
  return ds;
}

// ---- model / optimizer -------------------------------------------------------------------------------

ModelConfig model_config_for(const TrainConfig& c, const Dataset& ds) {
  ModelConfig m = c.model;
  m.src_vocab_size = ds.src_vocab.size();
  m.tgt_vocab_size = ds.tgt_vocab.size();
  m.pad_id = ds.tgt_vocab.pad_id();
  m.bos_id = ds.tgt_vocab.bos_id();
  m.eos_id = ds.tgt_vocab.eos_id();
  if (ds.src_vocab.pad_id() != m.pad_id) throw std::invalid_argument("source and target vocabularies disagree on <pad>");
  // Room for the longest source and bos + target (+ eos), whatever the file holds.
  const int64_t need = (c.task.empty() ? c.max_tokens : data::kTaskMaxLen) + 2;
  m.max_len = std::max(m.max_len, need);
  return m;
}

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, Seq2SeqModel& model) {
  // Adam's defaults (β1 0.9, β2 0.999, eps 1e-8) as torch.optim.Adam / AdamW.
  return std::make_unique<Adam>(model.named_parameters(), c.lr, 0.9f, 0.999f, 1e-8f, c.weight_decay,
                                c.optimizer == "adamw");
}

// ---- evaluation ---------------------------------------------------------------------------------------

struct TeacherForced {
  double loss = 0, token_accuracy = 0, sequence_accuracy = 0;
};

// Teacher-forced loss (plain cross-entropy, no label smoothing, mean over non-pad targets) and
// argmax accuracies over every validation pair. logits (B, T, V); loss_i = lse(logits_i) − logits_i[y_i].
TeacherForced evaluate(Seq2SeqModel& model, const std::vector<data::Example>& valid, const ModelConfig& m) {
  InferenceMode scope;  // float32, weights packed once for all validation batches
  model.eval();
  data::BatchSettings bs;
  bs.batch_size = kEvalBatch;
  double loss_sum = 0;
  int64_t tokens = 0, correct = 0, seqs = 0, seq_ok = 0;
  for (const auto& idx : data::plan_eval(valid, bs)) {
    const TokenBatch b = data::make_batch(valid, idx, m.arch, m.pad_id, m.bos_id, m.eos_id);
    const Tensor logits = model.forward(b);  // (B, T, V)
    const int64_t V = logits.size(-1);
    const float* lp = logits.data();
    for (int64_t r = 0; r < b.B; ++r) {
      bool all = true;
      for (int64_t t = 0; t < b.T; ++t) {
        const int32_t y = b.tgt_out[static_cast<size_t>(r * b.T + t)];
        if (y == m.pad_id) continue;
        const float* row = lp + (r * b.T + t) * V;
        int64_t arg = 0;
        for (int64_t v = 1; v < V; ++v)
          if (row[v] > row[arg]) arg = v;
        double s = 0;
        for (int64_t v = 0; v < V; ++v) s += std::exp(static_cast<double>(row[v]) - row[arg]);
        loss_sum += std::log(s) + row[arg] - row[y];
        ++tokens;
        correct += arg == y;
        all = all && arg == y;
      }
      ++seqs;
      seq_ok += all;
    }
  }
  model.train();
  TeacherForced r;
  r.loss = tokens ? loss_sum / static_cast<double>(tokens) : 0.0;
  r.token_accuracy = tokens ? static_cast<double>(correct) / static_cast<double>(tokens) : 0.0;
  r.sequence_accuracy = seqs ? static_cast<double>(seq_ok) / static_cast<double>(seqs) : 0.0;
  return r;
}

// Encoder predictions are one token per source position (no eos to stop at); seq2seq stops at eos.
Tokens prediction_tokens(const data::Vocab& v, const std::vector<int32_t>& ids, bool encoder) {
  if (!encoder) return v.decode(ids);
  Tokens t;
  for (int32_t id : ids)
    if (id != v.pad_id()) t.push_back(v.token(id));
  return t;
}

// Decodes sources (ids) in length-sorted batches and returns predictions in input order.
std::vector<Tokens> decode_all(const Seq2SeqModel& model, const data::Vocab& tgt_vocab,
                               const std::vector<std::vector<int32_t>>& sources, int beam, int64_t batch_size) {
  InferenceMode scope(InferenceMode::current_precision());  // one weight cache for every batch
  const bool encoder = model.config().arch == "encoder";
  std::vector<data::Example> ex(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) ex[i].src = sources[i];
  data::BatchSettings bs;
  bs.batch_size = std::max<int64_t>(1, batch_size);
  std::vector<Tokens> out(sources.size());
  DecodeOptions opt;
  opt.beam = std::max(1, beam);
  for (const auto& idx : data::plan_eval(ex, bs)) {
    std::vector<std::vector<int32_t>> batch;
    std::vector<int64_t> which;
    for (int64_t i : idx)
      if (!sources[static_cast<size_t>(i)].empty()) batch.push_back(sources[static_cast<size_t>(i)]), which.push_back(i);
    if (batch.empty()) continue;  // empty sources predict nothing
    const auto pred = decode(model, batch, opt);
    for (size_t k = 0; k < which.size(); ++k)
      out[static_cast<size_t>(which[k])] = prediction_tokens(tgt_vocab, pred[k], encoder);
  }
  return out;
}

Metrics decode_metrics(const Seq2SeqModel& model, const data::Vocab& src_vocab, const data::Vocab& tgt_vocab,
                       const std::vector<Tokens>& sources, const std::vector<std::vector<Tokens>>& refs, int beam,
                       int64_t batch_size) {
  if (sources.size() != refs.size()) throw std::invalid_argument("evaluate: sources and references differ in count");
  std::vector<std::vector<int32_t>> ids;
  for (const auto& s : sources) ids.push_back(src_vocab.encode(s));
  const auto pred = decode_all(model, tgt_vocab, ids, beam, batch_size);
  Metrics m;
  for (size_t i = 0; i < sources.size(); ++i) m.add(pred[i], refs[i]);
  return m;
}

// ---- state and checkpoints ----------------------------------------------------------------------------

// Everything that changes while training and must be saved for an exact resume.
struct State {
  int64_t step = 0;              // optimizer steps taken
  int64_t epoch = 0;             // 0-based epoch in progress
  int64_t batch = 0;             // next batch of that epoch's plan
  double loss_sum = 0;           // training loss since the last evaluation
  int64_t loss_count = 0;
  int64_t tokens = 0;            // target tokens since the last evaluation (throughput)
  int64_t skipped = 0;           // non-finite batches skipped
  double elapsed = 0;            // seconds over all sessions, at the last save
  int64_t checkpoint_step = -1;  // step of the last complete checkpoint
  std::vector<EvalRow> history;
};

void write_checkpoint(const std::string& dir, Seq2SeqModel& model, const Optimizer& opt, State& st,
                      const TrainConfig& c) {
  st.checkpoint_step = st.step;
  auto params = model.named_parameters();
  io::save_safetensors(join(dir, kModelFile), params, {{"format", "pt"}});
  NamedTensors all;
  for (auto& [k, t] : params) all.insert("model." + k, t);
  for (auto& [k, t] : opt.state()) all.insert("optim." + k, t);
  const Generator& g = default_generator();
  json s = {{"step", st.step}, {"epoch", st.epoch}, {"batch", st.batch}, {"loss_sum", st.loss_sum},
            {"loss_count", st.loss_count}, {"tokens", st.tokens}, {"skipped", st.skipped},
            {"elapsed", st.elapsed}, {"rng_seed", g.seed}, {"rng_offset", g.offset},
            {"optimizer_steps", opt.steps()}, {"history", json::array()}};
  for (const auto& r : st.history) s["history"].push_back(json(nlohmann::json(r)));  // json here is ordered_json
  io::save_safetensors(join(dir, kStateFile), all, {{kStateKey, s.dump()}});
  io::write_file_atomic(join(dir, "metrics.csv"), metrics_csv(st.history));
  io::write_file_atomic(join(dir, "curves.svg"), plot_curves_svg(st.history, c.task.empty() ? c.train_path : c.task));
}

void read_checkpoint(const std::string& dir, Seq2SeqModel& model, Optimizer& opt, State& st) {
  const std::string path = join(dir, kStateFile);
  if (!fs::exists(path))
    throw std::runtime_error(path + ": no checkpoint to resume from (the run stopped before its first checkpoint; "
                             "start it again without --resume)");
  // Zero-copy: load_state_dict and the optimizer copy from the mapping directly (one copy, not
  // two); the mapping is dropped when this function returns.
  const io::SafeTensorsFile f = io::load_safetensors(path, io::LoadOptions{.zero_copy = true});
  auto it = f.metadata.find(kStateKey);
  if (it == f.metadata.end()) throw std::runtime_error(path + ": no '" + std::string(kStateKey) + "' metadata");
  NamedTensors weights, optim;
  for (const auto& [name, t] : f.tensors) {
    if (name.rfind("model.", 0) == 0) weights.insert(name.substr(6), t);
    else if (name.rfind("optim.", 0) == 0) optim.insert(name.substr(6), t);
    else throw std::runtime_error(path + ": unexpected tensor " + quote_name(name));
  }
  model.load_state_dict(weights, path);
  try {
    const json s = json::parse(it->second);
    opt.load_state(optim, s.at("optimizer_steps").get<int64_t>());
    st.step = s.at("step");
    st.epoch = s.at("epoch");
    st.batch = s.at("batch");
    st.loss_sum = s.at("loss_sum");
    st.loss_count = s.at("loss_count");
    st.tokens = s.at("tokens");
    st.skipped = s.at("skipped");
    st.elapsed = s.at("elapsed");
    st.checkpoint_step = st.step;
    Generator& g = default_generator();
    g.seed = s.at("rng_seed");
    g.offset = s.at("rng_offset");
    st.history.clear();
    for (const auto& r : s.at("history")) st.history.push_back(nlohmann::json(r).get<EvalRow>());
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": bad trainer state: " + e.what());
  }
}

json config_file_json(const TrainConfig& c, const ModelConfig& m, const Dataset& ds) {
  json j;
  j["format"] = "tfm-train";
  j["version"] = kFormatVersion;
  j["model"] = json::parse(m.to_json());
  json t = json::parse(c.to_json());
  t.erase("model");
  j["train"] = t;
  j["vocab"] = {{"src", kSrcVocabFile}, {"tgt", kTgtVocabFile}, {"src_size", ds.src_vocab.size()},
                {"tgt_size", ds.tgt_vocab.size()}, {"src_tokens", c.src_tokens}, {"tgt_tokens", c.tgt_tokens}};
  return j;
}

json read_config_file(const std::string& dir) {
  const std::string path = join(dir, kConfigFile);
  json j;
  try {
    j = json::parse(io::read_file(path));
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || j.value("format", "") != "tfm-train")
    throw std::runtime_error(path + ": not a tfm training directory config (\"format\": \"tfm-train\" missing)");
  if (j.value("version", 0) != kFormatVersion)
    throw std::runtime_error(path + ": unsupported version " + j.value("version", json(0)).dump());
  if (!j.contains("model") || !j.contains("train"))
    throw std::runtime_error(path + ": missing \"model\" or \"train\"");
  return j;
}

std::string resolved_schedule(const TrainConfig& c, int64_t total_steps) {
  if (c.schedule != "auto") return c.schedule;
  if (total_steps > c.warmup) return "cosine";
  return c.warmup > 0 ? "inverse_sqrt" : "constant";
}

bool finite_grads(const std::vector<Tensor>& params) {
  for (const auto& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const float* d = g.data();
    for (int64_t i = 0, n = g.numel(); i < n; ++i)
      if (!std::isfinite(d[i])) return false;
  }
  return true;
}

}  // namespace

// ---- TrainConfig --------------------------------------------------------------------------------------

std::string TrainConfig::to_json() const {
  json j;
  j["task"] = task;
  j["train_path"] = train_path;
  j["valid_path"] = valid_path;
  j["src_tokens"] = src_tokens;
  j["tgt_tokens"] = tgt_tokens;
  j["strict"] = strict;
  j["max_tokens"] = max_tokens;
  j["task_train_size"] = task_train_size;
  j["task_valid_size"] = task_valid_size;
  j["epochs"] = epochs;
  j["max_steps"] = max_steps;
  j["time_budget"] = time_budget;
  j["optimizer"] = optimizer;
  j["lr"] = lr;
  j["warmup"] = warmup;
  j["schedule"] = schedule;
  j["weight_decay"] = weight_decay;
  j["label_smoothing"] = label_smoothing;
  j["clip_norm"] = clip_norm;
  j["batch_size"] = batch.batch_size;
  j["batch_tokens"] = batch.batch_tokens;
  j["seed"] = seed;
  j["eval_every"] = eval_every;
  j["skip_nonfinite"] = skip_nonfinite;
  j["out_dir"] = out_dir;
  j["model"] = json::parse(model.to_json());
  return j.dump(2);
}

TrainConfig TrainConfig::from_json(const std::string& text) {
  TrainConfig c;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("train config: not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw std::invalid_argument("train config: expected a JSON object");
  const auto get = [&](const char* key, auto& field) {
    if (!j.contains(key)) return;
    try {
      j.at(key).get_to(field);
    } catch (const json::exception&) {
      throw std::invalid_argument(std::string("train config: key '") + key + "' has the wrong type: " + j.at(key).dump());
    }
  };
  get("task", c.task);
  get("train_path", c.train_path);
  get("valid_path", c.valid_path);
  get("src_tokens", c.src_tokens);
  get("tgt_tokens", c.tgt_tokens);
  get("strict", c.strict);
  get("max_tokens", c.max_tokens);
  get("task_train_size", c.task_train_size);
  get("task_valid_size", c.task_valid_size);
  get("epochs", c.epochs);
  get("max_steps", c.max_steps);
  get("time_budget", c.time_budget);
  get("optimizer", c.optimizer);
  get("lr", c.lr);
  get("warmup", c.warmup);
  get("schedule", c.schedule);
  get("weight_decay", c.weight_decay);
  get("label_smoothing", c.label_smoothing);
  get("clip_norm", c.clip_norm);
  get("batch_size", c.batch.batch_size);
  get("batch_tokens", c.batch.batch_tokens);
  get("seed", c.seed);
  get("eval_every", c.eval_every);
  get("skip_nonfinite", c.skip_nonfinite);
  get("out_dir", c.out_dir);
  if (j.contains("model")) {
    // A template (vocabulary sizes 0, filled in from the data by run_training) is not a valid model
    // on its own: parse it with placeholder sizes, then restore the zeros.
    json m = j.at("model");
    const bool template_sizes = m.is_object() && m.value("src_vocab_size", json(0)) == json(0) &&
                                m.value("tgt_vocab_size", json(0)) == json(0);
    if (template_sizes) m["src_vocab_size"] = m["tgt_vocab_size"] = 1;
    c.model = ModelConfig::from_json(m.dump());
    if (template_sizes) c.model.src_vocab_size = c.model.tgt_vocab_size = 0;
  }
  return c;
}

void TrainConfig::validate() const {
  const auto bad = [](const std::string& field, const std::string& why) {
    throw std::invalid_argument("train config: " + field + " " + why);
  };
  if (!task.empty() && !data::is_task(task)) bad("task", quote_name(task) + " is not a built-in task (reverse, copy, sort)");
  if (task.empty() && (train_path.empty() || valid_path.empty()))
    bad("data", "needs a task or both a training and a validation file");
  data::tokenization_from_name(src_tokens);
  data::tokenization_from_name(tgt_tokens);
  if (max_tokens < 1) bad("max_tokens", "must be ≥ 1");
  if (task_train_size < 1 || task_valid_size < 1) bad("task_train_size/task_valid_size", "must be ≥ 1");
  if (model.arch != "encoder" && model.arch != "seq2seq") bad("arch", "must be encoder or seq2seq, got " + quote_name(model.arch));
  if (epochs < 0 || max_steps < 0 || !(time_budget >= 0)) bad("epochs/max_steps/time_budget", "must be ≥ 0");
  if (optimizer != "adam" && optimizer != "adamw") bad("optimizer", "must be adam or adamw, got " + quote_name(optimizer));
  if (!(lr > 0) || !std::isfinite(lr)) bad("lr", "must be a positive number");
  if (warmup < 0) bad("warmup", "must be ≥ 0");
  if (schedule != "auto" && schedule != "constant" && schedule != "inverse_sqrt" && schedule != "cosine")
    bad("schedule", "must be auto, constant, inverse_sqrt or cosine, got " + quote_name(schedule));
  if (!(weight_decay >= 0)) bad("weight_decay", "must be ≥ 0");
  if (!(label_smoothing >= 0 && label_smoothing < 1)) bad("label_smoothing", "must be in [0, 1)");
  if (!(clip_norm >= 0)) bad("clip_norm", "must be ≥ 0");
  if (batch.batch_tokens < 0 || (batch.batch_tokens == 0 && batch.batch_size < 1))
    bad("batch_size/batch_tokens", "need batch_size ≥ 1 or batch_tokens ≥ 1");
  if (eval_every < 0) bad("eval_every", "must be ≥ 0");
  if (out_dir.empty()) bad("out_dir", "is required");
}

TrainConfig load_train_config(const std::string& dir) {
  const json j = read_config_file(dir);
  json t = j.at("train");
  t["model"] = j.at("model");
  TrainConfig c = TrainConfig::from_json(t.dump());
  c.out_dir = dir;
  return c;
}

// ---- the loop -----------------------------------------------------------------------------------------

TrainResult run_training(const TrainConfig& config, const TrainHooks& hooks, bool resume) {
  const auto session_start = Clock::now();
  TrainConfig c = config;
  if (!c.task.empty()) c.src_tokens = c.tgt_tokens = "space";  // task tokens are numbers
  if (c.epochs == 0 && c.max_steps == 0 && c.time_budget == 0) c.epochs = 10;
  c.validate();
  const auto note = [&](ProgressEvent::Kind kind, const std::string& msg) {
    if (!hooks.progress) return;
    ProgressEvent e;
    e.kind = kind;
    e.message = msg;
    hooks.progress(e);
  };

  std::unique_ptr<data::Vocab> saved_src, saved_tgt;
  if (resume) {
    saved_src = std::make_unique<data::Vocab>(data::Vocab::load(join(c.out_dir, kSrcVocabFile)));
    saved_tgt = std::make_unique<data::Vocab>(data::Vocab::load(join(c.out_dir, kTgtVocabFile)));
  }
  Dataset ds = load_dataset(c, saved_src.get(), saved_tgt.get());
  for (const auto& n : ds.notes) note(ProgressEvent::NOTE, n);
  const ModelConfig mc = model_config_for(c, ds);
  mc.validate();

  std::error_code ec;
  fs::create_directories(c.out_dir, ec);
  if (ec) throw std::runtime_error(c.out_dir + ": cannot create directory: " + ec.message());
  if (!resume) {
    ds.src_vocab.save(join(c.out_dir, kSrcVocabFile));
    ds.tgt_vocab.save(join(c.out_dir, kTgtVocabFile));
    io::write_file_atomic(join(c.out_dir, kConfigFile), config_file_json(c, mc, ds).dump(2) + "\n");
  }

  // Initialisation draws from the default generator seeded by --seed; dropout continues the stream.
  manual_seed(c.seed);
  Seq2SeqModel model(mc, default_generator());
  model.train();
  auto opt = make_optimizer(c, model);
  const std::vector<Tensor> params = model.parameters();
  State st;
  if (resume) {
    // A run killed mid-write leaves hidden temporary files beside the complete checkpoint: drop them.
    for (const char* f : {kModelFile, kStateFile, "metrics.csv", "curves.svg", "config.json"})
      io::remove_stale_temp_files(join(c.out_dir, f));
    read_checkpoint(c.out_dir, model, *opt, st);
    note(ProgressEvent::NOTE, "resuming " + c.out_dir + " at step " + std::to_string(st.step) + " (epoch " +
                                  std::to_string(st.epoch + 1) + ")");
  }

  // The plan of the current epoch (task data is regenerated per epoch, so it is rebuilt lazily).
  int64_t plan_epoch_no = -1;
  std::vector<data::Example> epoch_examples;
  data::BatchPlan plan;
  const auto load_epoch = [&](int64_t e) {
    if (plan_epoch_no == e) return;
    if (!c.task.empty()) epoch_examples = task_epoch(c, e);
    plan = data::plan_epoch(c.task.empty() ? ds.train : epoch_examples, c.batch, c.seed, e);
    plan_epoch_no = e;
  };
  load_epoch(st.epoch);
  const int64_t per_epoch = static_cast<int64_t>(plan.size());  // exact for TSV and batch_size; an estimate otherwise
  int64_t total_steps = c.epochs > 0 ? c.epochs * per_epoch : 0;
  if (c.max_steps > 0) total_steps = total_steps > 0 ? std::min(total_steps, c.max_steps) : c.max_steps;
  const std::string schedule = resolved_schedule(c, total_steps);
  // Evaluate every eval_every steps; by default at each epoch end in epoch mode, else 10 times a run
  // (every 200 steps when the length is a time budget).
  const bool eval_at_epoch_end = c.eval_every == 0 && c.epochs > 0 && c.max_steps == 0;
  const int64_t eval_every = c.eval_every > 0 ? c.eval_every
                             : eval_at_epoch_end ? 0
                             : total_steps > 0   ? std::max<int64_t>(1, total_steps / 10)
                                                 : 200;

  TrainResult result;
  double lr_now = 0;
  const int64_t session_first_step = st.step;
  auto since_eval = Clock::now();
  const double elapsed_before = st.elapsed;
  const auto elapsed = [&] { return elapsed_before + seconds_since(session_start); };

  const auto do_eval = [&] {
    const TeacherForced tf = evaluate(model, ds.valid, mc);
    EvalRow r;
    r.step = st.step;
    r.epoch = st.epoch + (st.batch == 0 ? 0 : 1);
    r.lr = lr_now;
    r.train_loss = st.loss_count ? st.loss_sum / static_cast<double>(st.loss_count) : 0.0;
    r.valid_loss = tf.loss;
    r.valid_token_accuracy = tf.token_accuracy;
    r.valid_sequence_accuracy = tf.sequence_accuracy;
    const double dt = seconds_since(since_eval);
    r.tokens_per_sec = dt > 0 ? static_cast<double>(st.tokens) / dt : 0.0;
    r.elapsed_seconds = elapsed();
    st.history.push_back(r);
    st.loss_sum = 0;
    st.loss_count = 0;
    st.tokens = 0;
    since_eval = Clock::now();
    if (hooks.progress) {
      ProgressEvent e;
      e.kind = ProgressEvent::EVAL;
      e.step = st.step;
      e.total_steps = total_steps;
      e.epoch = r.epoch;
      e.loss = r.train_loss;
      e.lr = r.lr;
      e.tokens_per_sec = r.tokens_per_sec;
      e.elapsed_seconds = r.elapsed_seconds;
      e.has_eval = true;
      e.last_eval = r;
      hooks.progress(e);
    }
  };
  const auto checkpoint = [&] {
    st.elapsed = elapsed();
    write_checkpoint(c.out_dir, model, *opt, st, c);
    note(ProgressEvent::CHECKPOINT, "checkpoint at step " + std::to_string(st.step) + " in " + c.out_dir);
  };

  std::string reason;
  auto last_progress = Clock::now() - std::chrono::seconds(10);
  int64_t tokens_session = 0;
  int64_t consecutive_skips = 0;
  while (reason.empty()) {
    if (c.epochs > 0 && st.epoch >= c.epochs) {
      reason = "epochs";
      break;
    }
    load_epoch(st.epoch);
    const std::vector<data::Example>& train_set = c.task.empty() ? ds.train : epoch_examples;
    while (st.batch < static_cast<int64_t>(plan.size())) {
      if (c.max_steps > 0 && st.step >= c.max_steps) {
        reason = "max-steps";
        break;
      }
      const TokenBatch b = data::make_batch(train_set, plan[static_cast<size_t>(st.batch)], mc.arch, mc.pad_id,
                                            mc.bos_id, mc.eos_id);
      ++st.batch;
      lr_now = scheduled_lr(schedule, c.lr, st.step + 1, c.warmup, total_steps);
      opt->set_lr(static_cast<float>(lr_now));
      Tensor loss = model.loss(b, c.label_smoothing);
      const float loss_value = loss.item();
      bool finite = std::isfinite(loss_value);
      if (finite) {
        loss.backward();
        if (c.clip_norm > 0) finite = std::isfinite(clip_grad_norm(params, c.clip_norm));
        else finite = finite_grads(params);
      }
      if (!finite) {
        opt->zero_grad();
        if (!c.skip_nonfinite) {
          const std::string where =
              st.checkpoint_step >= 0
                  ? "The last good checkpoint (step " + std::to_string(st.checkpoint_step) + ") is kept in " + c.out_dir +
                        "."
                  : "No checkpoint was written yet.";
          throw TrainingDiverged("training diverged at step " + std::to_string(st.step + 1) + " (epoch " +
                                 std::to_string(st.epoch + 1) + "): " +
                                 (std::isfinite(loss_value) ? "the gradient" : "the loss") + " is not finite (loss " +
                                 std::to_string(loss_value) + "). " + where +
                                 " Usual fixes: a lower --lr (now " + std::to_string(c.lr) + "), a longer --warmup (now " +
                                 std::to_string(c.warmup) + "), --clip-norm 1.0, or --skip-nonfinite to skip such batches.");
        }
        ++st.skipped;
        if (++consecutive_skips >= kMaxConsecutiveSkips)
          throw TrainingDiverged("training diverged: " + std::to_string(consecutive_skips) +
                                 " consecutive batches had a non-finite loss or gradient (at step " +
                                 std::to_string(st.step + 1) + "); the model is not recovering. Try a lower --lr (now " +
                                 std::to_string(c.lr) + "), a longer --warmup or --clip-norm 1.0.");
        note(ProgressEvent::NOTE, "skipped a batch with a non-finite loss or gradient before step " +
                                      std::to_string(st.step + 1) + " (" + std::to_string(st.skipped) + " so far)");
      } else {
        consecutive_skips = 0;
        opt->step();
        opt->zero_grad();
        ++st.step;
        st.loss_sum += loss_value;
        ++st.loss_count;
        const int64_t ntok = data::count_target_tokens(b, mc.pad_id);
        st.tokens += ntok;
        tokens_session += ntok;
      }

      if (hooks.progress && seconds_since(last_progress) >= 0.25) {
        last_progress = Clock::now();
        ProgressEvent e;
        e.kind = ProgressEvent::STEP;
        e.step = st.step;
        e.total_steps = total_steps;
        e.epoch = st.epoch + 1;
        e.loss = st.loss_count ? st.loss_sum / static_cast<double>(st.loss_count) : 0.0;
        e.lr = lr_now;
        const double s = seconds_since(session_start);
        e.elapsed_seconds = elapsed();
        e.tokens_per_sec = s > 0 ? static_cast<double>(tokens_session) / s : 0.0;
        const int64_t done = st.step - session_first_step;
        if (done > 0) {
          const double per_step = s / static_cast<double>(done);
          if (total_steps > 0) e.eta_seconds = per_step * static_cast<double>(std::max<int64_t>(0, total_steps - st.step));
          if (c.time_budget > 0) {
            const double left = std::max(0.0, c.time_budget - e.elapsed_seconds);
            e.eta_seconds = e.eta_seconds < 0 ? left : std::min(e.eta_seconds, left);
          }
        }
        if (!st.history.empty()) e.has_eval = true, e.last_eval = st.history.back();
        hooks.progress(e);
      }

      if (eval_every > 0 && st.step > 0 && st.step % eval_every == 0 && finite) {
        do_eval();
        checkpoint();
      }
      if (c.time_budget > 0 && elapsed() >= c.time_budget) {
        reason = "time-budget";
        break;
      }
      if (hooks.should_stop && hooks.should_stop(st.step)) {
        checkpoint();
        result.interrupted = true;
        reason = "interrupted";
        break;
      }
    }
    if (!reason.empty()) break;
    ++st.epoch;
    st.batch = 0;
    if (eval_at_epoch_end) {
      do_eval();
      checkpoint();
    }
  }

  if (!result.interrupted) {
    if (st.history.empty() || st.history.back().step != st.step) {
      do_eval();
      checkpoint();
    }
    model.eval();
    result.final_metrics = decode_metrics(model, ds.src_vocab, ds.tgt_vocab, ds.valid_sources, ds.valid_references, 1,
                                          kEvalBatch);
  }
  result.steps = st.step;
  result.epochs_completed = st.epoch;
  result.stop_reason = reason;
  result.skipped_nonfinite = st.skipped;
  result.history = st.history;
  result.seconds = elapsed();
  return result;
}

// ---- using a trained model ----------------------------------------------------------------------------

LoadedModel load_model_dir(const std::string& dir) {
  const json j = read_config_file(dir);
  LoadedModel m;
  m.train = load_train_config(dir);
  const ModelConfig mc = ModelConfig::from_json(j.at("model").dump());
  m.src_vocab = data::Vocab::load(join(dir, kSrcVocabFile));
  m.tgt_vocab = data::Vocab::load(join(dir, kTgtVocabFile));
  if (m.src_vocab.size() != mc.src_vocab_size || m.tgt_vocab.size() != mc.tgt_vocab_size)
    throw std::runtime_error(dir + ": vocabulary files have " + std::to_string(m.src_vocab.size()) + "/" +
                             std::to_string(m.tgt_vocab.size()) + " entries, config.json says " +
                             std::to_string(mc.src_vocab_size) + "/" + std::to_string(mc.tgt_vocab_size));
  m.src_tokens = data::tokenization_from_name(m.train.src_tokens);
  m.tgt_tokens = data::tokenization_from_name(m.train.tgt_tokens);
  Generator init{0, 0};
  m.model = std::make_unique<Seq2SeqModel>(mc, init);
  const std::string weights = join(dir, kModelFile);
  // Zero-copy: load_state_dict copies into the parameters from the mapping (one copy, not two).
  const io::SafeTensorsFile f = io::load_safetensors(weights, io::LoadOptions{.zero_copy = true});
  m.model->load_state_dict(f.tensors, weights);
  m.model->eval();
  return m;
}

std::vector<std::string> translate_lines(const LoadedModel& m, const std::vector<std::string>& sources, int beam,
                                         int64_t batch_size) {
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    try {
      ids.push_back(m.src_vocab.encode(data::tokenize(sources[i], m.src_tokens)));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("input line " + std::to_string(i + 1) + ": " + e.what());
    }
  }
  const auto pred = decode_all(*m.model, m.tgt_vocab, ids, beam, batch_size);
  std::vector<std::string> out;
  out.reserve(pred.size());
  for (const auto& p : pred) out.push_back(data::detokenize(p, m.tgt_tokens));
  return out;
}

Metrics evaluate_examples(const LoadedModel& m, const std::vector<Tokens>& sources,
                          const std::vector<std::vector<Tokens>>& references, int beam, int64_t batch_size) {
  return decode_metrics(*m.model, m.src_vocab, m.tgt_vocab, sources, references, beam, batch_size);
}

}  // namespace tfm::train
