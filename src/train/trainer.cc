// src/train/trainer.cc — the training loop: it drives the data (dataset.cc), the step (step.cc),
// evaluation (evaluate.cc) and checkpoints (checkpoint.cc), and reports progress through the hooks
// (tfm/train/trainer.h describes the run directory and the exact-resume argument).
#include "tfm/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "fnv1a.h"
#include "io/file_util.h"
#include "json_fields.h"
#include "tensor_impl.h"
#include "tfm/autocast.h"
#include "tfm/data/batching.h"
#include "tfm/inference.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/model_dir.h"
#include "tfm/models/quantize.h"
#include "tfm/train/evaluate.h"
#include "tfm/train/schedule.h"
#include "train/checkpoint.h"
#include "train/dataset.h"
#include "train/ema.h"
#include "train/step.h"

namespace tfm::train {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kEvalBatch = 256;  // evaluation batch (examples); no gradients, so memory is small
// --skip-nonfinite gives up after this many bad batches in a row: the weights themselves are then
// non-finite (or the data is), and skipping would loop forever without taking a step.
constexpr int64_t kMaxConsecutiveSkips = 100;

// The budget schedule (TrainConfig::time_budget with a decaying schedule). The run measures its step
// rate over kFitSteps steps from step max(warmup, first step of the session + kFitSkip): after the
// warmup, so that the learning rate is at its peak when the decay is planned, and never over the
// session's first kFitSkip steps, which pay one-off costs (oneDNN's first GEMM plans and packing
// buffers, the allocator growing to its steady size, pages touched the first time). 50 steps average
// over the batches' varying lengths (a bucketed batch plan mixes short and long batches) while
// costing little of any budget the schedule is meant for (5–15 s of a 15-minute run on the bench's
// model). The window opens with an evaluation and a checkpoint, timed: the cost each later
// evaluation is planned with; then, when the run ends by decoding its validation set, one batch of that
// decoding, timed: the final decoding's share of the budget, set aside (estimate_final_decoding).
constexpr int64_t kFitSkip = 10;
constexpr int64_t kFitSteps = 50;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
// The progress line's ETA waits until the steps after a session's first have taken this long (a few of them, not
// one warm-up step, set the rate).
constexpr double kEtaSeconds = 1.0;

// The largest step count n ≥ `step` whose remaining cost fits `left` seconds: (n − step) steps of
// `per_step` seconds and, of `eval_cost` each, the evaluations still to come — at the multiples of
// `eval_every` in [step, n] (the count is fixed before step `step`'s own evaluation) and the final
// one at n when n is not such a multiple.
int64_t fit_step_count(int64_t step, double per_step, double eval_cost, int64_t eval_every, double left) {
  const auto evals = [&](int64_t n) { return n / eval_every - (step - 1) / eval_every + (n % eval_every != 0 ? 1 : 0); };
  const auto cost = [&](int64_t n) {
    return static_cast<double>(n - step) * per_step + static_cast<double>(evals(n)) * eval_cost;
  };
  if (!(left > 0)) return step;
  // Binary search on [lo, hi): cost(lo) ≤ left, cost(hi) > left (cost grows with n).
  int64_t lo = step;
  const double most = per_step > 0 ? left / per_step + 1 : 1e12;
  int64_t hi = step + static_cast<int64_t>(std::min(most, 1e12)) + 1;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (cost(mid) <= left ? lo : hi) = mid;
  }
  return lo;
}

// The model the data asks for: vocabulary sizes and special ids from the vocabularies, room for the
// longest source and bos + target (+ eos), and the architecture's defaults made explicit.
ModelConfig model_config_for(const TrainConfig& c, const Dataset& ds) {
  ModelConfig m = c.model;
  m.src_vocab_size = ds.src_vocab.size();
  m.tgt_vocab_size = ds.tgt_vocab.size();
  m.pad_id = ds.tgt_vocab.pad_id();
  m.bos_id = ds.tgt_vocab.bos_id();
  m.eos_id = ds.tgt_vocab.eos_id();
  if (ds.src_vocab.pad_id() != m.pad_id) throw std::invalid_argument("source and target vocabularies disagree on <pad>");
  if (c.text()) {
    m.max_len = c.block_size;  // a language model's positions are its context
  } else {
    const int64_t need = (c.task ? data::kTaskMaxLen : c.max_tokens) + 2;
    m.max_len = std::max(m.max_len, need);
  }
  m = m.with_arch_defaults();
  return m;
}

// The model of a run started from the model directory c.init_from: `dir`'s, with the run's dropout and
// drop_path. Every other field of c.model must have been left at ModelConfig{}'s value (throws naming
// the fields that were not, since they would be ignored).
ModelConfig init_model_config(const TrainConfig& c, const ModelConfig& dir) {
  const ModelConfig defaults;
  JsonWriter given, def;
  ModelConfig::fields(c.model, given);
  ModelConfig::fields(defaults, def);
  std::string set;
  for (const auto& [key, value] : given.j.items())
    if (fixed_by_init_from(key) && value != def.j.at(key)) set += (set.empty() ? "" : ", ") + key;
  if (!set.empty())
    throw std::invalid_argument("train config: init_from takes the model from " +
                                model_dir::path(c.init_from, model_dir::CONFIG) +
                                "; only dropout and drop_path of the model may be set with it (got " + set + ")");
  ModelConfig m = dir;
  m.dropout = c.model.dropout;
  m.drop_path = c.model.drop_path;
  return m;
}

// The time budget config.json of the run in c.out_dir was saved with (0: none), before this session's length
// replaces it.
double saved_time_budget(const TrainConfig& c) {
  const std::string path = model_dir::path(c.out_dir, model_dir::CONFIG);
  return nlohmann::ordered_json::parse(io::read_file(path)).at("train").value("time_budget", 0.0);
}

// A resumed run's length as the resuming command gave it (--epochs, --max-steps, --time-budget replace the
// saved one): config.json's train object takes it when the session takes its first step, so that the run
// resumed once more goes on to it (a resume that trains nothing leaves the file as it was).
void save_length(const TrainConfig& c) {
  const std::string path = model_dir::path(c.out_dir, model_dir::CONFIG);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(io::read_file(path));
  nlohmann::ordered_json& t = j.at("train");
  if (t.value("epochs", int64_t{0}) == c.epochs && t.value("max_steps", int64_t{0}) == c.max_steps &&
      t.value("time_budget", 0.0) == c.time_budget)
    return;
  t["epochs"] = c.epochs;
  t["max_steps"] = c.max_steps;
  t["time_budget"] = c.time_budget;
  io::write_file_atomic(path, j.dump(2) + "\n");
}

// The batches predict() decodes `set` in (data::plan_eval of the sources' lengths, kEvalBatch a batch), as indices
// into it: evaluate() on each batch's EvalSet (batch_set) in turn decodes the same batches, row for row, as one
// evaluate() on the whole set, and their figures add up to its figures.
data::BatchPlan decode_batches(const EvalSet& set) {
  std::vector<data::Example> lengths(set.sources.size());  // what plan_eval reads of predict()'s examples
  for (size_t i = 0; i < set.sources.size(); ++i) lengths[i].src.resize(set.sources[i].size());
  data::BatchSettings bs;
  bs.batch_size = kEvalBatch;
  return data::plan_eval(lengths, bs);
}

// The examples `rows` of `set`, in that order.
EvalSet batch_set(const EvalSet& set, const std::vector<int64_t>& rows) {
  EvalSet b;
  for (const int64_t i : rows) {
    b.sources.push_back(set.sources[static_cast<size_t>(i)]);
    b.references.push_back(set.references[static_cast<size_t>(i)]);
    if (!set.reference_texts.empty()) b.reference_texts.push_back(set.reference_texts[static_cast<size_t>(i)]);
  }
  return b;
}

// A model directory's vocabularies and tokenizers, for load_dataset.
SavedVocabs saved_vocabs(const TrainedModel& m) {
  return SavedVocabs{&m.src_vocab, &m.tgt_vocab, &m.src_tokenizer, &m.tgt_tokenizer};
}

