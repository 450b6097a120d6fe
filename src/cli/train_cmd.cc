// src/cli/train_cmd.cc — `tfm train`: flags → TrainConfig, a progress line on stderr, SIGINT/SIGTERM
// → a final checkpoint and a resume hint. The loop itself is tfm::train::run_training.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#ifdef TFM_HAVE_MPI
#include <mpi.h>
#endif

#include "commands.h"
#include "tfm/train/comm.h"
#include "tfm/train/config.h"
#include "tfm/train/trainer.h"

namespace tfm::cli {
namespace {

using train::TrainConfig;

std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int sig) { g_signal.store(sig); }

// First SIGINT/SIGTERM asks the loop to stop after the current step; SA_RESETHAND makes a second
// one kill the process at once (checkpoints are atomic, so the last complete one survives).
void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// ---- several processes (mpirun -np P tfm train ...) ----
// MPI is initialised here, only when a launcher started more than one process (a lone `tfm train`
// never touches MPI), and finalised when the command ends; the library receives the communicator
// (train::TrainHooks::comm). Signals: Open MPI 4.1's mpirun answers SIGINT / SIGTERM by sending
// SIGTERM to every rank (after a SIGCONT), then SIGKILL odls_base_sigkill_timeout seconds later
// (default 1). Every rank's handler asks the loop to stop, the ranks agree on it with the next step's
// exchange and rank 0 writes one checkpoint; a step plus a checkpoint longer than that grace
// period needs `mpirun --mca odls_base_sigkill_timeout 30 ...` (or the environment variable
// OMPI_MCA_odls_base_sigkill_timeout=30).
class MpiSession {
 public:
  MpiSession(double comm_timeout, double bucket_mb) {
    const int launched = train::Comm::launched_size();
    if (launched <= 1) return;
    if (!train::Comm::available())
      throw std::runtime_error("this tfm was built without MPI (TFM_MPI=OFF or MPI not found), but a launcher started " +
                               std::to_string(launched) + " processes: each would train alone. Rebuild with MPI "
                               "(libopenmpi-dev) or run a single process");
#ifdef TFM_HAVE_MPI
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    initialised_ = true;
    comm_ = train::Comm::world();
    comm_.set_timeout(comm_timeout);
    comm_.set_bucket_bytes(static_cast<int64_t>(bucket_mb * (1 << 20)));
#else
    (void)comm_timeout;
    (void)bucket_mb;
#endif
  }
  ~MpiSession() {
#ifdef TFM_HAVE_MPI
    if (initialised_) MPI_Finalize();
#endif
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  train::Comm* comm() { return initialised_ ? &comm_ : nullptr; }
  bool lead() const { return comm_.rank() == 0; }
  // After an error on one rank the others may wait forever: print it, then stop every rank.
  [[noreturn]] void fail(const std::exception& e) {
    if (initialised_) {
      std::fprintf(stderr, "tfm: error (rank %d of %d): %s\n", comm_.rank(), comm_.size(), e.what());
      std::fflush(stderr);
      comm_.abort_all(1);
    }
    throw;
  }

 private:
  bool initialised_ = false;
  train::Comm comm_;
};

std::string duration(double s) {
  if (s < 0) return "?";
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

std::string rate(double tps) {
  char buf[32];
  if (tps >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", tps / 1e6);
  else if (tps >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", tps / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", tps);
  return buf;
}

// Progress on stderr: one line rewritten in place (\r) on a terminal; on a pipe or file, a plain
// line at every evaluation and at most every 10 s otherwise.
class ProgressPrinter {
 public:
  // lm: a language model's line shows the validation loss instead of the token accuracy.
  explicit ProgressPrinter(bool lm = false) : tty_(isatty(STDERR_FILENO) == 1), lm_(lm) {}
  void operator()(const train::ProgressEvent& e) {
    using K = train::ProgressEvent::Kind;
    if (e.kind == K::NOTE || e.kind == K::CHECKPOINT) {
      if (e.kind == K::CHECKPOINT && tty_) return;  // the step line already shows progress
      clear();
      std::fprintf(stderr, "%s\n", e.message.c_str());
      return;
    }
    char line[256];
    std::string step = std::to_string(e.step) + (e.total_steps > 0 ? "/" + std::to_string(e.total_steps) : "");
    std::string val = e.has_eval ? std::to_string(e.last_eval.valid_token_accuracy * 100).substr(0, 5) + "%" : "-";
    if (lm_) {
      char v[32] = "-";
      if (e.has_eval) std::snprintf(v, sizeof v, "%.4f", e.last_eval.valid_loss);
      val = v;
    }
    const std::string procs = e.processes > 1 ? " (" + std::to_string(e.processes) + " procs)" : "";
    std::snprintf(line, sizeof line, "step %s | epoch %lld | loss %.4f | val %s %s | %s tok/s%s | ETA %s", step.c_str(),
                  static_cast<long long>(e.epoch), e.loss, lm_ ? "loss" : "acc", val.c_str(), rate(e.tokens_per_sec).c_str(),
                  procs.c_str(), duration(e.eta_seconds).c_str());
    if (e.kind == K::EVAL) {
      clear();
      std::fprintf(stderr, "eval  step %lld | epoch %lld | train loss %.4f | val loss %.4f | val token acc %.2f%%",
                   static_cast<long long>(e.step), static_cast<long long>(e.epoch), e.last_eval.train_loss,
                   e.last_eval.valid_loss, 100 * e.last_eval.valid_token_accuracy);
      // A language model's windows are not sequences to get right: no sequence accuracy for it.
      if (!lm_) std::fprintf(stderr, " | val seq acc %.2f%%", 100 * e.last_eval.valid_sequence_accuracy);
      std::fprintf(stderr, "\n");
      return;
    }
    if (tty_) {
      std::fprintf(stderr, "\r%s\033[K", line);
      open_ = true;
    } else if (e.elapsed_seconds - last_plain_ >= 10) {
      last_plain_ = e.elapsed_seconds;
      std::fprintf(stderr, "%s\n", line);
    }
    std::fflush(stderr);
  }
  void clear() {
    if (open_) std::fprintf(stderr, "\r\033[K");
    open_ = false;
  }

 private:
  bool tty_;
  bool lm_;
  bool open_ = false;
  double last_plain_ = -1e9;
};

// Each option sets one field of the TrainConfig by its key (train::set_field), on TrainConfig{} or,
// with --task, on the task's preset: the defaults shown in --help are the library's, and an option
// not given leaves the library's value. Boolean fields are a flag and its negation.
struct FieldOption {
  CLI::Option* option = nullptr;
  std::vector<std::string> keys;  // fields it sets (--layers sets both layer counts)
  std::string text;               // the value given (options)
  bool is_flag = false, on = false;  // flags: --x sets on, --no-x clears it
};

class Options {
 public:
  explicit Options(CLI::App* cmd) : cmd_(cmd) {}
  CLI::Option* value(const std::string& name, std::vector<std::string> keys, const std::string& help) {
    auto& f = add(keys);
    const std::string def = field_text(TrainConfig{}, keys.front());
    f.option = cmd_->add_option(name, f.text, help);
    if (!def.empty()) f.option->default_str(def);
    return f.option;
  }
  // "--norm-first" and "--no-norm-first".
  CLI::Option* flag(const std::string& name, const std::string& key, const std::string& help) {
    auto& f = add({key});
    f.is_flag = true;
    // An optional field unset by default has its default in `help`.
    const std::string def = field_text(TrainConfig{}, key);
    f.option = cmd_->add_flag("--" + name + ",!--no-" + name, f.on,
                              help + (def == "true" ? " (default: on)" : def == "false" ? " (default: off)" : ""));
    return f.option;
  }
  // The names of the options given that set a field train::fixed_by_init_from refuses.
  std::string given_fixed_by_init_from() const {
    std::string names;
    for (const auto& f : fields_)
      if (f->option->count() > 0 &&
          std::any_of(f->keys.begin(), f->keys.end(), [](const std::string& k) { return train::fixed_by_init_from(k); }))
        names += (names.empty() ? "" : ", ") + f->option->get_name();
    return names;
  }
  // Applies every option that was given to `c`.
  void apply(TrainConfig& c) const {
    for (const auto& f : fields_)
      if (f->option->count() > 0)
        for (const auto& k : f->keys) set_field(c, k, f->is_flag ? (f->on ? "true" : "false") : f->text);
  }

 private:
  FieldOption& add(std::vector<std::string> keys) {
    fields_.push_back(std::make_unique<FieldOption>());
    fields_.back()->keys = std::move(keys);
    return *fields_.back();
  }
  CLI::App* cmd_;
  std::vector<std::unique_ptr<FieldOption>> fields_;
};

int train_main(const std::shared_ptr<Options>& opts, bool len_given, bool task_given, bool lm_default,
               const std::shared_ptr<std::string>& task_text, bool preset_given,
               const std::shared_ptr<std::string>& preset_text, const std::shared_ptr<int>& threads,
               const std::shared_ptr<std::string>& resume_dir, const std::string& fixed, const std::string& model_given,
               MpiSession& mpi);

}  // namespace

void register_train(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("train", "Train a sequence model on a built-in task or on TSV pairs, or a language model on text");
  cmd->footer(
      "Examples:\n"
      "  tfm train --task reverse --arch encoder --out runs/reverse\n"
      "  tfm train --train pairs.tsv --valid dev.tsv --arch seq2seq --epochs 20 --out runs/mt\n"
      "  tfm train --text t.txt --valid-text v.txt --arch decoder --tokens char --block-size 64 --out runs/lm\n"
      "                                        (a character-level language model)\n"
      "  tfm train --preset nanogpt-baby --text t.txt --out runs/baby   (nanoGPT's CPU Shakespeare-char recipe)\n"
      "  tfm train --train pairs.tsv --valid dev.tsv --arch seq2seq --tokens spm --joint-vocab --vocab-size 8000 \\\n"
      "      --out runs/mt-spm                 (one SentencePiece vocabulary of 8000 pieces for both sides)\n"
      "  tfm train --resume runs/mt            (continue an interrupted run exactly)\n"
      "  tfm train --init-from runs/mt --train more.tsv --valid dev.tsv --lr 1e-4 --out runs/mt2\n"
      "                                        (fine-tune a model directory: its model, weights, vocabularies)\n"
      "  tfm train --task reverse --arch encoder --d-model 16 --nhead 4 --head-dim 16 --no-qkv-bias \\\n"
      "      --no-out-bias --dim-feedforward 512 --layers 4 --max-steps 3000 --out runs/nb4\n"
      "                                        (the reverse notebook's own layers: 4 heads of width 16 on width 16)\n"
      "  mpirun -np 4 tfm train --train pairs.tsv --valid dev.tsv --grad-shards 4 --out runs/mt4\n"
      "                                        (4 processes; bitwise the run of one process with --grad-shards 4)\n"
      "The defaults shown are for TSV data. --task starts from the task's preset instead (train::task_preset:\n"
      "1600 steps, --lr 2e-3, --dropout 0, --batch-size 256; reverse: 100% by step ~1300); options given\n"
      "still apply. --epochs, --max-steps and --time-budget replace the run's length together.\n"
      "Ctrl-C (or SIGTERM) finishes the current step, writes a checkpoint and prints how to resume.");
  auto opts = std::make_shared<Options>(cmd);
  Options& o = *opts;
  auto* data_group = cmd->add_option_group("data", "a built-in task or a pair of TSV files");
  auto task_text = std::make_shared<std::string>();
  auto* task = data_group->add_option("--task", *task_text, "built-in task: " + enum_choices<data::Task>(" | "));
  auto* tr = o.value("--train", {"train_path"}, "training pairs, one 'source<TAB>target' a line");
  auto* va = o.value("--valid", {"valid_path"}, "validation pairs (same format)");
  tr->needs(va);
  va->needs(tr);
  task->excludes(tr);
  auto* src_tokens = o.value("--src-tokens", {"src_tokens"}, "source tokenization: " + enum_choices<data::Tokenization>(" | "));
  auto* tgt_tokens = o.value("--tgt-tokens", {"tgt_tokens"}, "target tokenization: " + enum_choices<data::Tokenization>(" | "));
  o.flag("strict", "strict", "a blank, malformed or over-long line is an error (otherwise: skip and count)");
  o.value("--max-tokens", {"max_tokens"}, "longest accepted TSV side, in tokens");
  o.value("--task-train-size", {"task_train_size"}, "task examples per epoch (fresh each epoch)");
  // Language-model data (tfm/data/text.h).
  auto* text = o.value("--text", {"text_path"}, "language model: train on this text file (UTF-8 for --tokens char)");
  auto* valid_text = o.value("--valid-text", {"valid_text_path"}, "language model: validation text (else --valid-fraction)");
  auto* valid_fraction =
      o.value("--valid-fraction", {"valid_fraction"},
              "language model: share of --text's tokens, at its end, held out for validation");
  auto* block_size = o.value("--block-size", {"block_size"}, "language model: context length (windows of N+1 tokens)");
  auto* sequential = o.flag("sequential", "sequential", "language model: consecutive windows in order, not at random positions");
  auto* token_cache = o.value("--token-cache", {"token_cache"},
                              "language model: keep the texts' token arrays in this directory, memory-mapped (big texts)");
  auto* tokens = o.value("--tokens", {"src_tokens", "tgt_tokens"},
                         "tokenization of the text (or of both TSV sides): " + enum_choices<data::Tokenization>(" | "));
  tokens->excludes(src_tokens);
  tokens->excludes(tgt_tokens);
  // Subword vocabularies (SentencePiece, tfm/data/tokenizer.h): with --src-tokens / --tgt-tokens /
  // --tokens spm.
  o.value("--src-vocab-size", {"src_vocab_size"}, "spm source side: train a SentencePiece model of N pieces on it");
  o.value("--tgt-vocab-size", {"tgt_vocab_size"}, "spm target side: train a SentencePiece model of N pieces on it");
  o.value("--vocab-size", {"vocab_size"},
          "spm language model or --joint-vocab: train one SentencePiece model of N pieces");
  o.value("--spm-type", {"spm_type"}, "SentencePiece model type: " + enum_choices<data::SpmType>(" | "));
  o.value("--src-spm-model", {"src_spm_model"}, "spm source side: use this SentencePiece .model file");
  o.value("--tgt-spm-model", {"tgt_spm_model"}, "spm target side: use this SentencePiece .model file");
  o.value("--spm-model", {"spm_model"}, "spm language model or --joint-vocab: use this SentencePiece .model file");
  o.flag("joint-vocab", "joint_vocab", "one vocabulary (one SentencePiece model with spm) for source and target");
  o.value("--spm-max-lines", {"spm_max_lines"}, "at most N lines (evenly spaced) train a SentencePiece model");
  o.flag("share-embeddings", "share_embeddings",
         "seq2seq with --joint-vocab: the encoder reads the decoder's embedding (no src_embedding.weight)");
  text->excludes(task);
  auto preset_text = std::make_shared<std::string>();
  auto* preset = cmd->add_option("--preset", *preset_text,
                                 "start from a built-in recipe (train::preset_config): " + enum_choices<train::Preset>(" | ") +
                                     " (nanoGPT's CPU Shakespeare-char model; give the --text)");
  preset->needs(text);
  text->excludes(tr);
  valid_text->needs(text);
  valid_fraction->needs(text);
  valid_text->excludes(valid_fraction);
  block_size->needs(text);
  sequential->needs(text);
  token_cache->needs(text);
  auto* arch = o.value("--arch", {"arch"}, enum_choices<Arch>(" | ") + " (with --text: decoder)");
  auto* out = o.value("--out", {"out_dir"}, "output directory");
  auto* init_from = o.value("--init-from", {"init_from"},
                            "fine-tune: start from the model, weights and vocabularies of this model directory "
                            "(model options other than --dropout and --drop-path are refused)");
  o.value("--d-model", {"d_model"}, "model width");
  o.value("--nhead", {"nhead"}, "attention heads");
  o.value("--layers", {"num_encoder_layers", "num_decoder_layers"}, "encoder and decoder layers");
  o.value("--encoder-layers", {"num_encoder_layers"}, "encoder layers (overrides --layers)");
  o.value("--decoder-layers", {"num_decoder_layers"}, "decoder layers (overrides --layers)");
  o.value("--dim-feedforward", {"dim_feedforward"}, "feed-forward width");
  o.value("--dropout", {"dropout"}, "dropout probability");
  o.value("--activation", {"activation"}, enum_choices<Activation>() + " (unset: decoder gelu, others relu)");
  o.flag("norm-first", "norm_first", "pre-norm layers (LayerNorm before attention / FFN; unset: decoder only)");
  o.flag("tie-embeddings", "tie_embeddings",
         "seq2seq, decoder: share target embedding and output projection (unset: decoder only)");
  o.value("--head-dim", {"head_dim"}, "query/key width per head (unset: d_model / nhead)");
  o.value("--v-head-dim", {"v_head_dim"}, "value width per head (unset: the head dim)");
  o.flag("bias", "bias", "biases in every Linear, attention projection and norm of the layers");
  o.flag("qkv-bias", "qkv_bias", "attention q/k/v projection bias (unset: --bias)");
  o.flag("out-bias", "out_bias", "attention output projection bias (unset: --bias)");
  o.flag("ffn-bias", "ffn_bias", "feed-forward biases (unset: --bias)");
  o.flag("norm-bias", "norm_bias", "norm biases (unset: --bias; none with rms_norm)");
  o.value("--attn-scale", {"attn_scale"}, "attention scores' factor (unset: 1/sqrt(head dim))");
  o.value("--norm-type", {"norm_type"}, enum_choices<NormType>(" | "));
  o.flag("share-layers", "share_layers", "one set of layer weights used by every layer of a stack");
  o.value("--drop-path", {"drop_path"}, "stochastic depth: probability of dropping a residual branch per sample");
  o.value("--positional", {"positional"}, enum_choices<Positional>(" | ") + " (unset: decoder learned, others sinusoidal)");
  o.flag("scale-embeddings", "scale_embeddings", "multiply embeddings by sqrt(d_model) (unset: seq2seq yes, encoder no)");
  auto* epochs = o.value("--epochs", {"epochs"}, "passes over the training data (none of the three: 10 epochs)");
  auto* steps = o.value("--max-steps", {"max_steps"}, "optimizer steps");
  auto* budget = o.value("--time-budget", {"time_budget"}, "seconds of training");
  o.value("--lr", {"lr"}, "peak learning rate");
  o.value("--warmup", {"warmup"}, "linear warmup steps");
  o.value("--schedule", {"schedule"},
          "after warmup: " + enum_choices<train::Schedule>(" | ") + " (auto: cosine to --min-lr when the length is known)");
  o.value("--optimizer", {"optimizer"}, enum_choices<train::OptimizerKind>(" | "));
  o.value("--weight-decay", {"weight_decay"}, "weight decay (L2 for adam, decoupled for adamw)");
  o.value("--decay-params", {"decay_params"},
          "parameters weight decay applies to: " + enum_choices<train::DecayParams>(" | ") +
              " (>= 2 dims; unset: decoder matrices, others all)");
  o.value("--beta1", {"beta1"}, "Adam/AdamW first-moment decay rate");
  o.value("--beta2", {"beta2"}, "Adam/AdamW second-moment decay rate");
  o.value("--min-lr", {"min_lr"}, "learning rate the cosine schedule decays to");
  o.value("--label-smoothing", {"label_smoothing"}, "label smoothing");
  o.value("--clip-norm", {"clip_norm"}, "clip the gradient 2-norm (0 = off)");
  o.value("--seed", {"seed"}, "seed for data, initialisation and dropout");
  o.value("--batch-size", {"batch_size"}, "examples per batch");
  o.value("--batch-tokens", {"batch_tokens"}, "padded tokens per batch (overrides --batch-size)");
  o.value("--eval-every", {"eval_every"}, "steps between evaluations (0: each epoch, or 10 per run)");
  o.flag("skip-nonfinite", "skip_nonfinite", "skip batches whose loss or gradient is not finite");
  auto threads = std::make_shared<int>(0);
  auto* threads_opt = cmd->add_option("--threads", *threads, "threads (default: all cores; results do not depend on it)");
  // Data parallelism (mpirun -np P tfm train ...; tfm/train/trainer.h).
  o.value("--grad-shards", {"grad_shards"},
          "cut each batch into G parts whose gradients add in a fixed order: the same weights for any number of "
          "processes dividing G (0: one part per process, i.e. 1 without mpirun)");
  auto comm_timeout = std::make_shared<double>(600);
  auto* comm_timeout_opt =
      cmd->add_option("--comm-timeout", *comm_timeout,
                      "under mpirun: seconds a process waits for the others before the run stops with an error")
          ->default_str("600");
  auto bucket_mb = std::make_shared<double>(4);
  auto* bucket_mb_opt =
      cmd->add_option("--bucket-mb", *bucket_mb,
                      "under mpirun: MiB of gradient per message, each sent as soon as the backward has finished it "
                      "(a speed setting: the result does not depend on it)")
          ->default_str("4");
  auto resume_dir = std::make_shared<std::string>();
  auto* resume = cmd->add_option("--resume", *resume_dir, "continue the run saved in DIR");

  cmd->callback([cmd, data_group, opts, out, epochs, steps, budget, threads_opt, threads, resume, resume_dir, task, task_text,
                 tr, text, arch, init_from, preset, preset_text, comm_timeout, comm_timeout_opt, bucket_mb, bucket_mb_opt,
                 &run] {
    if (resume->count() == 0 && out->count() == 0) throw CLI::RequiredError("--out");
    // A resumed run continues exactly as saved: only its length and the thread count may be given
    // (an option silently ignored would look like it had taken effect).
    std::string fixed;
    if (resume->count() > 0)
      for (CLI::App* group : std::initializer_list<CLI::App*>{cmd, data_group})
        for (const CLI::Option* opt : group->get_options())
          if (opt->count() > 0 && opt != resume && opt != epochs && opt != steps && opt != budget && opt != threads_opt &&
              opt != comm_timeout_opt && opt != bucket_mb_opt)
            fixed += (fixed.empty() ? "" : ", ") + opt->get_name();
    // A run started from a model directory takes the model from it: a model option would be ignored.
    const std::string model_given = init_from->count() > 0 && resume->count() == 0 ? opts->given_fixed_by_init_from() : "";
    if (resume->count() == 0 && task->count() == 0 && tr->count() == 0 && text->count() == 0)
      throw CLI::RequiredError("--task or --train/--valid or --text");
    const bool len_given = epochs->count() + steps->count() + budget->count() > 0;
    const bool task_given = task->count() > 0;
    // Text data trains a language model (with --init-from, the model directory's).
    const bool lm_default = text->count() > 0 && arch->count() == 0 && init_from->count() == 0;
    const bool preset_given = preset->count() > 0;
    run = [opts, len_given, task_given, lm_default, task_text, preset_given, preset_text, threads, resume_dir, fixed,
           model_given, comm_timeout, bucket_mb] {
      if (!(*comm_timeout > 0)) throw std::invalid_argument("--comm-timeout must be a positive number of seconds");
      if (!(*bucket_mb > 0) || *bucket_mb > 1024)
        throw std::invalid_argument("--bucket-mb must be in (0, 1024] MiB, got " + std::to_string(*bucket_mb));
      MpiSession mpi(*comm_timeout, *bucket_mb);
      try {
        return train_main(opts, len_given, task_given, lm_default, task_text, preset_given, preset_text, threads,
                          resume_dir, fixed, model_given, mpi);
      } catch (const std::exception& e) {
        mpi.fail(e);
      }
    };
  });
}

namespace {

// The body of `tfm train` once its options are read.
int train_main(const std::shared_ptr<Options>& opts, bool len_given, bool task_given, bool lm_default,
               const std::shared_ptr<std::string>& task_text, bool preset_given,
               const std::shared_ptr<std::string>& preset_text, const std::shared_ptr<int>& threads,
               const std::shared_ptr<std::string>& resume_dir, const std::string& fixed, const std::string& model_given,
               MpiSession& mpi) {
  if (!model_given.empty())
    throw std::invalid_argument("--init-from takes the model (and its tokenizations) from the model directory; "
                                "only --dropout and --drop-path of the model options may be given with it (got " +
                                model_given + ")");
  if (!fixed.empty())
    throw std::invalid_argument("--resume continues the run with the settings saved in " + *resume_dir +
                                "/config.json; only --epochs, --max-steps, --time-budget and --threads may be "
                                "given with it (got " + fixed + ")");
  train::Comm* comm = mpi.comm();
  // Under mpirun the ranks of a node share its cores.
  if (*threads == 0 && comm && comm->local_size() > 1)
    apply_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / comm->local_size()));
  else
    apply_threads(*threads);
  // The options as given, on TrainConfig{}: the run's length comes from here when given.
  TrainConfig given;
  if (task_given) set_field(given, "task", *task_text);
  opts->apply(given);
  TrainConfig c;
  const bool resuming = !resume_dir->empty();
  if (resuming) {
    c = train::load_train_config(*resume_dir);
  } else {
    if (preset_given) {
      c = train::preset_config(enum_from_name<train::Preset>(*preset_text));
    } else {
      c = task_given ? train::task_preset(*given.task, given.model.arch) : TrainConfig{};
      if (lm_default) c.model.arch = Arch::DECODER;
    }
    opts->apply(c);
  }
  if (len_given) {  // the length options replace the run's length together (on resume too)
    c.epochs = given.epochs;
    c.max_steps = given.max_steps;
    c.time_budget = given.time_budget;
  }
  ProgressPrinter printer(c.text());
  train::TrainHooks hooks;
  hooks.progress = [&printer](const train::ProgressEvent& e) { printer(e); };
  hooks.should_stop = [](int64_t) { return g_signal.load() != 0; };
  hooks.comm = comm;
  install_stop_handlers();
  const train::TrainResult r = train::run_training(c, hooks, resuming);
  printer.clear();
  if (!mpi.lead()) return r.interrupted ? 128 + (g_signal.load() ? g_signal.load() : SIGINT) : 0;
  if (r.interrupted) {
    const int sig = g_signal.load();
    std::fprintf(stderr,
                 "%s at step %lld: checkpoint written to %s\nresume with: tfm train --resume %s\n",
                 sig == SIGTERM ? "terminated (SIGTERM)" : "interrupted (SIGINT)", static_cast<long long>(r.steps),
                 c.out_dir.c_str(), c.out_dir.c_str());
    return 128 + (sig ? sig : SIGINT);
  }
  if (r.skipped_nonfinite > 0)
    std::fprintf(stderr, "skipped %lld batches with a non-finite loss or gradient\n",
                 static_cast<long long>(r.skipped_nonfinite));
  std::fprintf(stderr, "trained %lld steps in %.1f s (%s); model in %s\n", static_cast<long long>(r.steps), r.seconds,
               std::string(enum_name(r.stop_reason)).c_str(), c.out_dir.c_str());
  if (c.text()) {  // a language model: the last evaluation's loss per token
    const double loss = r.history.empty() ? 0.0 : r.history.back().valid_loss;
    std::printf("validation: loss %.4f, perplexity %.3f, %.4f bits per token\n", loss, std::exp(loss), loss / std::log(2.0));
    return 0;
  }
  const train::Metrics& fm = r.final_metrics;
  std::printf("validation: sequence accuracy %.2f%% (%lld/%lld sequences), token accuracy %.2f%%, token error rate %.4f\n",
              100 * fm.sequence_accuracy(), static_cast<long long>(fm.exact), static_cast<long long>(fm.examples),
              100 * fm.token_accuracy(), fm.token_error_rate());
  return 0;
}

}  // namespace
}  // namespace tfm::cli
