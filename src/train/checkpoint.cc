// src/train/checkpoint.cc — writing and reading a run's checkpoint (src/train/checkpoint.h).
#include "train/checkpoint.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <nlohmann/json.hpp>

#include "io/file_util.h"
#include "io/safetensors_writer.h"
#include "quote.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/model_dir.h"

namespace tfm::train {

namespace {
using json = nlohmann::ordered_json;
constexpr const char* kStateKey = "tfm_trainer_state";  // the metadata entry holding State as JSON

// Calls f(name, field) for each of an EvalRow's computed fields, kept in trainer_state.safetensors
// (names as in metrics.csv): the same bits for the same run however many processes or threads ran it.
// The one list both writing and reading use.
template <typename Row, typename F>
void for_each_computed_field(Row& r, const F& f) {
  f("step", r.step);
  f("epoch", r.epoch);
  f("lr", r.lr);
  f("train_loss", r.train_loss);
  f("valid_loss", r.valid_loss);
  f("valid_token_accuracy", r.valid_token_accuracy);
  f("valid_sequence_accuracy", r.valid_sequence_accuracy);
}
json computed_fields(const EvalRow& r) {
  json j = json::object();
  for_each_computed_field(r, [&](const char* name, const auto& v) { j[name] = v; });
  return j;
}
// Its wall-clock fields, kept in trainer_clock.json.
json clock_fields(const EvalRow& r) {
  return {{"step", r.step}, {"tokens_per_sec", r.tokens_per_sec}, {"elapsed_seconds", r.elapsed_seconds}};
}

// The wall clock of DIR/trainer_clock.json into st (its elapsed time, and the history rows' timing
// matched by step): a missing file leaves zeros (the clock is informational but for --time-budget);
// a checkpoint written before the split keeps them in the state's JSON instead.
void read_clock(const std::string& dir, const json& state, State& st) {
  const std::string path = model_dir::path(dir, CLOCK_FILE);
  json clock = json::object();
  if (std::filesystem::exists(path)) {
    try {
      clock = json::parse(io::read_file(path));
    } catch (const json::exception& e) {
      throw std::runtime_error(path + ": bad JSON: " + escape_text(e.what(), kMaxMessage));
    }
  } else if (state.contains("elapsed")) {
    clock["elapsed"] = state.at("elapsed");
    clock["history"] = state.at("history");
  }
  // {"elapsed": seconds, "history": [{"step", "tokens_per_sec", "elapsed_seconds"}, ...]}, each checked by key.
  const auto number = [&](const json& o, const char* key, const std::string& where) {
    if (!o.contains(key)) return 0.0;
    if (!o.at(key).is_number())
      throw std::runtime_error(path + ": " + where + quote_name(key) + " must be a number, got " +
                               escape_text(o.at(key).dump(), kMaxQuoted));
    return o.at(key).get<double>();
  };
  if (!clock.is_object())
    throw std::runtime_error(path + ": expected a JSON object, got " + escape_text(clock.dump(), kMaxQuoted));
  st.elapsed = number(clock, "elapsed", "");
  const json rows = clock.value("history", json::array());
  if (!rows.is_array())
    throw std::runtime_error(path + ": 'history' must be an array, got " + escape_text(rows.dump(), kMaxQuoted));
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& c = rows[i];
    const std::string where = "history[" + std::to_string(i) + "]: ";
    if (!c.is_object() || !c.contains("step") || !c.at("step").is_number_integer())
      throw std::runtime_error(path + ": " + where + "expected an object with an integer 'step', got " +
                               escape_text(c.dump(), kMaxQuoted));
    const int64_t step = c.at("step").get<int64_t>();
    for (EvalRow& r : st.history)
      if (r.step == step) {
        r.tokens_per_sec = number(c, "tokens_per_sec", where);
        r.elapsed_seconds = number(c, "elapsed_seconds", where);
      }
  }
}

}  // namespace