// A run started from a model directory trains its model as it is, so every sequence of the data must
// fit the model's position table.
void check_fits(const ModelConfig& m, const Dataset& ds, const TrainConfig& c) {
  if (c.text()) {
    if (c.block_size > m.max_len)
      throw std::invalid_argument("train config: block_size " + std::to_string(c.block_size) +
                                  " exceeds the context of the model of " + c.init_from + " (max_len " +
                                  std::to_string(m.max_len) + ")");
    return;
  }
  // A shifted target has bos before its input and eos after its output.
  const int64_t extra = m.target_layout() == data::TargetLayout::SHIFTED ? 1 : 0;
  int64_t longest = c.task ? data::kTaskMaxLen + extra : 0;
  for (const auto* set : {&ds.train, &ds.valid})
    for (const auto& e : *set)
      longest = std::max({longest, static_cast<int64_t>(e.src.size()), static_cast<int64_t>(e.tgt.size()) + extra});
  if (longest > m.max_len)
    throw std::invalid_argument((c.task ? "task " + std::string(enum_name(*c.task)) : c.train_path + " / " + c.valid_path) +
                                ": a sequence needs " + std::to_string(longest) + " positions, but the model of " +
                                c.init_from + " has max_len " + std::to_string(m.max_len) +
                                " (a lower --max-tokens skips longer lines)");
}

// What to try about the gradient's size: clipping when it is off, a tighter clip when it is on.
std::string clip_advice(const TrainConfig& c) {
  return c.clip_norm > 0 ? "a lower --clip-norm (now " + number_text(c.clip_norm) + ")"
                         : std::string("--clip-norm 1.0");
}

std::string diverged_message(const TrainConfig& c, const State& st, const StepOutcome& s) {
  const std::string where = st.checkpoint_step >= 0 ? "The last good checkpoint (step " +
                                                           std::to_string(st.checkpoint_step) + ") is kept in " +
                                                           c.out_dir + "."
                                                     : "No checkpoint was written yet.";
  return "training diverged at step " + std::to_string(st.step + 1) + " (epoch " + std::to_string(st.epoch + 1) +
         "): " + (s.loss_finite ? "the gradient" : "the loss") + " is not finite (loss " + number_text(s.loss) + "). " +
         where + " Usual fixes: a lower --lr (now " + number_text(c.lr) + "), a longer --warmup (now " +
         std::to_string(c.warmup) + "), " + clip_advice(c) + ", or --skip-nonfinite to skip such batches.";
}

// One run: its configuration, data, model, optimizer and position, and the loop's steps.
class Run {
 public:
  Run(const TrainConfig& config, const TrainHooks& hooks, bool resume);
  TrainResult train();

 private:
  // The data and the model, one function per start mode; each reads a model directory through load_model_dir
  // (setup_resume first asks is_quantized_model_dir, to refuse an int8 directory).
  void setup_fresh();      // the data sizes a new model
  void setup_init_from();  // c_.init_from's model, weights, vocabularies and tokenizers
  void setup_resume();     // c_.out_dir's vocabularies and tokenizers; its weights come from its checkpoint
  void load_data(const SavedVocabs& saved);  // ds_, its notes reported
  void build_model();                        // mc_ checked, then model_ drawn from the run's seed
  Comm* processes() { return comm_.single() ? nullptr : &comm_; }
  void note(ProgressEvent::Kind kind, const std::string& msg) const;
  ProgressEvent event(ProgressEvent::Kind kind) const;  // the fields every event shares
  void load_epoch(int64_t e);
  const std::vector<data::Example>& train_set() const { return c_.task ? epoch_examples_ : ds_.train; }
  int64_t epoch_batches() const { return c_.text() ? text_batches_ : static_cast<int64_t>(plan_.size()); }
  // Epoch 0's batch count, whatever epoch is loaded: the per-epoch count a run's length is planned with,
  // so that a resumed run plans the fresh run's length (with batch_tokens an epoch's count depends on its
  // shuffle, so the epoch a run resumes in may count other batches).
  int64_t first_epoch_batches() const {
    if (c_.text() || plan_epoch_ == 0 || c_.batch.batch_tokens == 0) return epoch_batches();
    return static_cast<int64_t>(data::plan_epoch(c_.task ? task_epoch(c_, 0) : ds_.train, c_.batch, c_.seed, 0).size());
  }
  // The batch at (epoch, batch) — with several processes only the rows this rank's parts cover,
  // padded to the whole batch's lengths; text windows may draw from gen_.
  ShardedStep::BatchRows next_batch(data::TokenBatch& rows);
  void evaluate_and_record();
  void describe();  // writes the model description of a fresh run once
  void undescribe() noexcept;  // removes it again (its first checkpoint failed)
  void checkpoint();
  void write_best();    // keep_best: the model just evaluated, to out_dir/best
  // The validation set's decoding batches (decode_batches), made on first use; rank 0 only.
  const data::BatchPlan& final_batches();
  std::optional<Metrics> decode_final();      // the final decoded figures; nullopt: a stop was asked for
  void estimate_final_decoding();             // MEASURING, at the window's opening: decode_cost_
  std::string budget_too_short_note() const;  // the clock ended a MEASURING run
  bool stop_asked() const { return stop_pending_ || (hooks_.should_stop && hooks_.should_stop(st_.step)); }
  bool out_of_patience() const;  // patience: that many evaluations since the best one
  void agree_across_processes();  // under mpirun: every rank runs the same configuration on the same data and state
  void plan_length();   // total_steps_, schedule_, eval cadence and the budget schedule's mode
  void fix_length();    // the budget schedule: rank 0 fits the step count, every rank adopts it
  double lr_at(int64_t step) const;  // the learning rate of optimizer step `step` (1-based)
  // The run's clock (hooks_.clock, or the steady clock) in seconds; elapsed(): over all sessions.
  double now() const {
    return hooks_.clock ? hooks_.clock(st_.step)
                        : std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  }
  double elapsed() const { return elapsed_before_ + now() - session_start_; }
  // A resumed run whose time budget, not fixed as a step count, is spent already: the run ended on it (the
  // checkpoint's flag) and is given no more time, or the budget is a new one this resume gives (another than
  // config.json's) that the run's clock has passed. A run interrupted past its own budget is not spent: it takes
  // the step the uninterrupted run took. The checkpoint's flag and clock and config.json: the same on every rank.
  bool budget_spent() const {
    return c_.time_budget > 0 && budget_ != Budget::FIXED && elapsed_before_ >= c_.time_budget &&
           (st_.budget_ended || budget_given_);
  }

  TrainConfig c_;
  const TrainHooks& hooks_;
  Comm single_;  // the process alone, when hooks_.comm is null
  Comm& comm_;
  bool lead_;    // rank 0: writes the files and reports progress
  bool described_ = false;  // the out dir holds this run's config.json and vocabularies (describe())
  Dataset ds_;
  ModelConfig mc_;
  Generator gen_;  // initialisation, then dropout
  // Rank 0: the run directory, made if missing and locked for the run's life (io::OutputDirectory). One this run made
  // is removed again, under its lock, if the run leaves it empty (it failed before its first checkpoint), whether
  // the constructor or train() threw; one it made but another run locked first is that run's, and stays.
  std::optional<io::OutputDirectory> out_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Optimizer> opt_;
  std::vector<Tensor> params_;
  std::unique_ptr<ShardedStep> step_;  // one process: one rank holding every part
  State st_;
  std::unique_ptr<WeightAverage> average_;  // --ema; null: none
  double session_start_ = 0;                // now() when this session started
  Clock::time_point session_wall_ = Clock::now();  // the same on the steady clock (throughput, ETA)
  double elapsed_before_ = 0;
  int64_t session_first_step_ = 0;
  // seconds_since(session_wall_) when this session's first step ended (−1 before): the ETA's rate leaves out that
  // step and what came before it (its warm-up: first allocations, weight packing, a step-0 evaluation).
  double first_step_seconds_ = -1;

  // The plan of the current epoch (task data is regenerated per epoch, so it is rebuilt lazily).
  int64_t plan_epoch_ = -1;
  std::vector<data::Example> epoch_examples_;
  data::BatchPlan plan_;
  int64_t text_batches_ = 0;  // text data: batches per epoch (windows of the training text / batch size)

