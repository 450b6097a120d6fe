// src/cli/train_cmd.cc — `tfm train`: its parser built from the library's option table
// (tfm/train/options.h), MPI start-up, SIGINT/SIGTERM → a final checkpoint and a resume hint, and the
// printing. What the options mean — which settings win, the checks — is train::resolve_train_options;
// the loop is train::run_training.
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#ifdef TFM_HAVE_MPI
#include <mpi.h>
#endif

#include "commands.h"
#include "progress.h"
#include "stop_signal.h"
#include "tfm/message.h"
#include "tfm/models/model_dir.h"
#include "tfm/train/comm.h"
#include "tfm/train/options.h"
#include "tfm/train/trainer.h"

namespace tfm::cli {
namespace {

// ---- several processes (mpirun -np P tfm train ...) ----
// MPI is initialised here, only when a launcher started more than one process (a lone `tfm train`
// never touches MPI), before the options are resolved (agree_on_options), and finalised when the
// command ends; the library receives the communicator (train::TrainHooks::comm). Signals: Open MPI 4.1's mpirun answers
// SIGINT / SIGTERM by sending SIGTERM to every rank (after a SIGCONT), then SIGKILL odls_base_sigkill_timeout seconds
// later (default 1). Every rank's handler asks the loop to stop, the ranks agree on it with the next step's exchange
// and rank 0 writes one checkpoint; a step plus a checkpoint longer than that grace period needs `mpirun --mca
// odls_base_sigkill_timeout 30 ...` (or the environment variable OMPI_MCA_odls_base_sigkill_timeout=30).
class MpiSession {
 public:
  MpiSession() {
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
#endif
  }
  // This process's settings, once resolved.
  void configure(const train::RunSettings& run) {
    comm_.set_timeout(run.comm_timeout);
    comm_.set_bucket_bytes(static_cast<int64_t>(run.bucket_mb * (1 << 20)));
  }
  // Every rank resolved the options (`error`: what it threw, "" when it did not); true when none threw.
  // Otherwise each says whether its error is rank 0's: when every rank found the same (an option's value,
  // a file every machine lacks alike) rank 0 says it once, as one process would, and the others say
  // nothing, as for a usage error (main.cc); when they differ (a file one machine lacks) each rank that
  // found one says it, tagged with its rank. Every rank then exits non-zero, and none trains. Untimed:
  // the ranks arrive apart (resolving reads run directories).
  bool agree_on_options(const std::string& error) {
    if (!initialised_) return error.empty();
    std::string first = error;
    comm_.broadcast(first, /*timed=*/false);  // rank 0's
    const double mine[2] = {error.empty() ? 0.0 : 1.0, error == first ? 1.0 : 0.0};
    std::vector<double> all(2 * static_cast<size_t>(comm_.size()));
    comm_.allgather(mine, 2, all.data(), /*timed=*/false, "the agreement on the options (allgather)");
    bool any = false, alike = true;
    for (int r = 0; r < comm_.size(); ++r) {
      any = any || all[2 * static_cast<size_t>(r)] != 0;
      alike = alike && all[2 * static_cast<size_t>(r) + 1] != 0;
    }
    if (!any) return true;
    if (alike && comm_.rank() == 0) std::fprintf(stderr, "tfm: error: %s\n", one_line(error).c_str());
    if (!alike && !error.empty())
      std::fprintf(stderr, "tfm: error (rank %d of %d): %s\n", comm_.rank(), comm_.size(), one_line(error).c_str());
    return false;
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

// The type --help shows for an option.
std::string type_name(const train::TrainOption& o) {
  switch (o.type) {
    case train::OptionType::INT: return "INT";
    case train::OptionType::UINT:
      return "UINT";
    case train::OptionType::FLOAT: return "FLOAT";
    case train::OptionType::TEXT: return "TEXT";
    case train::OptionType::FLAG: return "";
    case train::OptionType::CHOICE: {
      std::string s;
      for (const auto& c : o.choices) s += (s.empty() ? "{" : ",") + c;
      return s + "}";
    }
  }
  return "";
}

// CLI11 writes a negatable flag's name as "--x,--no-x{false}": the default is in the help already.
class FlagFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    std::string name = CLI::Formatter::make_option_name(opt, is_positional);
    const size_t brace = name.find("{false}");
    return brace == std::string::npos ? name : name.erase(brace, 7);
  }
};

// The values given on the command line, one per table option.
struct Given {
  std::map<std::string, std::string> text;
  std::map<std::string, bool> flag;
  std::map<std::string, CLI::Option*> option;
  train::GivenOptions list() const {  // in table order
    train::GivenOptions g;
    for (const train::TrainOption& o : train::train_options()) {
      const CLI::Option* opt = option.at(o.name);
      if (opt->count() == 0) continue;
      g.emplace_back(o.name, o.type == train::OptionType::FLAG ? (flag.at(o.name) ? "true" : "false") : text.at(o.name));
    }
    return g;
  }
};

int train_main(const train::TrainSetup& setup, MpiSession& mpi) {
  train::Comm* comm = mpi.comm();
  // Under mpirun the ranks of a node share its cores: each takes its share, and never more CPUs than its
  // binding allows it (Open MPI binds each of 2 ranks to one core).
  if (setup.run.threads == 0 && comm && comm->local_size() > 1) {
    const int cpus = static_cast<int>(std::thread::hardware_concurrency());
    int allowed = cpus;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) allowed = std::min(allowed, CPU_COUNT(&set));
    apply_threads(std::max(1, std::min(allowed, cpus / comm->local_size())));
  } else
    apply_threads(setup.run.threads);
  const train::TrainConfig& c = setup.config;
  ProgressPrinter printer(c.text());
  train::TrainHooks hooks;
  hooks.progress = [&printer](const train::ProgressEvent& e) { printer(e); };
  hooks.should_stop = [](int64_t) { return stop_signal() != 0; };
  hooks.comm = comm;
  hooks.replace_run = setup.run.force;
  // A test hook (tests/mpi/data_parallel_test.cc, tests/cli/train_cmd_test.cc): the run's clock ticks
  // this many seconds per optimizer step, so that a time budget's fitted step count is the same on
  // every run of the test. Not for users: a real budget is wall-clock time.
  if (const char* tick = std::getenv("TFM_TEST_SECONDS_PER_STEP")) {
    const double seconds = std::stod(tick);
    hooks.clock = [seconds](int64_t steps) { return seconds * static_cast<double>(steps); };
  }
  install_stop_handlers();
  const train::TrainResult r = train::run_training(c, hooks, setup.mode == train::StartMode::RESUME);
  printer.clear();
  if (!mpi.lead()) return r.interrupted ? 128 + (stop_signal() ? stop_signal() : SIGINT) : 0;
  if (r.interrupted) {
    const int sig = stop_signal();
    // Under mpirun the ranks stop together; rank 0 may not be the one the signal reached.
    std::fprintf(stderr, "%s at step %lld: checkpoint written to %s\nresume with: tfm train --resume %s\n",
                 sig == SIGTERM ? "terminated (SIGTERM)"
                 : sig == SIGINT ? "interrupted (SIGINT)"
                                 : "stopped (another process of the run received a signal)",
                 static_cast<long long>(r.steps),
                 c.out_dir.c_str(), c.out_dir.c_str());
    return 128 + (sig ? sig : SIGINT);
  }
  if (r.skipped_nonfinite > 0)
    std::fprintf(stderr, "skipped %lld batches with a non-finite loss or gradient\n",
                 static_cast<long long>(r.skipped_nonfinite));
  std::fprintf(stderr, "trained %lld steps in %.1f s (%s); model in %s\n", static_cast<long long>(r.steps), r.seconds,
               std::string(enum_name(r.stop_reason)).c_str(), c.out_dir.c_str());
  if (const int64_t best = train::best_row(r.history); c.keep_best && best >= 0) {
    const train::EvalRow& b = r.history[static_cast<size_t>(best)];
    std::fprintf(stderr, "best validation loss %.4f at step %lld; that model in %s\n", b.valid_loss,
                 static_cast<long long>(b.step), model_dir::path(c.out_dir, train::BEST_DIR).c_str());
  }
  if (r.time_budget > 0) {
    const double off = r.train_seconds - r.time_budget;
    std::fprintf(stderr, "time budget %g s: training and its evaluations took %.1f s, %.1f s (%.1f%%) %s it%s\n",
                 r.time_budget, r.train_seconds, std::fabs(off), 100 * std::fabs(off) / r.time_budget,
                 off <= 0 ? "within" : "beyond",
                 r.budget_steps > 0 ? (" (" + std::to_string(r.budget_steps) + " steps fitted to it)").c_str() : "");
  }
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

void register_train(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("train", "Train a sequence model on a built-in task or on TSV pairs, or a language model on text");
  cmd->footer(
      "Examples:\n"
      "  tfm train --task reverse --arch encoder --out runs/reverse\n"
      "  tfm train --train pairs.tsv --valid dev.tsv --arch seq2seq --epochs 20 --out runs/mt\n"
      "  tfm train --text t.txt --valid-text v.txt --tokens char --block-size 64 --layers 4 --out runs/lm\n"
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
      "1600 steps, --lr 2e-3, --dropout 0, --batch-size 256; reverse: 99.7% of validation sequences by step ~1300); options given\n"
      "still apply. --epochs, --max-steps and --time-budget replace the run's length together.\n"
      "A time budget with the cosine (or auto) schedule fits the run to it: the run measures its step rate\n"
      "after the warmup, fixes its step count (saved in its state; the progress line shows it) and decays to\n"
      "--min-lr at that step. On --resume it continues to that count; --time-budget is then refused and\n"
      "--max-steps replaces the count. For a budget, --time-budget S with the default schedule is the recipe;\n"
      "--ema suits runs that end at a high learning rate (README, bench/RESULTS.md).\n"
      "Ctrl-C (or SIGTERM) finishes the current step, writes a checkpoint and prints how to resume.");
  cmd->formatter(std::make_shared<FlagFormatter>());
  auto given = std::make_shared<Given>();
  std::map<std::string, CLI::App*> groups;
  for (const train::TrainOption& o : train::train_options()) {
    CLI::App*& group = groups[o.group];
    if (!group) group = cmd->add_option_group(o.group);
    std::string needs;
    for (const auto& n : o.needs) needs += " (needs --" + n + ")";
    if (o.type == train::OptionType::FLAG) {
      given->option[o.name] = group->add_flag("--" + o.name + ",!--no-" + o.name, given->flag[o.name],
                                             o.help + (o.default_text.empty() ? "" : " (default: " + o.default_text + ")") + needs);
      continue;
    }
    CLI::Option* opt = group->add_option("--" + o.name, given->text[o.name], o.help + needs)->type_name(type_name(o));
    if (!o.default_text.empty()) opt->default_str(o.default_text);
    given->option[o.name] = opt;
  }
  cmd->callback([given, &run] {
    run = [list = given->list()] {
      MpiSession mpi;
      std::optional<train::TrainSetup> setup;
      std::string error;
      try {
        setup = train::resolve_train_options(list);
      } catch (const std::exception& e) {
        if (!mpi.comm()) throw;                                              // one process: main says it
        error = *e.what() ? e.what() : "the options could not be resolved";  // never "", which means none
      }
      if (!mpi.agree_on_options(error)) return 1;
      mpi.configure(setup->run);
      try {
        return train_main(*setup, mpi);
      } catch (const std::exception& e) {
        mpi.fail(e);
      }
    };
  });
}

}  // namespace tfm::cli