void write_checkpoint(const std::string& dir, Model& model, const Optimizer& opt, const Generator& gen, State& st,
                      const std::string& title, const WeightAverage* average, double label_smoothing,
                      bool language_model) {
  auto params = model.named_parameters();
  NamedTensors all;
  for (auto& [k, t] : params) all.insert("model." + k, t);
  for (auto& [k, t] : opt.state_dict()) all.insert("optim." + k, t);
  if (average)
    for (const auto& [k, t] : average->named()) all.insert("ema." + k, t);
  // "optimizer_steps" is the count of optimizer steps, which st.step is (a skipped batch advances
  // neither): the Optimizer keeps no count of its own (tfm/optim.h), and the entry stays so that the
  // file is what it always was. read_checkpoint does not need it.
  json s = {{"step", st.step}, {"epoch", st.epoch}, {"batch", st.batch}, {"loss_sum", st.loss_sum},
            {"loss_count", st.loss_count}, {"tokens", st.tokens}, {"skipped", st.skipped},
            {"rng_seed", gen.seed}, {"rng_offset", gen.offset},
            {"optimizer_steps", st.step}, {"history", json::array()}};
  if (!st.text_hash.empty()) s["text_hash"] = st.text_hash;
  if (!st.valid_text_hash.empty()) s["valid_text_hash"] = st.valid_text_hash;
  // Written only when set, so a run without them writes what it always wrote.
  if (st.budget_steps > 0) {
    s["budget_steps"] = st.budget_steps;
    s["decay_start"] = st.decay_start;
    s["budget_seconds"] = st.budget_seconds;
  }
  if (st.budget_ended) s["budget_ended"] = true;
  if (average) s["ema_updates"] = average->updates();
  json clock = {{"elapsed", st.elapsed}, {"history", json::array()}};
  for (const auto& r : st.history) {
    s["history"].push_back(computed_fields(r));
    clock["history"].push_back(clock_fields(r));
  }
  // Every file is written and synced to its temporary first, then each is renamed into place: a write
  // that fails (a full disk) leaves the previous checkpoint whole, not a model of one step beside the
  // state of another. The state is renamed last, as the checkpoint's commit: a kill among the renames
  // leaves files one checkpoint ahead of the state — the clock's extra row read_clock ignores, and the
  // model, metrics and curves the resumed run writes again when it reaches that step.
  io::AtomicFileWriter clock_w(model_dir::path(dir, CLOCK_FILE)), state_w(model_dir::path(dir, STATE_FILE)),
      model_w(model_dir::path(dir, model_dir::MODEL)), metrics_w(model_dir::path(dir, METRICS_FILE)),
      curves_w(model_dir::path(dir, CURVES_FILE));
  const std::string clock_text = clock.dump(1) + "\n", metrics = metrics_csv(st.history),
                    curves = plot_curves_svg(st.history, title, label_smoothing, language_model);
  clock_w.write(clock_text.data(), clock_text.size());
  io::write_safetensors(state_w, all, {{kStateKey, s.dump()}});
  io::write_safetensors(model_w, average ? average->named() : params, {{"format", "pt"}});
  metrics_w.write(metrics.data(), metrics.size());
  curves_w.write(curves.data(), curves.size());
  for (io::AtomicFileWriter* w : {&clock_w, &state_w, &model_w, &metrics_w, &curves_w}) w->sync();
  for (io::AtomicFileWriter* w : {&clock_w, &model_w, &metrics_w, &curves_w, &state_w}) w->commit();
  st.checkpoint_step = st.step;
}

void refuse_existing_run(const std::string& out_dir) {
  for (const char* f : {model_dir::MODEL, STATE_FILE, METRICS_FILE, model_dir::BEST}) {
    const std::string p = model_dir::path(out_dir, f);
    if (!std::filesystem::exists(p)) continue;
    // --resume continues a run whose checkpoint is whole: its trainer state is the checkpoint's last file
    const bool resumable = std::filesystem::exists(model_dir::path(out_dir, model_dir::CONFIG)) &&
                           std::filesystem::exists(model_dir::path(out_dir, STATE_FILE));
    throw std::invalid_argument("--out " + out_dir + " holds a run or model already (" + p + "): " +
                                (resumable
                                     ? "continue a run with --resume " + out_dir + ", train into another --out, or "
                                     : "train into another --out, or ") +
                                "give --force to delete it and start over");
  }
}