  int64_t total_steps_ = 0;  // 0 = unknown
  Schedule schedule_ = Schedule::CONSTANT;  // Budget::OFF's schedule (the budget schedule is budget_lr)
  // The budget schedule: OFF (the schedule's own), MEASURING (the step rate, stopping on the clock
  // meanwhile), FIXED (st_.budget_steps from st_.decay_start: an ordinary run of known length).
  enum class Budget { OFF, MEASURING, FIXED } budget_ = Budget::OFF;
  int64_t fit_from_ = 0;     // MEASURING: the step at which the window opens
  double fit_t0_ = 0;        // elapsed() when it opened (after its evaluation)
  double eval_cost_ = 0;     // seconds of the window's opening evaluation and checkpoint
  double window_evals_ = 0;  // seconds of other evaluations inside the window
  bool eval_at_epoch_end_ = false;
  int64_t eval_every_ = 0;
  double lr_now_ = 0;
  Clock::time_point since_eval_ = Clock::now();
  // st_.tokens a resumed run's checkpoint carried in: trained before since_eval_ started, so left out of the
  // next evaluation's tokens/s (0 after it).
  int64_t tokens_before_clock_ = 0;
  int64_t tokens_session_ = 0;
  bool best_pending_ = false;  // keep_best: the last evaluation's model is the best; the checkpoint writes it
  bool budget_given_ = false;  // resumed with another time budget than config.json's
  bool length_pending_ = false;  // resumed: config.json takes the session's length before its first step
  // A stop rank 0 was asked for while it decoded alone (estimate_final_decoding): acted on after the step (with
  // several processes, agreed with the next step's).
  bool stop_pending_ = false;
  data::BatchPlan final_batches_;
  bool final_batches_made_ = false;
  // MEASURING: the final decoding's estimated seconds, which fix_length leaves it (0: not measured, or nothing to
  // decode).
  double decode_cost_ = 0;
};

Run::Run(const TrainConfig& config, const TrainHooks& hooks, bool resume)
    : c_(config), hooks_(hooks), comm_(hooks.comm ? *hooks.comm : single_), lead_(comm_.rank() == 0) {
  session_start_ = now();
  // One part per process unless given; the resolved count is saved with the run.
  if (c_.grad_shards == 0) c_.grad_shards = comm_.size();
  // A negative count is validate()'s to refuse, as it is for one process.
  if (c_.grad_shards > 0 && c_.grad_shards % comm_.size() != 0)
    throw std::invalid_argument("train config: grad_shards " + std::to_string(c_.grad_shards) +
                                " is not a multiple of the " + std::to_string(comm_.size()) +
                                " processes (each process computes grad_shards / processes parts of every batch)");
  c_ = c_.with_run_defaults();
  try {
    c_.validate();
  } catch (const std::invalid_argument& e) {  // a resumed run's settings are its config.json's: said of that file
    if (!resume) throw;
    throw std::invalid_argument(model_dir::path(c_.out_dir, model_dir::CONFIG) + ": " + e.what());
  }
  if (c_.init_from.empty() && c_.model.family().data == DataKind::TEXT && !c_.text())
    throw std::invalid_argument("train config: text_path is required by arch " + std::string(enum_name(c_.model.arch)) +
                                " (" + c_.model.family().summary + ")");

  if (resume) setup_resume();
  else if (!c_.init_from.empty()) setup_init_from();
  else setup_fresh();

  if (lead_) {
    // One run at a time in a directory: a second (a fresh run, or a --resume while the first still writes) would
    // delete the first's files or mix the two runs' (held until the run ends, by rank 0, which writes the files).
    // A tfm quantize, import or export --force replacing the directory holds it too.
    out_.emplace(c_.out_dir);
    out_->lock(
        "another tfm train is running in this directory, or a tfm quantize, import or export is replacing it (it "
        "holds the directory's lock): wait for it to end, or train into another --out");
    if (!resume && !hooks_.replace_run) refuse_existing_run(c_.out_dir);  // one that ended since the caller looked
    io::require_writable_directory(c_.out_dir);  // now, not at the first checkpoint after the training
  }
  described_ = resume;  // a fresh run describes itself with its first checkpoint (describe())

  model_->train();
  opt_ = make_optimizer(c_, *model_);
  params_ = model_->parameters();
  step_ = std::make_unique<ShardedStep>(params_, c_.grad_shards, comm_);
  step_->set_precision(c_.dtype);
  if (c_.dtype == Precision::BFLOAT16 && !bf16_matmul_accelerated())
    note(ProgressEvent::Kind::NOTE,
         "bf16: this CPU has no AVX512-BF16 or AMX-BF16, so the Linear layers' bfloat16 "
         "matmuls are emulated (the same numbers up to summation order, slower than "
         "f32) and attention's products stay float32 (a CPU with AVX512-BF16 rounds "
         "them to bfloat16 where a head's scores pass 64 x 64: other numbers there)");
  if (c_.ema) {  // from the weights the run starts from (a checkpoint's average replaces them on resume)
    average_ = std::make_unique<WeightAverage>(model_->named_parameters(), *c_.ema);
    step_->set_average(average_.get());
  }
  if (resume) {
    // A run killed mid-write leaves hidden temporary files beside the complete checkpoint: drop them.
    if (lead_)
      for (const char* f : {model_dir::MODEL, STATE_FILE, CLOCK_FILE, METRICS_FILE, CURVES_FILE, model_dir::CONFIG})
        io::remove_stale_temp_files(model_dir::path(c_.out_dir, f));
    if (lead_)
      io::remove_stale_staging(
          model_dir::path(c_.out_dir, BEST_DIR));  // and the staging directory of a best model being written
    budget_given_ = c_.time_budget > 0 && saved_time_budget(c_) != c_.time_budget;
    read_checkpoint(c_.out_dir, *model_, *opt_, gen_, st_, average_.get());
    // The texts the run started with: the training text, and the validation text, whose losses are compared across
    // the run (metrics, --keep-best, --patience; a state written before it was kept has no hash of it).
    const auto same_text = [&](const std::string& path, const char* what, const std::string& now,
                               const std::string& saved) {
      if (now != saved)
        throw std::invalid_argument(path + ": not the " + what + " text this run started with (its hash is " + now +
                                    ", " + model_dir::path(c_.out_dir, STATE_FILE) + " says " +
                                    (saved.empty() ? std::string("none") : saved) +
                                    "); resume with the original text, or start a new run");
    };
    if (c_.text()) same_text(c_.text_path, "training", ds_.text_train.hash(), st_.text_hash);
    if (c_.text() && !c_.valid_text_path.empty() && !st_.valid_text_hash.empty())
      same_text(c_.valid_text_path, "validation", ds_.text_valid.hash(), st_.valid_text_hash);
    note(ProgressEvent::Kind::NOTE, "resuming " + c_.out_dir + " at step " + std::to_string(st_.step) + " (epoch " +
                                        std::to_string(st_.epoch + 1) + ")");
  }
  if (c_.text()) st_.text_hash = ds_.text_train.hash();
  if (c_.text() && !c_.valid_text_path.empty()) st_.valid_text_hash = ds_.text_valid.hash();
  if (!comm_.single()) agree_across_processes();
  if (resume) {
    // write_best runs after the checkpoint that records its evaluation as the best: a kill while it wrote left
    // out_dir/best stale or missing (its staging directories removed above). The best evaluation being the
    // checkpoint's own, the weights just loaded are that model: it is written again. (An older best was written
    // whole before training went on.)
    const int64_t best = best_row(st_.history);
    if (c_.keep_best && best >= 0 && best + 1 == static_cast<int64_t>(st_.history.size()) &&
        st_.history.back().step == st_.step)
      write_best();
  }
  elapsed_before_ = st_.elapsed;
  session_first_step_ = st_.step;
  session_start_ = now();
  session_wall_ = Clock::now();

  load_epoch(st_.epoch);
  plan_length();  // refuses a length the run cannot take
  length_pending_ = resume && lead_;
  if (resume && c_.max_steps > 0 && st_.step >= c_.max_steps)
    note(ProgressEvent::Kind::NOTE, "the run is at step " + std::to_string(st_.step) + " already, --max-steps " +
                                        std::to_string(c_.max_steps) + ": nothing to train (a larger --max-steps "
                                        "continues it)");
  if (resume && budget_spent())
    note(ProgressEvent::Kind::NOTE, "the run spent its --time-budget already (" + number_text(st_.elapsed) + " of " +
                                        number_text(c_.time_budget) + " s): nothing to train");
  if (budget_ == Budget::OFF && total_steps_ > 0 && c_.warmup >= total_steps_ && st_.step == 0) {
    char buf[256];  // a run that ends inside its warmup: the learning rate only ever rises
    const long long fit = std::max<int64_t>(1, total_steps_ / 10);
    if (c_.warmup == total_steps_)
      std::snprintf(buf, sizeof buf,
                    "warmup: all of the run's %lld steps are warmup steps, so the learning rate reaches --lr %.3g only "
                    "at the last step and never decays; a shorter --warmup (e.g. %lld) fits the run",
                    static_cast<long long>(total_steps_), static_cast<double>(c_.lr), fit);
    else
      std::snprintf(buf, sizeof buf,
                    "warmup: the run's %lld steps end within its %lld warmup steps, so the learning rate rises only to "
                    "%.3g (--lr %.3g) and never decays; a shorter --warmup (e.g. %lld) fits the run",
                    static_cast<long long>(total_steps_), static_cast<long long>(c_.warmup),
                    static_cast<double>(c_.lr) * static_cast<double>(total_steps_) / static_cast<double>(c_.warmup),
                    static_cast<double>(c_.lr), fit);
    note(ProgressEvent::Kind::NOTE, buf);
  }
  since_eval_ = Clock::now();
  tokens_before_clock_ = st_.tokens;
}

