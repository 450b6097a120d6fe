// src/cli/train_cmd.cc — `tfm train`: flags → TrainConfig, a progress line on stderr, SIGINT/SIGTERM
// → a final checkpoint and a resume hint. The loop itself is tfm::train::run_training.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "tfm/train/trainer.h"

namespace tfm::cli {
namespace {

// Built-in task defaults, measured on `tfm train --task reverse --arch encoder` (d_model 64, 2 layers,
// 4 heads, FFN 256). Steps cost mostly fixed overhead at this size, so batch 256 learns about twice
// as fast per second as 128. With lr 2e-3, 100 warmup steps and cosine decay over 1600 steps,
// validation sequence accuracy reached 100% by step 1200-1400 (seeds 1 and 2; 95.7% after 1000 steps
// at lr 3e-3, too tight), about 40 ms a step on one core. Dropout only slows this noiseless task.
constexpr int64_t kTaskSteps = 1600;
constexpr int64_t kTaskBatch = 256;
constexpr float kTaskLr = 2e-3f;

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
  ProgressPrinter() : tty_(isatty(STDERR_FILENO) == 1) {}
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
    std::snprintf(line, sizeof line, "step %s | epoch %lld | loss %.4f | val acc %s | %s tok/s | ETA %s", step.c_str(),
                  static_cast<long long>(e.epoch), e.loss, val.c_str(), rate(e.tokens_per_sec).c_str(),
                  duration(e.eta_seconds).c_str());
    if (e.kind == K::EVAL) {
      clear();
      std::fprintf(stderr, "eval  step %lld | epoch %lld | train loss %.4f | val loss %.4f | val token acc %.2f%% | "
                           "val seq acc %.2f%%\n",
                   static_cast<long long>(e.step), static_cast<long long>(e.epoch), e.last_eval.train_loss,
                   e.last_eval.valid_loss, 100 * e.last_eval.valid_token_accuracy,
                   100 * e.last_eval.valid_sequence_accuracy);
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
  bool open_ = false;
  double last_plain_ = -1e9;
};

}  // namespace

void register_train(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("train", "Train a sequence model on a built-in task or on TSV pairs");
  cmd->footer(
      "Examples:\n"
      "  tfm train --task reverse --arch encoder --out runs/reverse\n"
      "  tfm train --train pairs.tsv --valid dev.tsv --arch seq2seq --epochs 20 --out runs/mt\n"
      "  tfm train --resume runs/mt            (continue an interrupted run exactly)\n"
      "Defaults for TSV data: 10 epochs, --lr 1e-3, --dropout 0.1, --batch-size 128. For the built-in\n"
      "tasks: 1600 steps, --lr 2e-3, --dropout 0, --batch-size 256 (reverse: 100% by step ~1300).\n"
      "Ctrl-C (or SIGTERM) finishes the current step, writes a checkpoint and prints how to resume.");
  struct Opts {
    train::TrainConfig c;
    std::string arch = "encoder";
    int64_t layers = 2, enc_layers = -1, dec_layers = -1;
    std::string resume;
    int threads = 0;
  };
  auto o = std::make_shared<Opts>();
  train::TrainConfig& c = o->c;
  ModelConfig& m = c.model;
  // Defaults chosen so that `tfm train --task reverse --arch encoder` reaches ≥ 99% sequence accuracy
  // in well under 3 minutes on 2 cores (measured; see the report in the commit history).
  m.d_model = 64;
  m.nhead = 4;
  m.dim_feedforward = 256;
  m.dropout = 0.1f;
  c.lr = 1e-3f;
  c.warmup = 100;
  c.clip_norm = 1.0f;
  c.batch.batch_size = 128;

  auto* data = cmd->add_option_group("data", "a built-in task or a pair of TSV files");
  auto* task = data->add_option("--task", c.task, "built-in task: reverse | copy | sort");
  auto* tr = data->add_option("--train", c.train_path, "training pairs, one 'source<TAB>target' a line");
  auto* va = data->add_option("--valid", c.valid_path, "validation pairs (same format)");
  tr->needs(va);
  va->needs(tr);
  task->excludes(tr);
  cmd->add_option("--src-tokens", c.src_tokens, "source tokenization: char | space")->capture_default_str();
  cmd->add_option("--tgt-tokens", c.tgt_tokens, "target tokenization: char | space")->capture_default_str();
  cmd->add_flag("--strict", c.strict, "a blank, malformed or over-long line is an error (default: skip and count)");
  cmd->add_option("--max-tokens", c.max_tokens, "longest accepted TSV side, in tokens")->capture_default_str();
  cmd->add_option("--task-train-size", c.task_train_size, "task examples per epoch (fresh each epoch)")->capture_default_str();
  cmd->add_option("--arch", o->arch, "encoder | seq2seq")->capture_default_str();
  auto* out = cmd->add_option("--out", c.out_dir, "output directory");
  cmd->add_option("--d-model", m.d_model, "model width")->capture_default_str();
  cmd->add_option("--nhead", m.nhead, "attention heads")->capture_default_str();
  cmd->add_option("--layers", o->layers, "encoder and decoder layers")->capture_default_str();
  cmd->add_option("--encoder-layers", o->enc_layers, "encoder layers (default --layers)");
  cmd->add_option("--decoder-layers", o->dec_layers, "decoder layers (default --layers)");
  cmd->add_option("--dim-feedforward", m.dim_feedforward, "feed-forward width")->capture_default_str();
  auto* dropout = cmd->add_option("--dropout", m.dropout, "dropout probability (tasks: 0)")->capture_default_str();
  cmd->add_option("--activation", m.activation, "relu | gelu | gelu_tanh | glu | geglu | swiglu")->capture_default_str();
  cmd->add_flag("--norm-first", m.norm_first, "pre-norm layers (LayerNorm before attention / FFN)");
  cmd->add_flag("--tie-embeddings", m.tie_embeddings, "seq2seq: share target embedding and output projection");
  auto* epochs = cmd->add_option("--epochs", c.epochs, "passes over the training data");
  auto* steps = cmd->add_option("--max-steps", c.max_steps, "optimizer steps");
  auto* budget = cmd->add_option("--time-budget", c.time_budget, "seconds of training");
  auto* lr = cmd->add_option("--lr", c.lr, "peak learning rate (tasks: 2e-3)")->capture_default_str();
  cmd->add_option("--warmup", c.warmup, "linear warmup steps")->capture_default_str();
  cmd->add_option("--schedule", c.schedule,
                  "after warmup: auto (cosine to 0 when the length is known) | constant | inverse_sqrt | cosine")
      ->capture_default_str();
  cmd->add_option("--optimizer", c.optimizer, "adam | adamw")->capture_default_str();
  cmd->add_option("--weight-decay", c.weight_decay, "weight decay (L2 for adam, decoupled for adamw)")->capture_default_str();
  cmd->add_option("--label-smoothing", c.label_smoothing, "label smoothing")->capture_default_str();
  cmd->add_option("--clip-norm", c.clip_norm, "clip the gradient 2-norm (0 = off)")->capture_default_str();
  cmd->add_option("--seed", c.seed, "seed for data, initialisation and dropout")->capture_default_str();
  auto* threads = cmd->add_option("--threads", o->threads, "threads (default: all cores; results do not depend on it)");
  auto* batch = cmd->add_option("--batch-size", c.batch.batch_size, "examples per batch (tasks: 256)")->capture_default_str();
  auto* batch_tok = cmd->add_option("--batch-tokens", c.batch.batch_tokens, "padded tokens per batch (overrides --batch-size)");
  cmd->add_option("--eval-every", c.eval_every, "steps between evaluations (default: each epoch, or 10 per run)");
  cmd->add_flag("--skip-nonfinite", c.skip_nonfinite, "skip batches whose loss or gradient is not finite");
  auto* resume = cmd->add_option("--resume", o->resume, "continue the run saved in DIR");

  cmd->callback([cmd, data, o, out, epochs, steps, budget, threads, lr, dropout, batch, batch_tok, resume, task, tr, &run] {
    if (resume->count() == 0 && out->count() == 0) throw CLI::RequiredError("--out");
    // A resumed run continues exactly as saved: only its length and the thread count may be given
    // (an option silently ignored would look like it had taken effect).
    std::string fixed;
    if (resume->count() > 0)
      for (CLI::App* group : std::initializer_list<CLI::App*>{cmd, data})
        for (const CLI::Option* opt : group->get_options())
          if (opt->count() > 0 && opt != resume && opt != epochs && opt != steps && opt != budget && opt != threads)
            fixed += (fixed.empty() ? "" : ", ") + opt->get_name();
    if (resume->count() == 0 && task->count() == 0 && tr->count() == 0)
      throw CLI::RequiredError("--task or --train/--valid");
    const bool len_given = epochs->count() + steps->count() + budget->count() > 0;
    const bool lr_given = lr->count() > 0, dropout_given = dropout->count() > 0;
    const bool batch_given = batch->count() + batch_tok->count() > 0;
    run = [o, len_given, lr_given, dropout_given, batch_given, fixed] {
      if (!fixed.empty())
        throw std::invalid_argument("--resume continues the run with the settings saved in " + o->resume +
                                    "/config.json; only --epochs, --max-steps, --time-budget and --threads may be "
                                    "given with it (got " + fixed + ")");
      apply_threads(o->threads);
      train::TrainConfig c = o->c;
      const bool resuming = !o->resume.empty();
      if (resuming) {
        const train::TrainConfig given = c;
        c = train::load_train_config(o->resume);
        if (len_given) {  // a longer (or shorter) run may be asked for on resume
          c.epochs = given.epochs;
          c.max_steps = given.max_steps;
          c.time_budget = given.time_budget;
        }
      } else {
        c.model.arch = o->arch;
        c.model.num_encoder_layers = o->enc_layers >= 0 ? o->enc_layers : o->layers;
        c.model.num_decoder_layers = o->dec_layers >= 0 ? o->dec_layers : o->layers;
        if (!c.task.empty()) {  // the built-in tasks' measured defaults (see the help footer)
          if (!len_given) c.max_steps = kTaskSteps;
          if (!lr_given) c.lr = kTaskLr;
          if (!dropout_given) c.model.dropout = 0.0f;
          if (!batch_given) c.batch.batch_size = kTaskBatch;
        }
      }
      ProgressPrinter printer;
      train::TrainHooks hooks;
      hooks.progress = [&printer](const train::ProgressEvent& e) { printer(e); };
      hooks.should_stop = [](int64_t) { return g_signal.load() != 0; };
      install_stop_handlers();
      const train::TrainResult r = train::run_training(c, hooks, resuming);
      printer.clear();
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
      const train::Metrics& fm = r.final_metrics;
      std::fprintf(stderr, "trained %lld steps in %.1f s (%s); model in %s\n", static_cast<long long>(r.steps), r.seconds,
                   r.stop_reason.c_str(), c.out_dir.c_str());
      std::printf("validation: sequence accuracy %.2f%% (%lld/%lld sequences), token accuracy %.2f%%, token error rate %.4f\n",
                  100 * fm.sequence_accuracy(), static_cast<long long>(fm.exact), static_cast<long long>(fm.examples),
                  100 * fm.token_accuracy(), fm.token_error_rate());
      return 0;
    };
  });
}

}  // namespace tfm::cli