void read_checkpoint(const std::string& dir, Model& model, Optimizer& opt, Generator& gen, State& st,
                     WeightAverage* average) {
  const std::string path = model_dir::path(dir, STATE_FILE);
  if (!std::filesystem::exists(path)) {
    // A checkpoint writes the clock first and the state last: a model beside a clock is a run's unfinished first
    // checkpoint; a model without one is a model directory (a run's best/, an import), not a run.
    const std::string model = model_dir::path(dir, model_dir::MODEL);
    if (std::filesystem::exists(model) && !std::filesystem::exists(model_dir::path(dir, CLOCK_FILE)))
      throw std::runtime_error(path + ": no checkpoint to resume from: " + dir +
                               " holds a model, not a run (train from it with --init-from " + dir + ")");
    throw std::runtime_error(
        path +
        ": no checkpoint to resume from (the run stopped before its first checkpoint was whole; start it "
        "again without --resume" +
        (std::filesystem::exists(model) ? ", with --force: " + model + " is left from that unfinished checkpoint)"
                                        : std::string(")")));
  }
  // Zero-copy: load_state_dict and the optimizer copy from the mapping directly (one copy, not
  // two); the mapping is dropped when this function returns.
  const io::SafeTensorsFile f = io::load_safetensors(path, io::LoadOptions{.zero_copy = true});
  auto it = f.metadata.find(kStateKey);
  if (it == f.metadata.end()) throw std::runtime_error(path + ": no '" + std::string(kStateKey) + "' metadata");
  NamedTensors weights, optim, averaged;
  for (const auto& [name, t] : f.tensors) {
    if (name.rfind("model.", 0) == 0) weights.insert(name.substr(6), t);
    else if (name.rfind("optim.", 0) == 0) optim.insert(name.substr(6), t);
    else if (average && name.rfind("ema.", 0) == 0) averaged.insert(name.substr(4), t);
    else throw std::runtime_error(path + ": unexpected tensor " + quote_name(name) +
                                  (name.rfind("ema.", 0) == 0 ? " (a weight average, but the run has no --ema)" : ""));
  }
  model.load_state_dict(weights, path + " (its model.* tensors, named without the prefix)");
  if (average) {
    if (averaged.size() == 0)
      throw std::runtime_error(path + ": no weight average (ema.*) to continue; the run was started without --ema");
    for (const auto& [k, t] : average->named()) {
      auto it = averaged.find(k);
      if (it == averaged.end()) throw std::runtime_error(path + ": missing tensor " + quote_name("ema." + k));
      if (it->second.shape() != t.shape()) throw std::runtime_error(path + ": wrong shape for " + quote_name("ema." + k));
      Tensor dst = t;
      std::copy(it->second.data(), it->second.data() + t.numel(), dst.data());
    }
    if (averaged.size() != average->named().size()) throw std::runtime_error(path + ": unexpected ema.* tensors");
  }
  try {
    const json s = json::parse(it->second);
    // A count of the state: present (unless it has a default), a non-negative integer.
    auto count = [&](const char* key, std::optional<int64_t> fallback = std::nullopt) -> int64_t {
      if (!s.contains(key) && fallback) return *fallback;
      const json& v = s.at(key);
      if (!v.is_number_integer() || (v.is_number_unsigned() ? v.get<uint64_t>() > uint64_t{INT64_MAX} : v.get<int64_t>() < 0))
        throw std::runtime_error(path + ": " + quote_name(key) + " must be a non-negative integer, got " +
                                 escape_text(v.dump(), kMaxQuoted));
      return v.get<int64_t>();
    };
    opt.load_state_dict(optim);
    st.step = count("step");
    st.epoch = count("epoch");
    st.batch = count("batch");
    st.loss_sum = s.at("loss_sum");
    st.loss_count = count("loss_count");
    st.tokens = count("tokens");
    st.skipped = count("skipped");
    st.checkpoint_step = st.step;
    st.text_hash = s.value("text_hash", "");
    st.valid_text_hash = s.value("valid_text_hash", "");
    st.budget_steps = count("budget_steps", 0);
    st.decay_start = count("decay_start", 0);
    st.budget_seconds = s.value("budget_seconds", 0.0);
    st.budget_ended = s.value("budget_ended", false);
    if (average) average->set_updates(count("ema_updates"));
    gen.seed = s.at("rng_seed");
    gen.offset = static_cast<uint64_t>(count("rng_offset"));
    st.history.clear();
    for (const auto& r : s.at("history")) {
      EvalRow row;
      for_each_computed_field(row, [&](const char* name, auto& v) { r.at(name).get_to(v); });
      st.history.push_back(row);
    }
    read_clock(dir, s, st);
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": bad trainer state: " + escape_text(e.what(), kMaxMessage));
  }
}

}  // namespace tfm::train