// Under mpirun every rank must run the same step on the same data: a rank given another option, another file or a
// stale copy of the run directory would pair buffers of other sizes in the exchanges (memory corruption) or train a
// model no single process would. Before the first step the ranks compare fingerprints (64-bit FNV-1a) of:
//   the configuration — the train and model config as config.json saves it, without the paths (copies of the files
//     may sit elsewhere on each machine), and the exchange's bucket size;
//   the data — the tokenized training and validation examples, or the texts' hashes, and the vocabularies' sizes;
//   the starting point — step, epoch, batch, the generator's position, and the parameters' bytes (after a resume,
//     the checkpoint's; else the initialisation's).
// A difference is an error on every rank naming the first differing part and rank.
void Run::agree_across_processes() {
  using Json = nlohmann::ordered_json;
  Json config = Json::parse(c_.to_json(/*with_model=*/true));
  for (const char* path : {"train_path", "valid_path", "text_path", "valid_text_path", "token_cache", "src_spm_model",
                           "tgt_spm_model", "spm_model", "bpe_vocab", "bpe_merges", "out_dir", "init_from"})
    config.erase(path);
  const std::string config_text = config.dump();
  const int64_t bucket = comm_.bucket_bytes();
  uint64_t fingerprint[3];
  fingerprint[0] = fnv1a(&bucket, sizeof bucket, fnv1a(config_text.data(), config_text.size()));
  uint64_t h = kFnvOffset;
  for (const std::vector<data::Example>* set : {&ds_.train, &ds_.valid})
    for (const data::Example& e : *set) {
      const int64_t sizes[2] = {static_cast<int64_t>(e.src.size()), static_cast<int64_t>(e.tgt.size())};
      h = fnv1a(sizes, sizeof sizes, h);
      h = fnv1a(e.src.data(), e.src.size() * sizeof(int32_t), h);
      h = fnv1a(e.tgt.data(), e.tgt.size() * sizeof(int32_t), h);
    }
  for (const std::string& t : {ds_.text_train.hash(), ds_.text_valid.hash()}) h = fnv1a(t.data(), t.size() + 1, h);
  const int64_t vocabs[4] = {ds_.src_vocab.size(), ds_.tgt_vocab.size(), ds_.text_train.size(), ds_.text_valid.size()};
  fingerprint[1] = fnv1a(vocabs, sizeof vocabs, h);
  // Everything of the state each rank then acts on alone: the counts, the clock and the budget (whether to stop),
  // the history (--patience, --keep-best), the weights, the optimizer's moments and the average.
  const uint64_t position[8] = {static_cast<uint64_t>(st_.step),
                                static_cast<uint64_t>(st_.epoch),
                                static_cast<uint64_t>(st_.batch),
                                gen_.seed,
                                gen_.offset,
                                static_cast<uint64_t>(st_.budget_steps),
                                static_cast<uint64_t>(st_.decay_start),
                                static_cast<uint64_t>(st_.budget_ended)};
  h = fnv1a(position, sizeof position);
  for (const double x : {elapsed_before_, st_.budget_seconds}) h = fnv1a(&x, sizeof x, h);
  for (const EvalRow& r : st_.history) {
    h = fnv1a(&r.step, sizeof r.step, h);
    h = fnv1a(&r.valid_loss, sizeof r.valid_loss, h);
  }
  const auto tensors = [&](const NamedTensors& named) {
    for (const auto& [name, t] : named)
      if (t.dtype() == DType::FLOAT32) h = fnv1a(t.data(), static_cast<size_t>(t.numel()) * sizeof(float), h);
  };
  tensors(model_->named_parameters());
  tensors(opt_->state_dict());
  if (average_) tensors(average_->named());
  fingerprint[2] = h;
  // Exchanged as 32-bit halves, each exact in a double.
  const int P = comm_.size();
  std::vector<double> mine(6), all(static_cast<size_t>(6 * P));
  for (int i = 0; i < 3; ++i) {
    mine[static_cast<size_t>(2 * i)] = static_cast<double>(fingerprint[i] >> 32);
    mine[static_cast<size_t>(2 * i + 1)] = static_cast<double>(fingerprint[i] & 0xFFFFFFFFu);
  }
  // Untimed: the ranks arrive apart here (each read and encoded its data; rank 0 cleaned the run directory), as at
  // the first step.
  comm_.allgather(mine.data(), 6, all.data(), /*timed=*/false);
  static const char* const kParts[3] = {
      "the configuration (the options given, the model, --bucket-mb; paths aside)",
      "the data (the training and validation examples as tokenized, or the texts, and the vocabularies)",
      "the starting point (the step, the generator and the weights: after --resume, the checkpoint each read)"};
  for (int i = 0; i < 3; ++i)
    for (int r = 1; r < P; ++r) {
      const size_t a = static_cast<size_t>(2 * i), b = static_cast<size_t>(6 * r + 2 * i);
      if (all[a] != all[b] || all[a + 1] != all[b + 1])
        throw std::invalid_argument("process " + std::to_string(r) + " of " + std::to_string(P) +
                                    " does not agree with process 0 on " + kParts[i] +
                                    ": every process must run the same command on the same files (copies of the data "
                                    "and of the run directory must be the same bytes)");
    }
}

// The budget schedule: with a time budget and a decaying schedule (cosine, or auto) the run's length
// is a step count fitted to the budget, once (fix_length), saved in its state; from then on it is a
// run of that length (no clock). A resumed run continues to the saved count; a different time budget
// is refused once it is fixed; --max-steps or --epochs on resume (which clear the time budget, the
// length options replacing the run's length together) replace the count, the decay still starting at
// the saved step.
void Run::plan_length() {
  // Exact for text, TSV and batch_size; with batch_tokens epoch 0's count stands for every epoch's.
  const int64_t per_epoch = first_epoch_batches();
  total_steps_ = c_.epochs > 0 ? c_.epochs * per_epoch : 0;
  if (c_.max_steps > 0) total_steps_ = total_steps_ > 0 ? std::min(total_steps_, c_.max_steps) : c_.max_steps;
  // Evaluate every eval_every steps; by default at each epoch end in epoch mode, else 10 times a run
  // (every 200 steps when the length is a time budget: the count a budget fixes later leaves it so).
  eval_at_epoch_end_ = c_.eval_every == 0 && c_.epochs > 0 && c_.max_steps == 0;
  eval_every_ = c_.eval_every > 0  ? c_.eval_every
                : eval_at_epoch_end_ ? 0
                : total_steps_ > 0   ? std::max<int64_t>(1, total_steps_ / 10)
                                     : 200;
  const bool decaying = c_.schedule == Schedule::COSINE || c_.schedule == Schedule::AUTO;
  if (st_.budget_steps > 0) {  // fixed in an earlier session
    if (c_.time_budget > 0 && c_.time_budget != st_.budget_seconds)
      throw std::invalid_argument(
          "--time-budget: the run in " + c_.out_dir + " fixed its length at " + std::to_string(st_.budget_steps) +
          " steps to fit its budget of " + std::to_string(st_.budget_seconds) +
          " s; resume without --time-budget to continue to that step, or give --max-steps to replace it");
    if (c_.time_budget == 0) st_.budget_steps = std::max<int64_t>(total_steps_, st_.decay_start);  // replaced
    total_steps_ = st_.budget_steps;
    budget_ = Budget::FIXED;
  } else if (c_.time_budget > 0 && decaying) {
    budget_ = Budget::MEASURING;
    fit_from_ = std::max(c_.warmup, session_first_step_ + kFitSkip);
  }
  schedule_ = budget_ == Budget::OFF ? resolve_schedule(c_.schedule, c_.warmup, total_steps_) : Schedule::COSINE;
  if (schedule_ == Schedule::COSINE && budget_ == Budget::OFF && total_steps_ <= c_.warmup)
    throw std::invalid_argument(
        "--schedule cosine: the run's " + std::to_string(total_steps_) + " steps end within its --warmup " +
        std::to_string(c_.warmup) + ", so there is nothing to decay; give a shorter --warmup (e.g. " +
        std::to_string(std::min<int64_t>(std::max<int64_t>(1, total_steps_ / 10), total_steps_ - 1)) +
        "), more steps, or --schedule auto (which, for a run this short, only warms up)");
}

double Run::lr_at(int64_t step) const {
  switch (budget_) {
    case Budget::OFF:
      return scheduled_lr(schedule_, c_.lr, step, c_.warmup, total_steps_, c_.min_lr);
    case Budget::MEASURING:
      return budget_lr(c_.lr, step, c_.warmup, c_.warmup, 0, c_.min_lr);
    case Budget::FIXED:
      break;
  }
  return budget_lr(c_.lr, step, c_.warmup, st_.decay_start, total_steps_, c_.min_lr);
}

// At the window's end: per_step = (elapsed − fit_t0_ − window_evals_) / kFitSteps on rank 0's clock,
// and the count is the largest whose steps and evaluations (eval_cost_ each) fit what is left of the
// budget less the final decoding's decode_cost_ (fit_step_count), capped by the length --epochs or --max-steps
// give. Every rank takes rank 0's.
void Run::fix_length() {
  int64_t n = 0;
  std::string why;
  if (lead_) {
    const double t = elapsed();
    const double per_step = (t - fit_t0_ - window_evals_) / static_cast<double>(kFitSteps);
    const int64_t every = eval_every_ > 0 ? eval_every_ : std::max<int64_t>(1, epoch_batches());
    // The final decoding (estimate_final_decoding) comes after the last step and its evaluation: its time is set
    // aside first.
    n = fit_step_count(st_.step, per_step, eval_cost_, every, c_.time_budget - t - decode_cost_);
    if (total_steps_ > 0) n = std::min(n, total_steps_);
    char decoding[64] = "";
    if (!c_.text()) std::snprintf(decoding, sizeof decoding, ", %.1f s the final decoding", decode_cost_);
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "time budget: %lld steps fit the %.1f s left (%.3f s a step over steps %lld-%lld, %.1f s an "
                  "evaluation%s); the learning rate decays from step %lld to --min-lr at step %lld",
                  static_cast<long long>(n), c_.time_budget - t, per_step, static_cast<long long>(fit_from_ + 1),
                  static_cast<long long>(st_.step), eval_cost_, decoding, static_cast<long long>(st_.step),
                  static_cast<long long>(n));
    why = buf;
  }
  if (!comm_.single()) {
    std::string bytes = std::to_string(n);
    comm_.broadcast(bytes, /*timed=*/true);
    n = std::stoll(bytes);
  }
  st_.budget_steps = n;
  st_.decay_start = st_.step;
  st_.budget_seconds = c_.time_budget;
  total_steps_ = n;
  budget_ = Budget::FIXED;
  note(ProgressEvent::Kind::NOTE, why);
}

const data::BatchPlan& Run::final_batches() {
  if (!final_batches_made_) final_batches_ = decode_batches(ds_.valid_set), final_batches_made_ = true;
  return final_batches_;
}

// The final figures: the validation set decoded (greedy) by rank 0, with the average's weights when there is one
// (those model.safetensors holds), batch by batch. should_stop is polled before each batch: a stop leaves the
// rest undone (nullopt). With a fitted time budget the decoding is part of it: once the budget is spent it ends,
// after its first batch at least, and the figures are those of the sources decoded (the shortest: predict() decodes
// them in order of length), which a note says.
std::optional<Metrics> Run::decode_final() {
  const data::BatchPlan& batches = final_batches();
  if (average_) average_->swap_with(params_);
  // Decoding allocates tensors of sizes the steps never used (its caches grow a token at a time): the steps' idle
  // cached blocks go back to malloc first, so that the decoding reuses them and the run's peak memory stays the
  // steps' (tensor_impl.h, the block cache).
  allocator_release_cache();
  Metrics m;
  size_t done = 0;
  bool stopped = false;
  {
    InferenceMode scope(InferenceMode::current_precision());  // every batch's predict() shares its packed weights
    for (const std::vector<int64_t>& b : batches) {
      if (stop_asked()) {
        stopped = true;
        break;
      }
      // A run whose step count was fitted to the budget (leaving the decoding its estimated time) ends the
      // decoding with the budget; one stopped on the clock (--schedule constant, or a budget too short to fit)
      // decodes the whole set, as tfm eval would.
      if (done > 0 && budget_ == Budget::FIXED && c_.time_budget > 0 && elapsed() >= c_.time_budget) break;
      m.add(evaluate(*model_, ds_.src_vocab, ds_.tgt_vocab, batch_set(ds_.valid_set, b), DecodeOptions{}, kEvalBatch,
                     [&](const data::Tokens& t) { return ds_.tgt_tokenizer.detokenize(t); }));
      ++done;
    }
  }
  if (average_) average_->swap_with(params_);
  if (stopped) return std::nullopt;
  if (done < batches.size()) {
    int64_t decoded = 0;
    for (size_t i = 0; i < done; ++i) decoded += static_cast<int64_t>(batches[i].size());
    note(ProgressEvent::Kind::NOTE,
         "time budget: spent after the final decoding of " + std::to_string(decoded) + " of the " +
             std::to_string(ds_.valid_set.sources.size()) +
             " validation sources (the shortest; they are decoded in order of length): the final figures are "
             "theirs (tfm eval decodes a whole set)");
  }
  return m;
}

// MEASURING, at the window's opening (its evaluation and checkpoint just done): the final decoding's cost, for
// fix_length to set aside — its middle batch decoded and timed (on the run's clock, should_stop's poll included),
// times its batch count. Rank 0 decodes alone, right after the checkpoint it writes alone, which the other ranks
// wait for untimed; a stop it is asked for meanwhile is acted on after the step, and with several processes joins
// the next step's agreement.
void Run::estimate_final_decoding() {
  if (!lead_ || c_.text()) return;
  const data::BatchPlan& batches = final_batches();
  if (batches.empty()) return;
  const double t = elapsed();
  if (stop_asked()) {
    stop_pending_ = true;
    return;
  }
  if (average_) average_->swap_with(params_);
  allocator_release_cache();
  evaluate(*model_, ds_.src_vocab, ds_.tgt_vocab, batch_set(ds_.valid_set, batches[batches.size() / 2]),
           DecodeOptions{}, kEvalBatch, [&](const data::Tokens& x) { return ds_.tgt_tokenizer.detokenize(x); });
  if (average_) average_->swap_with(params_);
  decode_cost_ = (elapsed() - t) * static_cast<double>(batches.size());
}

// The clock ended a run still measuring its step rate (the budget ran out before the warmup and the window were
// over): its learning rate never decayed, which the budget schedule is for. Says so, and what lets it decay.
std::string Run::budget_too_short_note() const {
  const int64_t end = fit_from_ + kFitSteps;
  const int64_t warmup = std::max<int64_t>(1, st_.step / 10);  // a warmup whose window would close in time
  const bool shorter_warmup =
      warmup < c_.warmup && std::max(warmup, session_first_step_ + kFitSkip) + kFitSteps < st_.step;
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "time budget: the %g s ran out at step %lld, before the run could fit its step count to it (it measures "
      "its step rate over steps %lld-%lld, after the %lld warmup steps), so the learning rate never decayed "
      "to --min-lr %.3g: it ended %s %.3g (--lr %.3g). ",
      c_.time_budget, static_cast<long long>(st_.step), static_cast<long long>(fit_from_ + 1),
      static_cast<long long>(end), static_cast<long long>(c_.warmup), static_cast<double>(c_.min_lr),
      st_.step < c_.warmup ? "still rising, at" : "at its peak,", lr_now_, static_cast<double>(c_.lr));
  std::string m = buf;
  if (shorter_warmup)
    m += "A shorter --warmup (e.g. " + std::to_string(warmup) + ") or a longer --time-budget lets it decay";
  else
    m += "A longer --time-budget lets it decay (the window alone takes " + std::to_string(kFitSteps) + " steps)";
  return m;
}

void Run::load_data(const SavedVocabs& saved) {
  ds_ = load_dataset(c_, saved, processes());
  for (const auto& n : ds_.notes) note(ProgressEvent::Kind::NOTE, n);
}

void Run::build_model() {
  mc_.validate();
  gen_ = Generator{c_.seed, 0};
  model_ = std::make_unique<Model>(mc_, gen_);
}

void Run::setup_fresh() {
  load_data({});
  mc_ = model_config_for(c_, ds_);
  build_model();
}

// The model is built before the output directory is written: a model directory whose weights do not
// load leaves nothing behind.
void Run::setup_init_from() {
  check_out_is_not_init_from(c_);
  const TrainedModel from = load_model_dir(c_.init_from);
  if (from.quantized)
    throw std::invalid_argument("train config: init_from " + c_.init_from + " is an int8-quantized model directory " +
                                "(tfm quantize), for inference only; start from the float32 directory it was made from");
  mc_ = init_model_config(c_, from.model->config());
  c_.model = mc_;  // the data's layout (equal lengths per position) follows the model
  if (c_.text() != (mc_.family().data == DataKind::TEXT))
    throw std::invalid_argument("train config: init_from " + c_.init_from + " holds a model of arch " +
                                std::string(enum_name(mc_.arch)) + ", but " +
                                (c_.text() ? "text data trains a language model (arch decoder)"
                                           : "arch " + std::string(enum_name(mc_.arch)) + " trains on text data (text_path)"));
  c_.src_tokens = from.src_tokenizer.kind();
  c_.tgt_tokens = from.tgt_tokenizer.kind();
  const std::string vocab_files =
      model_dir::src_vocab_path(c_.init_from) + " and " + model_dir::tgt_vocab_path(c_.init_from);
  if (from.src_vocab.pad_id() != mc_.pad_id || from.tgt_vocab.pad_id() != mc_.pad_id)
    throw std::runtime_error(vocab_files + ": <pad> is not at the model's pad_id " + std::to_string(mc_.pad_id));
  if (c_.task && (from.src_vocab.tokens() != data::task_vocab().tokens() || from.tgt_vocab.tokens() != data::task_vocab().tokens()))
    throw std::invalid_argument(vocab_files + ": not the built-in tasks' vocabulary, so the task " +
                                std::string(enum_name(*c_.task)) + " cannot be encoded with them");
  load_data(saved_vocabs(from));
  check_fits(mc_, ds_, c_);
  build_model();
  model_->load_state_dict(from.model->state_dict(), model_dir::path(c_.init_from, model_dir::MODEL));
  note(ProgressEvent::Kind::NOTE, "starting from the model in " + c_.init_from);
}

// A run started from a model directory keeps that model's configuration (saved whole in the run's
// config.json, so a resume reads it back as it is); otherwise the data sizes the model, as it did.
void Run::setup_resume() {
  if (is_quantized_model_dir(c_.out_dir))
    throw std::invalid_argument("train config: resume: " + c_.out_dir + " is an int8-quantized model directory " +
                                "(tfm quantize), for inference only; it cannot be trained further");
  const TrainedModel saved = load_model_dir(c_.out_dir, WeightsLoad::NONE);
  load_data(saved_vocabs(saved));
  if (!c_.init_from.empty()) {
    mc_ = c_.model;
    check_fits(mc_, ds_, c_);
  } else {
    mc_ = model_config_for(c_, ds_);
  }
  build_model();
}

void Run::note(ProgressEvent::Kind kind, const std::string& msg) const {
  if (!hooks_.progress || !lead_) return;
  ProgressEvent e = event(kind);
  e.message = msg;
  hooks_.progress(e);
}

ProgressEvent Run::event(ProgressEvent::Kind kind) const {
  ProgressEvent e;
  e.kind = kind;
  e.step = st_.step;
  e.total_steps = total_steps_;
  e.epoch = st_.epoch + 1;
  e.lr = lr_now_;
  e.elapsed_seconds = elapsed();
  e.processes = comm_.size();
  if (!st_.history.empty()) e.has_eval = true, e.last_eval = st_.history.back();
  return e;
}

void Run::load_epoch(int64_t e) {
  if (plan_epoch_ == e) return;
  if (c_.text()) {  // the same count every epoch: random windows need no plan, sequential ones are in order
    text_batches_ = data::sequential_batch_count(ds_.text_train, c_.block_size, c_.batch.batch_size);
    plan_epoch_ = e;
    return;
  }
  if (c_.task) epoch_examples_ = task_epoch(c_, e);
  plan_ = data::plan_epoch(train_set(), c_.batch, c_.seed, e);
  plan_epoch_ = e;
}

ShardedStep::BatchRows Run::next_batch(data::TokenBatch& rows) {
  // The rows [r0, r1) this process computes of a batch of B rows: all of them in one process.
  const auto mine = [&](int64_t B) {
    return comm_.single() ? std::pair<int64_t, int64_t>{0, B} : step_->rows_of(B);
  };
  if (!c_.text()) {
    const std::vector<int64_t>& indices = plan_[static_cast<size_t>(st_.batch)];
    const int64_t B = static_cast<int64_t>(indices.size());
    const auto [r0, r1] = mine(B);
    rows = data::make_batch_rows(train_set(), indices, r0, r1, mc_.target_layout(), mc_.pad_id, mc_.bos_id, mc_.eos_id);
    return {rows, r0, B, data::count_target_tokens(train_set(), indices, mc_.target_layout(), mc_.pad_id, mc_.eos_id)};
  }
  const std::vector<int64_t> starts =
      c_.sequential ? data::sequential_window_starts(ds_.text_train, c_.block_size, c_.batch.batch_size, st_.batch)
                    : data::random_window_starts(ds_.text_train, c_.block_size, c_.batch.batch_size, gen_);
  const int64_t B = static_cast<int64_t>(starts.size());
  const auto [r0, r1] = mine(B);
  rows = data::window_batch(ds_.text_train, std::vector<int64_t>(starts.begin() + r0, starts.begin() + r1), c_.block_size);
  return {rows, r0, B, data::count_window_targets(ds_.text_train, starts, c_.block_size, mc_.pad_id)};
}

void Run::evaluate_and_record() {
  // Several processes: every rank forwards its share of the validation batches and every rank gets
  // the same figures (evaluate.h; its gather waits --comm-timeout plus twice the longest share's estimated
  // time, so no evaluation is too long for it). The ranks leave it together,
  // so the next step's exchange keeps its timeout.
  Comm* comm = comm_.single() ? nullptr : &comm_;
  // The training rate of the steps since the last evaluation, this evaluation left out (since_eval_
  // restarts when it ends).
  const double dt = seconds_since(since_eval_);
  // With --ema the average is evaluated: complete on every rank, then in the model for the scoring.
  if (average_) {
    step_->gather_elements(average_->tensors());
    average_->swap_with(params_);
  }
  const int32_t unk = ds_.tgt_vocab.unk_id();  // a target the vocabulary could not name is never predicted right
  const TeacherForced tf =
      c_.text() ? evaluate_teacher_forced_text(*model_, ds_.text_valid, c_.block_size, kEvalBatch, comm, unk)
                : evaluate_teacher_forced(*model_, ds_.valid, kEvalBatch, comm, unk);
  if (average_) average_->swap_with(params_);  // the raw weights back in the model
  EvalRow r;
  r.step = st_.step;
  r.epoch = st_.epoch + (st_.batch == 0 ? 0 : 1);
  r.lr = lr_now_;
  r.train_loss = st_.loss_count ? st_.loss_sum / static_cast<double>(st_.loss_count) : 0.0;
  r.valid_loss = tf.loss;
  r.valid_token_accuracy = tf.token_accuracy;
  r.valid_sequence_accuracy = tf.sequence_accuracy;
  r.tokens_per_sec = dt > 0 ? static_cast<double>(st_.tokens - tokens_before_clock_) / dt : 0.0;
  r.elapsed_seconds = elapsed();
  st_.history.push_back(r);
  // keep_best: this evaluation's model is the best so far (the history is every rank's, so every rank
  // agrees). Rank 0 writes it with the checkpoint that follows every evaluation in the loop, after the
  // ranks' gather (step.h: the other ranks then wait untimed); the step-0 row of an --init-from run has no
  // checkpoint after it: its best is written now, before the first step, whose first wait is untimed too.
  best_pending_ = c_.keep_best && best_row(st_.history) == static_cast<int64_t>(st_.history.size()) - 1;
  if (best_pending_ && st_.step == 0) {
    write_best();
    best_pending_ = false;
  }
  st_.loss_sum = 0;
  st_.loss_count = 0;
  st_.tokens = 0;
  tokens_before_clock_ = 0;
  since_eval_ = Clock::now();
  if (hooks_.progress && lead_) {
    ProgressEvent e = event(ProgressEvent::Kind::EVAL);
    e.epoch = r.epoch;
    e.loss = r.train_loss;
    e.tokens_per_sec = r.tokens_per_sec;
    hooks_.progress(e);
  }
}

// A fresh run's model description: config.json, the vocabularies and tokenizers, written by rank 0 just
// before its first checkpoint, so that a run which fails before it (bad data, out of memory, a
// diverged first step) leaves the directory as it found it — with --force, the previous run's files too.
void Run::describe() {
  if (described_ || !lead_) return;
  std::error_code ec;
  // A fresh run replaces whatever run or model the directory held (tfm train --force; the option layer
  // refuses it otherwise): none of its files may outlive it beside the new config.
  // The temporary files of a run killed while it wrote them go too (the directory's lock is this run's).
  const auto drop = [&](const char* f) {
    std::filesystem::remove(model_dir::path(c_.out_dir, f), ec);
    io::remove_stale_temp_files(model_dir::path(c_.out_dir, f));
  };
  for (const char* f : model_dir::DESCRIPTION_FILES) drop(f);
  for (const char* f : {model_dir::MODEL, model_dir::GPT2_SOURCE, STATE_FILE, CLOCK_FILE, METRICS_FILE, CURVES_FILE})
    drop(f);
  std::filesystem::remove_all(model_dir::path(c_.out_dir, BEST_DIR), ec);
  io::remove_stale_staging(model_dir::path(c_.out_dir, BEST_DIR));
  // JSON vocabulary files for text data (any character, newline included) and whenever a token
  // needs them; the one-token-a-line files otherwise.
  const bool json_vocab = c_.text() || ds_.src_vocab.needs_json() || ds_.tgt_vocab.needs_json();
  model_dir::save_vocabs(c_.out_dir, ds_.src_vocab, ds_.tgt_vocab, json_vocab);
  model_dir::save_tokenizers(c_.out_dir, ds_.src_tokenizer, ds_.tgt_tokenizer);
  io::write_file_atomic(model_dir::path(c_.out_dir, model_dir::CONFIG),
                        model_dir::config_json(mc_, c_.to_json(/*with_model=*/false), ds_.src_vocab, ds_.tgt_vocab,
                                               c_.src_tokens, c_.tgt_tokens, json_vocab));
  described_ = true;
}

// Removes what describe() wrote: a run whose first checkpoint failed leaves the directory without a
// half-written model. Never throws.
void Run::undescribe() noexcept {
  std::error_code ec;
  for (const char* f : model_dir::DESCRIPTION_FILES) std::filesystem::remove(model_dir::path(c_.out_dir, f), ec);
  described_ = false;
}

// out_dir/best: the run's model description (describe()) and the evaluated weights (with ema the average, as
// model.safetensors holds them), staged whole and renamed over the previous best. Rank 0 only.
void Run::write_best() {
  if (!lead_) return;
  describe();
  namespace fs = std::filesystem;
  const std::string best = model_dir::path(c_.out_dir, BEST_DIR);
  const EvalRow& r = st_.history.back();
  io::StagedDirectory staged(best, /*replace=*/true);
  try {
    // Its errors are said of `best` (StagedDirectory::write), not of the staging directory, which is ours and gone
    // when the message is read (staged's destructor removes it).
    staged.write([&](const std::string& tmp) {
      model_dir::copy_description(c_.out_dir, tmp);
      io::save_safetensors(model_dir::path(tmp, model_dir::MODEL),
                           average_ ? average_->named() : model_->named_parameters(), {{"format", "pt"}});
    });
  } catch (const std::runtime_error& e) {
    throw io::IoError(e.what() + std::string(" (the best model, of step ") + std::to_string(r.step) +
                      ", was not written; " + best +
                      (fs::exists(best) ? " holds the previous one)" : " does not exist)"));
  }
  staged.commit();
  char loss[32];
  std::snprintf(loss, sizeof loss, "%.4f", r.valid_loss);
  note(ProgressEvent::Kind::CHECKPOINT, "best validation loss so far (" + std::string(loss) + ", step " +
                                            std::to_string(r.step) + "): model in " +
                                            model_dir::path(c_.out_dir, BEST_DIR));
}

bool Run::out_of_patience() const {
  const int64_t best = best_row(st_.history);
  return c_.patience > 0 && best >= 0 && static_cast<int64_t>(st_.history.size()) - 1 - best >= c_.patience;
}

void Run::checkpoint() {
  st_.elapsed = elapsed();
  // Several processes each stepped the optimizer on their own elements: complete its state first.
  step_->gather_optimizer_state(*opt_);
  if (average_) step_->gather_elements(average_->tensors());
  // The other ranks wait for rank 0 to write for as long as that takes; rank 0, its checkpoint
  // written, waits for them with the timeout, so a rank that stopped meanwhile is still detected.
  if (!lead_) step_->untimed_next();
  const bool best = best_pending_;
  best_pending_ = false;
  if (!lead_) {  // rank 0 writes; the others keep what the checkpoint records in step with it
    st_.checkpoint_step = st_.step;
    return;
  }
  const bool first = !described_;
  try {
    describe();  // (inside: a failure part of the way through it leaves the files it wrote, undescribe()d below)
    write_checkpoint(c_.out_dir, *model_, *opt_, gen_, st_,
                     c_.task     ? std::string(enum_name(*c_.task))
                     : c_.text() ? c_.text_path
                                 : c_.train_path,
                     average_.get(), c_.label_smoothing, c_.text());
  } catch (...) {
    // The first checkpoint, or the description before it, failed (a full disk): the description goes too, so that
    // the directory does not hold a config without weights, or vocabularies without a config, which neither a new
    // run (it holds a run) nor --resume (no checkpoint) would take.
    if (first) undescribe();
    throw;
  }
  if (best) write_best();  // the weights just saved are the ones evaluated
  note(ProgressEvent::Kind::CHECKPOINT, "checkpoint at step " + std::to_string(st_.step) + " in " + c_.out_dir);
}

TrainResult Run::train() {
  TrainResult result;
  std::optional<StopReason> reason;
  auto last_progress = Clock::now() - std::chrono::seconds(10);
  int64_t consecutive_skips = 0;
  // A run started from a model directory first scores that model, as its step-0 row.
  if (!c_.init_from.empty() && st_.step == 0 && st_.history.empty()) evaluate_and_record();
  if (out_of_patience()) reason = StopReason::EARLY_STOPPING;  // a resumed run that had stopped early
  if (budget_spent()) reason = StopReason::TIME_BUDGET;
  while (!reason) {
    if (c_.epochs > 0 && st_.epoch >= c_.epochs) {
      reason = StopReason::EPOCHS;
      break;
    }
    load_epoch(st_.epoch);
    while (st_.batch < epoch_batches()) {
      if (c_.max_steps > 0 && st_.step >= c_.max_steps) {
        reason = StopReason::MAX_STEPS;
        break;
      }
      if (budget_ == Budget::FIXED && st_.step >= total_steps_) {
        reason = c_.time_budget > 0 ? StopReason::TIME_BUDGET : StopReason::MAX_STEPS;
        break;
      }
      if (length_pending_) {  // the resumed session trains: its length is the run's from now on
        save_length(c_);
        length_pending_ = false;
      }
      data::TokenBatch rows;
      const ShardedStep::BatchRows b = next_batch(rows);
      ++st_.batch;
      lr_now_ = lr_at(st_.step + 1);
      opt_->set_lr(static_cast<float>(lr_now_));
      // Several processes stop together: on a signal to any of them, and when rank 0's clock says the
      // time budget is spent, sampled before the step and exchanged with its losses, so acted on after it.
      // One process samples its clock at the same point, so that the same steps run for any process count.
      const bool time_up = c_.time_budget > 0 && budget_ != Budget::FIXED && elapsed() >= c_.time_budget;
      ShardedStep::Agreement agreed;
      if (!comm_.single()) {
        agreed.stop = stop_asked();
        agreed.time_up = time_up;
      }
      const StepOutcome s = step_->run(*model_, *opt_, gen_, b, c_.label_smoothing, c_.clip_norm, agreed);
      if (!s.finite) {
        if (!c_.skip_nonfinite) throw TrainingDiverged(diverged_message(c_, st_, s));
        ++st_.skipped;
        if (++consecutive_skips >= kMaxConsecutiveSkips)
          throw TrainingDiverged("training diverged: " + std::to_string(consecutive_skips) +
                                 " consecutive batches had a non-finite loss or gradient (at step " +
                                 std::to_string(st_.step + 1) +
                                 "); the model is not recovering. Try a lower --lr (now " + number_text(c_.lr) +
                                 "), a longer --warmup or " + clip_advice(c_) + ".");
        note(ProgressEvent::Kind::NOTE, "skipped a batch with a non-finite loss or gradient before step " +
                                            std::to_string(st_.step + 1) + " (" + std::to_string(st_.skipped) +
                                            " so far)");
      } else {
        consecutive_skips = 0;
        ++st_.step;
        st_.loss_sum += s.loss;
        ++st_.loss_count;
        const int64_t ntok = b.targets;
        st_.tokens += ntok;
        tokens_session_ += ntok;
        if (st_.step == session_first_step_ + 1) first_step_seconds_ = seconds_since(session_wall_);
      }

      if (hooks_.progress && lead_ && seconds_since(last_progress) >= 0.25) {
        last_progress = Clock::now();
        ProgressEvent e = event(ProgressEvent::Kind::STEP);
        e.loss = st_.loss_count ? st_.loss_sum / static_cast<double>(st_.loss_count) : 0.0;
        const double s_now = seconds_since(session_wall_);
        e.tokens_per_sec = s_now > 0 ? static_cast<double>(tokens_session_) / s_now : 0.0;
        const int64_t done = st_.step - session_first_step_;
        if (done > 0) {
          // The rate of the steps after the first, once they have taken kEtaSeconds: none before (no ETA), as the
          // first step's alone overestimates the run several times over.
          const double timed = s_now - first_step_seconds_;
          if (total_steps_ > 0 && done > 1 && timed >= kEtaSeconds) {
            const double per_step = timed / static_cast<double>(done - 1);
            e.eta_seconds = per_step * static_cast<double>(std::max<int64_t>(0, total_steps_ - st_.step));
          }
          if (c_.time_budget > 0 && budget_ != Budget::FIXED) {
            const double left = std::max(0.0, c_.time_budget - e.elapsed_seconds);
            e.eta_seconds = e.eta_seconds < 0 ? left : std::min(e.eta_seconds, left);
          }
        }
        hooks_.progress(e);
      }

      // The count is fixed before this step's evaluation, so that its checkpoint holds it.
      if (budget_ == Budget::MEASURING && s.finite && st_.step == fit_from_ + kFitSteps) fix_length();
      const bool periodic = eval_every_ > 0 && st_.step > 0 && st_.step % eval_every_ == 0 && s.finite;
      const bool window_opens = budget_ == Budget::MEASURING && s.finite && st_.step == fit_from_;
      if (periodic || window_opens) {
        const double t = elapsed();
        evaluate_and_record();
        checkpoint();
        if (window_opens) {
          eval_cost_ = elapsed() - t;
          estimate_final_decoding();
          fit_t0_ = elapsed();
        } else if (budget_ == Budget::MEASURING && st_.step > fit_from_)
          window_evals_ += elapsed() - t;
        if (out_of_patience()) {
          reason = StopReason::EARLY_STOPPING;
          break;
        }
      }
      if (comm_.single() ? time_up : agreed.time_up) {
        reason = StopReason::TIME_BUDGET;
        st_.budget_ended = true;
        if (budget_ == Budget::MEASURING) note(ProgressEvent::Kind::NOTE, budget_too_short_note());
        break;
      }
      if (comm_.single() ? stop_asked() : agreed.stop) {
        if (st_.checkpoint_step != st_.step) checkpoint();  // this step's evaluation may have written it (every rank agrees)
        result.interrupted = true;
        reason = StopReason::INTERRUPTED;
        break;
      }
    }
    if (reason) break;
    ++st_.epoch;
    st_.batch = 0;
    if (eval_at_epoch_end_) {
      evaluate_and_record();
      checkpoint();
      if (out_of_patience()) reason = StopReason::EARLY_STOPPING;
    }
  }

  if (!result.interrupted) {
    if (st_.history.empty() || st_.history.back().step != st_.step) {
      evaluate_and_record();
      checkpoint();
    } else if (st_.budget_ended && reason == StopReason::TIME_BUDGET && !budget_spent()) {
      checkpoint();  // this step's evaluation wrote the checkpoint before the budget ended: again, with the flag
    }
    // A language model has no sources to decode: its validation figures are the last row's. A stop asked for during
    // the decoding ends the run as one during an evaluation does, its checkpoint (just written) whole.
    if (!c_.text() && lead_) {
      if (std::optional<Metrics> m = decode_final()) {
        result.final_metrics = *m;
      } else {
        result.interrupted = true;
        reason = StopReason::INTERRUPTED;
      }
    }
  }
  result.train_seconds = elapsed();
  result.steps = st_.step;
  result.epochs_completed = st_.epoch;
  result.stop_reason = *reason;
  result.skipped_nonfinite = st_.skipped;
  result.history = st_.history;
  result.seconds = elapsed();
  result.time_budget = c_.time_budget;
  result.budget_steps = st_.budget_steps;
  return result;
}

}  // namespace

TrainResult run_training(const TrainConfig& config, const TrainHooks& hooks, bool resume) {
  Run run(config, hooks, resume);
  return run.train();
}

TrainConfig load_train_config(const std::string& dir) {
  TrainConfig c;
  try {
    c = TrainConfig::from_json(model_dir::read_config_section(dir, "train"));
    c.model = ModelConfig::from_json(model_dir::read_config_section(dir, "model"));
  } catch (const std::invalid_argument& e) {  // "train config: ..." / "model config: ..." — said of the file
    throw std::invalid_argument(model_dir::path(dir, model_dir::CONFIG) + ": " + e.what());
  }
  c.out_dir = dir;
  return c;
}

}  // namespace tfm::train
