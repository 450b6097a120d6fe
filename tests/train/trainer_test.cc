// tests/train/trainer_test.cc — metrics arithmetic, metrics.csv / curves.svg, and the training loop:
// exact resume, thread-count independence, divergence handling, and a trained model directory.
#include "tfm/train/trainer.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "io/file_util.h"
#include "test_util.h"
#include "tfm/data/text.h"
#include "tfm/data/tsv.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/model_dir.h"
#include "tfm/train/evaluate.h"
#include "tfm/train/options.h"
#include "train/dataset.h"

namespace tfm::train {
namespace {

// ---- the loop (needs the model) ---------------------------------------------------------------------

// A tiny reverse-task run: 7 batches an epoch (200 examples / 32), 40 steps ≈ 6 epochs, dropout on so
// the RNG stream matters, evaluation every 10 steps.
TrainConfig tiny(const std::string& out) {
  TrainConfig c;
  c.task = data::Task::REVERSE;
  c.task_train_size = 200;
  c.task_valid_size = 50;
  c.model.arch = Arch::ENCODER;
  c.model.d_model = 16;
  c.model.nhead = 2;
  c.model.num_encoder_layers = 1;
  c.model.num_decoder_layers = 1;
  c.model.dim_feedforward = 32;
  c.model.dropout = 0.1f;
  c.max_steps = 40;
  c.eval_every = 10;
  c.lr = 3e-3f;
  c.warmup = 5;
  c.clip_norm = 1.0f;
  c.batch.batch_size = 32;
  c.seed = 11;
  c.out_dir = out;
  return c;
}

std::string file(const std::string& dir, const char* name) { return io::read_file(dir + "/" + name); }

TEST(Trainer, InterruptedAndResumedEqualsUninterrupted) {
  const std::string a = testing::temp_dir("train_a"), b = testing::temp_dir("train_b");
  const TrainResult ra = run_training(tiny(a));
  EXPECT_EQ(ra.steps, 40);
  EXPECT_EQ(ra.stop_reason, StopReason::MAX_STEPS);
  ASSERT_EQ(ra.history.size(), 4u);

  TrainHooks stop;
  stop.should_stop = [](int64_t step) { return step == 17; };  // not an evaluation step
  const TrainResult rb1 = run_training(tiny(b), stop);
  EXPECT_TRUE(rb1.interrupted);
  EXPECT_EQ(rb1.steps, 17);
  const TrainResult rb2 = run_training(load_train_config(b), {}, /*resume=*/true);
  EXPECT_EQ(rb2.steps, 40);

  // Bit for bit: the weights file, and every loss in the history.
  EXPECT_TRUE(file(a, "model.safetensors") == file(b, "model.safetensors")) << "weights differ after resume";
  ASSERT_EQ(rb2.history.size(), ra.history.size());
  for (size_t i = 0; i < ra.history.size(); ++i) {
    EXPECT_EQ(ra.history[i].step, rb2.history[i].step);
    EXPECT_EQ(ra.history[i].train_loss, rb2.history[i].train_loss) << "row " << i;
    EXPECT_EQ(ra.history[i].valid_loss, rb2.history[i].valid_loss) << "row " << i;
  }
  EXPECT_EQ(ra.final_metrics.exact, rb2.final_metrics.exact);
  for (const char* f : {"config.json", "src_vocab.txt", "tgt_vocab.txt", "metrics.csv", "curves.svg",
                        "trainer_state.safetensors", "trainer_clock.json"})
    EXPECT_TRUE(std::filesystem::exists(a + "/" + f)) << f;
  // The state holds no clock, so the resumed run's is the same file; the clock is kept apart, and
  // the rows of the first session keep their timing across the resume.
  EXPECT_TRUE(file(a, "trainer_state.safetensors") == file(b, "trainer_state.safetensors"));
  ASSERT_FALSE(rb1.history.empty());
  EXPECT_GT(rb1.history[0].elapsed_seconds, 0.0);
  EXPECT_EQ(rb2.history[0].elapsed_seconds, rb1.history[0].elapsed_seconds);
  EXPECT_EQ(rb2.history[0].tokens_per_sec, rb1.history[0].tokens_per_sec);
  EXPECT_GE(rb2.seconds, rb1.seconds);  // elapsed time counts over both sessions
  const auto clock = nlohmann::json::parse(file(b, "trainer_clock.json"));
  EXPECT_EQ(clock.at("history").size(), ra.history.size());
  EXPECT_EQ(clock.at("history")[0].at("elapsed_seconds").get<double>(), rb1.history[0].elapsed_seconds);
}

// With --batch-tokens an epoch's batch count depends on its shuffle: a run of --epochs plans its length (the
// cosine schedule's) from epoch 0's count, and a run resumed in a later epoch plans the same length.
TEST(Trainer, TokenBatchedEpochsResumedInALaterEpochEqualUninterrupted) {
  const auto config = [](const std::string& out) {
    TrainConfig c = tiny(out);
    c.max_steps = 0;
    c.epochs = 3;
    c.eval_every = 0;  // at each epoch's end
    c.batch.batch_tokens = 100;
    c.schedule = Schedule::COSINE;
    return c;
  };
  const std::string a = testing::temp_dir("train_tok_a"), b = testing::temp_dir("train_tok_b");
  const TrainConfig ca = config(a);
  std::vector<int64_t> counts;  // the test's premise: the epochs count different numbers of batches
  for (int64_t e = 0; e < 3; ++e)
    counts.push_back(static_cast<int64_t>(data::plan_epoch(task_epoch(ca, e), ca.batch, ca.seed, e).size()));
  ASSERT_TRUE(counts[0] != counts[1] || counts[0] != counts[2]) << counts[0];
  const TrainResult ra = run_training(ca);
  TrainHooks stop;
  const int64_t at = counts[0] + counts[1] + 2;  // in epoch 2
  stop.should_stop = [at](int64_t step) { return step == at; };
  EXPECT_TRUE(run_training(config(b), stop).interrupted);
  const TrainResult rb = run_training(load_train_config(b), {}, /*resume=*/true);
  EXPECT_EQ(rb.steps, ra.steps);
  EXPECT_TRUE(file(a, "model.safetensors") == file(b, "model.safetensors")) << "weights differ after resume";
  ASSERT_EQ(rb.history.size(), ra.history.size());
  for (size_t i = 0; i < ra.history.size(); ++i) EXPECT_EQ(rb.history[i].lr, ra.history[i].lr) << "row " << i;
}

// The progress events' ETA rests on the steps after a session's first (whose warm-up would overstate the run several
// times over), once those have taken a second: none (−1) before. Every progress call takes 0.6 s (the run waits for
// it), so the steps after the first have taken 0.6 s at step 2's event and 1.2 s at step 3's: steps 1 and 2 have no
// ETA, steps 3 to 5 have one, 0 at the last step.
TEST(Trainer, EtaWaitsForASecondOfStepsAfterTheFirst) {
  const std::string d = testing::temp_dir("progress_eta");
  TrainConfig c = tiny(d + "/run");
  c.max_steps = 5;
  c.eval_every = 0;
  std::vector<std::pair<int64_t, double>> etas;  // (step, eta_seconds) of each step event
  TrainHooks hooks;
  hooks.progress = [&](const ProgressEvent& e) {
    if (e.kind != ProgressEvent::Kind::STEP) return;
    etas.emplace_back(e.step, e.eta_seconds);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
  };
  run_training(c, hooks);
  ASSERT_EQ(etas.size(), 5u);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(etas[static_cast<size_t>(i)].first, i + 1);
  EXPECT_EQ(etas[0].second, -1);  // the first step alone
  EXPECT_EQ(etas[1].second, -1);  // 0.6 s of steps after it
  EXPECT_GT(etas[2].second, 0);   // 1.2 s: two steps left of ~0.6 s each
  EXPECT_LT(etas[2].second, 3);
  EXPECT_GT(etas[3].second, 0);
  EXPECT_EQ(etas[4].second, 0);  // the last step: nothing left
  std::filesystem::remove_all(d);
}

// A length given on resume (tfm train --resume DIR --max-steps N) is saved with the run: interrupted again,
// the run resumed without options goes on to it, as the printed "resume with" line promises.
TEST(Trainer, LengthGivenOnResumeIsKeptForTheNextResume) {
  const std::string d = testing::temp_dir("train_longer");
  TrainConfig c = tiny(d);
  c.max_steps = 20;
  EXPECT_EQ(run_training(c).steps, 20);
  TrainConfig longer = load_train_config(d);
  longer.max_steps = 40;
  TrainHooks stop;
  stop.should_stop = [](int64_t step) { return step == 27; };
  EXPECT_EQ(run_training(longer, stop, /*resume=*/true).steps, 27);
  EXPECT_EQ(load_train_config(d).max_steps, 40);
  const TrainResult r = run_training(load_train_config(d), {}, /*resume=*/true);
  EXPECT_EQ(r.steps, 40);
  EXPECT_EQ(r.stop_reason, StopReason::MAX_STEPS);
}

// A checkpoint whose writing fails part of the way (here a file-size limit the state file exceeds, as a
// full disk would stop it) leaves the previous checkpoint whole: every file of it as it was, not the model
// of one step beside the state of another; the run then resumes from it.
TEST(Trainer, FailedCheckpointLeavesThePreviousOneWhole) {
  const std::string d = testing::temp_dir("train_efbig");
  TrainConfig c = tiny(d);
  c.max_steps = 10;
  run_training(c);
  const std::vector<const char*> files = {"model.safetensors", "trainer_state.safetensors", "trainer_clock.json",
                                          "metrics.csv", "curves.svg"};
  std::map<std::string, std::string> before;
  for (const char* f : files) before[f] = file(d, f);
  const size_t limit = (before["model.safetensors"].size() + before["trainer_state.safetensors"].size()) / 2;
  ASSERT_GT(limit, before["model.safetensors"].size());
  TrainConfig longer = load_train_config(d);
  longer.max_steps = 20;
  EXPECT_THROW(testing::with_file_size_limit(limit, [&] { run_training(longer, {}, /*resume=*/true); }),
               std::runtime_error);
  for (const char* f : files) EXPECT_EQ(file(d, f), before[f]) << f << " changed";
  EXPECT_EQ(run_training(longer, {}, /*resume=*/true).steps, 20);
}

// A fresh run whose first checkpoint fails (a full disk; here a file-size limit the model file exceeds) takes
// its description (config.json, vocabularies) away again: the directory holds no config without weights,
// and the same run started again trains.
TEST(Trainer, FailedFirstCheckpointLeavesNoHalfWrittenModel) {
  const std::string ref = testing::temp_dir("train_first_ref"), d = testing::temp_dir("train_first_efbig");
  TrainConfig c = tiny(ref);
  c.max_steps = 3;
  run_training(c);
  const size_t limit = file(ref, "model.safetensors").size() / 2;
  ASSERT_GT(limit, file(ref, "config.json").size());
  c.out_dir = d;
  EXPECT_THROW(testing::with_file_size_limit(limit, [&] { run_training(c); }), std::runtime_error);
  EXPECT_TRUE(std::filesystem::is_empty(d)) << "the failed first checkpoint left files in " << d;
  EXPECT_EQ(run_training(c).steps, 3);
  EXPECT_EQ(file(d, "model.safetensors"), file(ref, "model.safetensors"));
}

// A fresh run whose description fails part of the way (its vocabularies written, then config.json failing: a full
// disk; here a file-size limit config.json exceeds and the vocabularies do not) takes away what it wrote, and the
// directory it made: nothing is left behind, as for a failure in the checkpoint after it.
TEST(Trainer, FailedDescriptionLeavesNothingBehind) {
  const std::string ref = testing::temp_dir("train_describe_ref"), root = testing::temp_dir("train_describe_efbig");
  TrainConfig c = tiny(ref);
  c.max_steps = 2;
  run_training(c);
  const size_t vocab = std::max(file(ref, "src_vocab.txt").size(), file(ref, "tgt_vocab.txt").size());
  const size_t limit = (vocab + file(ref, "config.json").size()) / 2;
  ASSERT_GT(limit, vocab);
  ASSERT_LT(limit, file(ref, "config.json").size());
  c.out_dir = root + "/fresh";  // made by the run
  try {
    testing::with_file_size_limit(limit, [&] { run_training(c); });
    FAIL() << "config.json was written past the limit";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), c.out_dir + "/config.json: write failed: File too large");
  }
  EXPECT_FALSE(std::filesystem::exists(c.out_dir)) << "the vocabularies, and the directory the run made, are left";
  EXPECT_EQ(run_training(c).steps, 2);
  std::filesystem::remove_all(root);
}

// An --out that cannot be a directory is refused by name before the run makes anything: a file, a symbolic link to
// nowhere (naming its target), a path under a file.
TEST(Trainer, OutThatCannotBeADirectoryIsRefusedByName) {
  const std::string root = testing::temp_dir("train_bad_out");
  testing::spit(root + "/afile", "x");
  std::filesystem::create_symlink("nowhere/dir", root + "/link");
  for (const auto& [out, message] : std::vector<std::pair<std::string, std::string>>{
           {root + "/afile", root + "/afile: cannot make the directory (Not a directory: a file of that name exists); "
                                    "choose another output directory"},
           {root + "/link", root + "/link: cannot make the directory (No such file or directory: it is a symbolic link "
                                   "to 'nowhere/dir', which does not exist); make that directory first, or choose "
                                   "another output directory"},
           {root + "/afile/run",
            root + "/afile/run: cannot make the directory (Not a directory: " + root + "/afile is a file)"}}) {
    TrainConfig c = tiny(out);
    c.max_steps = 1;
    try {
      run_training(c);
      ADD_FAILURE() << "trained into " << out;
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
  EXPECT_EQ(testing::slurp(root + "/afile"), "x");
  EXPECT_FALSE(std::filesystem::exists(root + "/nowhere"));
  std::filesystem::remove_all(root);
}

// Trains `c` with 1 thread into dir_one and with 2 threads into dir_two (the thread count restored after).
void train_with_one_and_two_threads(TrainConfig c, const std::string& dir_one, const std::string& dir_two) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  c.out_dir = dir_one;
  run_training(c);
  omp_set_num_threads(2);
  c.out_dir = dir_two;
  run_training(c);
  omp_set_num_threads(saved);
}

TEST(Trainer, SameNumbersForOneAndTwoThreads) {
  const std::string a = testing::temp_dir("thr1"), b = testing::temp_dir("thr2");
  TrainConfig c = tiny(a);
  c.max_steps = 15;
  train_with_one_and_two_threads(c, a, b);
  EXPECT_TRUE(file(a, "model.safetensors") == file(b, "model.safetensors")) << "thread count changed the weights";
  EXPECT_TRUE(file(a, "trainer_state.safetensors") == file(b, "trainer_state.safetensors"))
      << "thread count changed the trainer state";
}

// bf16 training (TrainConfig::dtype): resumed equals uninterrupted bit for bit, and the thread count changes
// nothing, on a model wide enough that the bf16 matmuls are cut into panels (M·N·K ≥ 2²¹); the weights differ from
// the f32 run's (bf16 ran), and "dtype" is saved with the run.
TrainConfig tiny_bf16(const std::string& out) {
  TrainConfig c = tiny(out);
  c.model.d_model = 64;
  c.model.nhead = 4;
  c.model.dim_feedforward = 512;
  c.max_steps = 12;
  c.eval_every = 6;
  c.dtype = Precision::BFLOAT16;
  return c;
}

TEST(TrainerBf16, InterruptedAndResumedEqualsUninterruptedAndDiffersFromF32) {
  const std::string a = testing::temp_dir("bf16_a"), b = testing::temp_dir("bf16_b"), f = testing::temp_dir("bf16_f");
  run_training(tiny_bf16(a));
  TrainHooks stop;
  stop.should_stop = [](int64_t step) { return step == 5; };
  EXPECT_TRUE(run_training(tiny_bf16(b), stop).interrupted);
  const TrainConfig saved = load_train_config(b);
  EXPECT_EQ(saved.dtype, Precision::BFLOAT16);
  EXPECT_EQ(run_training(saved, {}, /*resume=*/true).steps, 12);
  EXPECT_TRUE(file(a, "model.safetensors") == file(b, "model.safetensors")) << "bf16 weights differ after resume";
  EXPECT_TRUE(file(a, "trainer_state.safetensors") == file(b, "trainer_state.safetensors"));
  TrainConfig c32 = tiny_bf16(f);
  c32.dtype = Precision::FLOAT32;
  run_training(c32);
  EXPECT_FALSE(file(a, "model.safetensors") == file(f, "model.safetensors")) << "bf16 computed the f32 numbers";
}

TEST(TrainerBf16, SameNumbersForOneAndTwoThreads) {
  const std::string a = testing::temp_dir("bf16_thr1"), b = testing::temp_dir("bf16_thr2");
  TrainConfig c = tiny_bf16(a);
  c.max_steps = 6;
  train_with_one_and_two_threads(c, a, b);
  EXPECT_TRUE(file(a, "model.safetensors") == file(b, "model.safetensors")) << "thread count changed the bf16 weights";
}

TEST(Trainer, ResumeWithoutCheckpointIsAClearError) {
  const std::string a = testing::temp_dir("nockpt");
  TrainConfig c = tiny(a);
  c.max_steps = 3;
  c.eval_every = 100;
  TrainHooks stop;
  stop.should_stop = [](int64_t) { return false; };
  run_training(c, stop);  // ends normally: one final checkpoint
  std::filesystem::remove(a + "/trainer_state.safetensors");
  try {
    run_training(load_train_config(a), {}, true);
    FAIL() << "resumed without a checkpoint";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no checkpoint to resume from"), std::string::npos) << e.what();
  }
}

// Subword or byte tokens for a built-in task are refused by name, before anything is written (the task's
// tokens are numbers; tfm train --task reverse --tokens spm).
TEST(Trainer, SubwordOrByteTokensForATaskAreRefused) {
  const std::string a = testing::temp_dir("taskspm");
  for (const data::Tokenization t : {data::Tokenization::SPM, data::Tokenization::BYTE, data::Tokenization::GPT2_BPE})
    for (const bool source : {true, false}) {
      TrainConfig c = tiny(a + "/run");
      (source ? c.src_tokens : c.tgt_tokens) = t;
      const std::string name(enum_name(t));
      try {
        run_training(c);
        FAIL() << "trained a task with " << name << " tokens";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(name + " does not apply to a built-in task"), std::string::npos) << e.what();
      }
      EXPECT_FALSE(std::filesystem::exists(a + "/run/config.json"));
    }
}

// A fresh run into a directory that holds another run or model (tfm train --force) replaces it with its
// first checkpoint: a run that dies before then leaves the old run as it was; once it checkpoints, no old
// checkpoint, weights, metrics or GPT-2 source is left beside its new config.
// A run that ends inside its warmup never reaches --lr: it says so once, with the rate it reaches; a run
// longer than its warmup says nothing.
TEST(Trainer, RunShorterThanItsWarmupSaysSo) {
  const std::string a = testing::temp_dir("warmup");
  std::vector<std::string> notes;
  TrainHooks hooks;
  hooks.progress = [&](const ProgressEvent& e) {
    if (e.kind == ProgressEvent::Kind::NOTE && e.message.rfind("warmup:", 0) == 0) notes.push_back(e.message);
  };
  TrainConfig c = tiny(a + "/short");
  c.max_steps = 5;
  c.warmup = 100;
  run_training(c, hooks);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "warmup: the run's 5 steps end within its 100 warmup steps, so the learning rate rises only to "
                      "0.00015 (--lr 0.003) and never decays; a shorter --warmup (e.g. 1) fits the run");
  notes.clear();
  c = tiny(a + "/long");
  c.warmup = 10;
  run_training(c, hooks);
  EXPECT_TRUE(notes.empty());

  // --schedule cosine asked for by name has nothing to decay: refused before the first step, by its options.
  c = tiny(a + "/cosine");
  c.schedule = Schedule::COSINE;
  c.max_steps = 5;
  c.warmup = 100;
  try {
    run_training(c);
    FAIL() << "a cosine run inside its warmup trained";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "--schedule cosine: the run's 5 steps end within its --warmup 100, so there is nothing to decay; give a "
              "shorter --warmup (e.g. 1), more steps, or --schedule auto (which, for a run this short, only warms up)");
  }
  c.max_steps = 1;  // the warmup it suggests fits the run: none for one step
  try {
    run_training(c);
    FAIL() << "a one-step cosine run inside its warmup trained";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("(e.g. 0)"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(a + "/cosine/model.safetensors"));
}

// A run directory's config.json that the resume cannot read is named in the error (tfm train --resume and
// --init-from read it through load_train_config).
TEST(Trainer, ResumeConfigErrorsNameTheFile) {
  const std::string a = testing::temp_dir("badcfg");
  TrainConfig c = tiny(a);
  c.max_steps = 1;
  run_training(c);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(io::read_file(a + "/config.json"));
  j["model"]["foo"] = 1;
  testing::spit(a + "/config.json", j.dump(2));
  try {
    load_train_config(a);
    FAIL() << "an unknown key was read";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), a + "/config.json: model config: unknown key 'foo'");
  }
}

TEST(Trainer, FreshRunReplacesTheRunItReplacesAtItsFirstCheckpoint) {
  const std::string a = testing::temp_dir("replaced");
  TrainConfig c = tiny(a);
  c.max_steps = 2;
  run_training(c);
  const std::vector<const char*> files = {"model.safetensors", "trainer_state.safetensors", "trainer_clock.json",
                                          "metrics.csv", "curves.svg", "config.json", "gpt2_source.json"};
  testing::spit(a + "/gpt2_source.json", "{}");
  std::map<std::string, std::string> before;
  for (const char* f : files) before[f] = io::read_file(a + "/" + f);
  TrainHooks dies;  // the replacing run fails at its first step, before any checkpoint
  dies.progress = [](const ProgressEvent& e) {
    if (e.kind == ProgressEvent::Kind::STEP) throw std::runtime_error("killed");
  };
  c.seed = 12;
  EXPECT_THROW(run_training(c, dies), std::runtime_error);
  for (const char* f : files) EXPECT_EQ(io::read_file(a + "/" + f), before[f]) << f << " of the old run changed";
  c.max_steps = 1;
  std::filesystem::create_directories(a + "/best");  // a --keep-best run's best model
  run_training(c);
  EXPECT_FALSE(std::filesystem::exists(a + "/gpt2_source.json")) << "the replaced model's GPT-2 source is left";
  EXPECT_FALSE(std::filesystem::exists(a + "/best")) << "the replaced run's best model is left";
  for (const char* f : {"model.safetensors", "trainer_state.safetensors", "metrics.csv", "config.json"})
    EXPECT_NE(io::read_file(a + "/" + f), before[f]) << f << " is still the old run's";
  EXPECT_NE(io::read_file(a + "/config.json").find("\"seed\": 12"), std::string::npos);
}

// A killed --keep-best run leaves its best model's staging directory (io::StagedDirectory's ".best.tmp.<pid>", and
// its ".old"): a fresh run replacing it removes them with the rest of its files, as --resume does.
TEST(Trainer, FreshRunRemovesTheBestModelStagingOfTheRunItReplaces) {
  const std::string a = testing::temp_dir("replaced_staging");
  TrainConfig c = tiny(a);
  c.max_steps = 2;
  run_training(c);
  for (const char* stale : {"/.best.tmp.4242", "/.best.tmp.4242.old"}) {
    std::filesystem::create_directories(a + stale);
    testing::spit(a + stale + "/model.safetensors", "weights");
  }
  testing::spit(a + "/.best.tmp.notes", "a file of another name pattern's");
  c.seed = 12;
  run_training(c);
  EXPECT_FALSE(std::filesystem::exists(a + "/.best.tmp.4242")) << "the killed run's staging directory is left";
  EXPECT_FALSE(std::filesystem::exists(a + "/.best.tmp.4242.old"));
  EXPECT_TRUE(std::filesystem::exists(a + "/model.safetensors"));
}

// OUT/best is written in a hidden staging directory and renamed into place: a write that fails there (a full disk;
// here a file-size limit the model exceeds, hit by the resume rewriting the best model of its checkpoint) is said of
// OUT/best, which is left as it was, not of the staging directory, removed by then.
TEST(Trainer, FailedBestModelWriteNamesTheBestDirectory) {
  const std::string d = testing::temp_dir("best_efbig");
  TrainConfig c = tiny(d);
  c.max_steps = 20;
  c.keep_best = true;
  const TrainResult r = run_training(c);
  ASSERT_EQ(best_row(r.history), static_cast<int64_t>(r.history.size()) - 1) << "the last evaluation is not the best";
  const std::string model = file(d, "best/model.safetensors");
  size_t description = 0;
  for (const auto& e : std::filesystem::directory_iterator(d + "/best"))
    if (e.path().filename() != "model.safetensors")
      description = std::max(description, static_cast<size_t>(e.file_size()));
  const size_t limit = (description + model.size()) / 2;
  ASSERT_GT(limit, description);
  ASSERT_LT(limit, model.size());
  try {
    testing::with_file_size_limit(limit, [&] { run_training(load_train_config(d), {}, /*resume=*/true); });
    FAIL() << "the best model was written past the limit";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), d +
                                         "/best/model.safetensors: write failed: File too large (the best model, of "
                                         "step 20, was not written; " +
                                         d + "/best holds the previous one)");
  }
  EXPECT_EQ(file(d, "best/model.safetensors"), model);
  for (const auto& e : std::filesystem::directory_iterator(d))
    EXPECT_EQ(e.path().filename().string().find(".best.tmp."), std::string::npos) << e.path() << " is left";
}

// A --resume that trains nothing (--max-steps at or below the run's step) leaves config.json as it was: the length
// it gives is saved only once the run takes a step.
TEST(Trainer, ResumeThatTrainsNothingLeavesConfigAsItWas) {
  const std::string d = testing::temp_dir("resume_nothing");
  run_training(tiny(d));
  const std::string config = file(d, "config.json");
  for (const int64_t steps : {20, 40}) {
    TrainConfig c = load_train_config(d);
    c.max_steps = steps;
    EXPECT_EQ(run_training(c, {}, /*resume=*/true).steps, 40);
    EXPECT_EQ(file(d, "config.json"), config) << "--max-steps " << steps;
  }
  EXPECT_EQ(load_train_config(d).max_steps, 40);
}

TEST(Trainer, DivergenceNamesTheStepAndSkipGivesUp) {
  const std::string a = testing::temp_dir("diverge") + "/fresh";  // created by the run
  TrainConfig c = tiny(a);
  c.lr = 1e30f;  // Adam moves every weight by ≈ lr on the first step: the next loss overflows
  c.clip_norm = 0;
  c.warmup = 0;
  c.schedule = Schedule::CONSTANT;
  try {
    run_training(c);
    FAIL() << "lr 1e30 did not diverge";
  } catch (const TrainingDiverged& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("training diverged at step "), std::string::npos) << m;
    EXPECT_NE(m.find("--skip-nonfinite"), std::string::npos) << m;
    EXPECT_NE(m.find("No checkpoint was written yet"), std::string::npos) << m;
    EXPECT_NE(m.find(", --clip-norm 1.0, "), std::string::npos) << m;  // clipping is off: turn it on
  }
  EXPECT_FALSE(std::filesystem::exists(a)) << "the run directory it created and left empty";
  c.skip_nonfinite = true;
  c.clip_norm = 2.0f;  // clipping is on (a rate of 1e30 still diverges): clip tighter
  try {
    run_training(c);
    FAIL() << "skipping never gave up";
  } catch (const TrainingDiverged& e) {
    EXPECT_NE(std::string(e.what()).find("consecutive batches"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a lower --clip-norm (now 2)"), std::string::npos) << e.what();
  }
}

// A budget that ends the run before any count is fixed (a constant schedule), on a clock of 0.125 s a step: the
// clock is read before each step, so the step starting at 5.0 s is the last (41). A run interrupted right after
// step 40 (its clock at the budget) and resumed takes that step too: the same 41 steps, the same bytes; resuming
// the finished run trains nothing.
TEST(Trainer, TimeBudgetInterruptedPastItsEndResumesToTheSameSteps) {
  const std::string a = testing::temp_dir("budget_a"), b = testing::temp_dir("budget_b");
  TrainConfig c = tiny(a);
  c.max_steps = 0;
  c.time_budget = 5.0;
  c.schedule = Schedule::CONSTANT;
  TrainHooks tick;
  tick.clock = [](int64_t steps) { return 0.125 * static_cast<double>(steps); };
  const TrainResult whole = run_training(c, tick);
  EXPECT_EQ(whole.steps, 41);
  EXPECT_EQ(whole.stop_reason, StopReason::TIME_BUDGET);
  TrainConfig cb = c;
  cb.out_dir = b;
  TrainHooks stop = tick;
  stop.should_stop = [](int64_t step) { return step == 40; };
  EXPECT_TRUE(run_training(cb, stop).interrupted);
  EXPECT_EQ(run_training(load_train_config(b), tick, /*resume=*/true).steps, 41);
  EXPECT_EQ(file(a, "model.safetensors"), file(b, "model.safetensors"));
  const std::string model = file(b, "model.safetensors");
  EXPECT_EQ(run_training(load_train_config(b), tick, /*resume=*/true).steps, 41);
  EXPECT_EQ(file(b, "model.safetensors"), model);
}

// A run directory holds one run at a time: while another holds its lock, a fresh run and a --resume are refused
// before they write or delete anything there.
TEST(Trainer, RunDirectoryInUseIsRefused) {
  const std::string a = testing::temp_dir("in_use");
  TrainConfig c = tiny(a);
  c.max_steps = 2;
  run_training(c);
  const std::string model = testing::slurp(a + "/model.safetensors");
  io::DirectoryLock other(a, "held by the test");
  for (bool resume : {false, true}) {
    TrainConfig again = c;
    again.max_steps = 4;
    try {
      run_training(again, {}, resume);
      ADD_FAILURE() << "ran beside the directory's holder";
    } catch (const std::exception& e) {
      // (the holder may be a run, or a tfm quantize, import or export replacing the directory: io::lock_for_replacing)
      EXPECT_EQ(std::string(e.what()), a + ": another tfm train is running in this directory, or a tfm quantize, "
                                           "import or export is replacing it (it holds the directory's lock): wait "
                                           "for it to end, or train into another --out");
    }
  }
  EXPECT_EQ(testing::slurp(a + "/model.safetensors"), model);
}

// A front end looks for a run in --out before reading the data; a run that ends after that look must not be
// overwritten by the one that then takes the lock: without replace_run (--force) the trainer looks again, under the
// lock. With it (the C++ default), the old run's files go with the new run's first checkpoint.
TEST(Trainer, FreshRunWithoutReplaceRunRefusesARunFoundUnderTheLock) {
  const std::string a = testing::temp_dir("ended_meanwhile");
  TrainConfig c = tiny(a);
  c.max_steps = 2;
  run_training(c);
  const std::string model = testing::slurp(a + "/model.safetensors");
  TrainConfig again = c;
  again.seed = c.seed + 1;
  TrainHooks keep;
  keep.replace_run = false;
  try {
    run_training(again, keep);
    ADD_FAILURE() << "a fresh run overwrote a finished one without --force";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--out " + a + " holds a run or model already (" + a +
                                         "/model.safetensors): continue a run with --resume " + a +
                                         ", train into another --out, or give --force to delete it and start over");
  }
  EXPECT_EQ(testing::slurp(a + "/model.safetensors"), model);
  run_training(again);  // replace_run: true
  EXPECT_NE(testing::slurp(a + "/model.safetensors"), model);
}

TEST(Trainer, LoadedModelTranslatesAndEvaluates) {
  const std::string a = testing::temp_dir("loaded");
  TrainConfig c = tiny(a);
  c.max_steps = 5;
  run_training(c);
  const TrainedModel m = load_model_dir(a);
  EXPECT_EQ(m.model->config().arch, Arch::ENCODER);
  const auto out = translate_lines(m, {"3 1 4", "", "19 18 17 16 15"}, 1, 2);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(std::count(out[0].begin(), out[0].end(), ' '), 2);  // encoder: one token per source token
  EXPECT_EQ(out[1], "");
  EXPECT_THROW(translate_lines(m, {"1 99"}, 1, 2), std::invalid_argument);  // 99 is not a task token
  const Metrics r = evaluate(m, EvalSet{{{"1", "2"}}, {{{"2", "1"}}}, {}}, DecodeOptions{}, 4,
                             [&](const data::Tokens& t) { return data::detokenize(t, m.tgt_tokenizer); });
  EXPECT_EQ(r.examples, 1);
  EXPECT_EQ(r.reference_tokens, 2);
  // With the references as written (a TSV file's), BLEU and chrF score against those texts, not against the
  // references' tokens detokenized (a tokenizer may normalize them): the same prediction, one reference text that
  // is its own output and one that differs from the tokens; the token figures stay the tokens'.
  const auto detok = [&](const data::Tokens& t) { return data::detokenize(t, m.tgt_tokenizer); };
  const std::string own = out[0];
  EvalSet as_written{{data::tokenize("3 1 4", m.src_tokenizer)}, {{{"2", "1"}}}, {{own}}};
  const Metrics w = evaluate(m, as_written, DecodeOptions{}, 4, detok);
  EXPECT_EQ(w.chrf(), 100.0);
  as_written.reference_texts = {{"9 9 9 9"}};
  EXPECT_LT(evaluate(m, as_written, DecodeOptions{}, 4, detok).chrf(), 50.0);
  EXPECT_EQ(evaluate(m, as_written, DecodeOptions{}, 4, detok).reference_tokens, 2);
  // tsv_eval_set keeps each target's text, grouped with its source.
  data::TsvData tsv;
  tsv.pairs = {{{"a"}, {"x"}, "a", "x ", 1}, {{"b"}, {"y"}, "b", "y", 2}, {{"a"}, {"z"}, "a", "z", 3}};
  const EvalSet g = tsv_eval_set(tsv);
  EXPECT_EQ(g.reference_texts, (std::vector<std::vector<std::string>>{{"x ", "z"}, {"y"}}));
}


// ---- fine-tuning from a model directory (TrainConfig::init_from) ----------------------------------

// A run on the reverse task started from the model in `from`: same task data as tiny() (same seed).
TrainConfig fine_tune(const std::string& from, const std::string& out) {
  TrainConfig c;
  c.task = data::Task::REVERSE;
  c.task_train_size = 200;
  c.task_valid_size = 50;
  c.init_from = from;
  c.model.dropout = 0.0f;  // the run's, not the source's 0.1
  c.max_steps = 6;
  c.eval_every = 3;
  c.lr = 3e-3f;
  c.warmup = 2;
  c.batch.batch_size = 32;
  c.seed = 11;
  c.out_dir = out;
  return c;
}

TEST(Trainer, InitFromStartsFromTheModelDirectoryAndResumesFromItsOwnCheckpoint) {
  const std::string a = testing::temp_dir("init_src"), b = testing::temp_dir("init_b"), b2 = testing::temp_dir("init_b2");
  TrainConfig src = tiny(a);
  src.max_steps = 5;
  const TrainResult ra = run_training(src);

  const TrainResult rb = run_training(fine_tune(a, b));
  EXPECT_EQ(rb.steps, 6);
  // The first row (step 0) scores the source model as loaded: bit for bit its own last evaluation
  // and the teacher-forced figures of load_model_dir's model on the same validation data.
  ASSERT_EQ(rb.history.size(), 3u);
  EXPECT_EQ(rb.history[0].step, 0);
  EXPECT_EQ(rb.history[0].valid_loss, ra.history.back().valid_loss);
  EXPECT_EQ(rb.history[0].valid_token_accuracy, ra.history.back().valid_token_accuracy);
  const TrainedModel m = load_model_dir(a);
  std::vector<data::Example> valid;
  for (auto& e : data::make_task_set(data::Task::REVERSE, 11, data::Split::VALID, 50))
    valid.push_back({std::move(e.src), std::move(e.tgt)});
  const TeacherForced tf = evaluate_teacher_forced(*m.model, valid, 256);
  EXPECT_EQ(rb.history[0].valid_loss, tf.loss);
  EXPECT_EQ(rb.history[0].valid_token_accuracy, tf.token_accuracy);
  EXPECT_EQ(rb.history[0].valid_sequence_accuracy, tf.sequence_accuracy);
  // Then it trains: other weights, another validation loss.
  EXPECT_NE(rb.history.back().valid_loss, rb.history[0].valid_loss);
  EXPECT_FALSE(file(a, "model.safetensors") == file(b, "model.safetensors"));

  // The run's directory is an ordinary run's: the source's model with the run's dropout, its
  // vocabularies, and init_from saved.
  const TrainedModel mb = load_model_dir(b);
  EXPECT_EQ(mb.model->config().d_model, 16);
  EXPECT_EQ(mb.model->config().arch, Arch::ENCODER);
  EXPECT_EQ(mb.model->config().dropout, 0.0f);
  EXPECT_EQ(file(a, "src_vocab.txt"), file(b, "src_vocab.txt"));
  EXPECT_EQ(load_train_config(b).init_from, a);

  // Interrupted and resumed equals uninterrupted, and the resume reads its own checkpoint: the source
  // directory is gone by then.
  TrainHooks stop;
  stop.should_stop = [](int64_t step) { return step == 2; };
  EXPECT_TRUE(run_training(fine_tune(a, b2), stop).interrupted);
  std::filesystem::remove_all(a);
  const TrainResult rb2 = run_training(load_train_config(b2), {}, /*resume=*/true);
  EXPECT_EQ(rb2.steps, 6);
  EXPECT_TRUE(file(b, "model.safetensors") == file(b2, "model.safetensors")) << "weights differ after resume";
  ASSERT_EQ(rb2.history.size(), rb.history.size());
  for (size_t i = 0; i < rb.history.size(); ++i) EXPECT_EQ(rb.history[i].valid_loss, rb2.history[i].valid_loss) << i;
  std::filesystem::remove_all(b);
  std::filesystem::remove_all(b2);
}

// Runs `c` and returns the error's message ("" when it did not throw).
std::string error_of(const TrainConfig& c) {
  try {
    run_training(c);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Trainer, InitFromErrorsNameTheFieldFileKeyOrToken) {
  namespace fs = std::filesystem;
  const std::string a = testing::temp_dir("init_err_src"), d = testing::temp_dir("init_err");
  TrainConfig src = tiny(a);
  src.max_steps = 1;
  run_training(src);

  // A model field besides dropout / drop_path would be ignored: refused by name.
  TrainConfig c = fine_tune(a, d + "/out");
  c.model.d_model = 32;
  c.model.norm_first = true;
  EXPECT_EQ(error_of(c), "train config: init_from takes the model from " + a +
                             "/config.json; only dropout and drop_path of the model may be set with it (got d_model, "
                             "norm_first)");
  c = fine_tune(a, d + "/out");
  c.model.drop_path = 0.1f;
  c.max_steps = 1;
  EXPECT_EQ(error_of(c), "");  // drop_path is the run's

  // Fine-tuning into the source directory would overwrite the model it starts from.
  EXPECT_EQ(error_of(fine_tune(a, a)), "train config: out_dir " + a +
                                           " is the init_from directory; a fine-tuning run writes into a new "
                                           "directory (its source stays as it is)");

  // Not a model directory, no weights, a missing key: each names the file (and the key).
  EXPECT_NE(error_of(fine_tune(d + "/nowhere", d + "/out1")).find(d + "/nowhere/config.json"), std::string::npos);
  fs::create_directories(d + "/noweights");
  for (const char* f : {"config.json", "src_vocab.txt", "tgt_vocab.txt"}) fs::copy_file(a + "/" + f, d + "/noweights/" + f);
  const std::string e1 = error_of(fine_tune(d + "/noweights", d + "/out2"));
  EXPECT_NE(e1.find(d + "/noweights/model.safetensors"), std::string::npos) << e1;
  EXPECT_FALSE(fs::exists(d + "/out2")) << "a failed start wrote its output directory";
  io::SafeTensorsFile w = io::load_safetensors(a + "/model.safetensors");
  const std::string dropped = w.tensors.names().back();
  w.tensors.erase(dropped);
  io::save_safetensors(d + "/noweights/model.safetensors", w.tensors);
  const std::string e2 = error_of(fine_tune(d + "/noweights", d + "/out3"));
  EXPECT_NE(e2.find(d + "/noweights/model.safetensors"), std::string::npos) << e2;
  EXPECT_EQ(e2.rfind(d + "/noweights/model.safetensors: missing key '" + dropped + "'", 0), 0u) << e2;
  // Vocabulary files that do not fit the model's config.json.
  fs::create_directories(d + "/badvocab");
  for (const char* f : {"config.json", "model.safetensors", "tgt_vocab.txt"}) fs::copy_file(a + "/" + f, d + "/badvocab/" + f);
  { std::ofstream(d + "/badvocab/src_vocab.txt") << file(a, "src_vocab.txt") << "extra\n"; }
  const std::string e3 = error_of(fine_tune(d + "/badvocab", d + "/out5"));
  EXPECT_EQ(e3.rfind(d + "/badvocab/src_vocab.txt and " + d + "/badvocab/tgt_vocab.txt: ", 0), 0u) << e3;
  EXPECT_NE(e3.find("entries, but the model's config.json says"), std::string::npos) << e3;

  // Data is encoded with the directory's vocabulary, which here has no <unk>: an unknown token is a
  // one-line error naming the file, line and token.
  { std::ofstream(d + "/t.tsv") << "1 2 3\t3 2 1\n4 5 99\t99 5 4\n"; }
  c = fine_tune(a, d + "/out4");
  c.task.reset();
  c.train_path = c.valid_path = d + "/t.tsv";
  EXPECT_EQ(error_of(c), d + "/t.tsv:2: source token '99' is not in the vocabulary (which has no <unk>)");
  // A sequence longer than the model's position table (max_len 512 here) is refused before training.
  {
    std::ofstream f(d + "/long.tsv");
    for (int i = 0; i < 600; ++i) f << (i ? " " : "") << 1 + i % 9;
    f << "\t";
    for (int i = 0; i < 600; ++i) f << (i ? " " : "") << 1 + (599 - i) % 9;
    f << "\n";
  }
  c.train_path = c.valid_path = d + "/long.tsv";
  c.max_tokens = 1000;
  EXPECT_EQ(error_of(c), d + "/long.tsv / " + d + "/long.tsv: a sequence needs 600 positions, but the model of " + a +
                             " has max_len 512 (a lower --max-tokens skips longer lines)");
  // A task needs the tasks' vocabulary: a model trained on TSV tokens cannot be fine-tuned on one.
  TrainConfig tsv = tiny(d + "/tsvrun");
  tsv.task.reset();
  tsv.train_path = tsv.valid_path = d + "/t.tsv";
  tsv.max_tokens = 256;
  tsv.max_steps = 1;
  run_training(tsv);
  EXPECT_EQ(error_of(fine_tune(d + "/tsvrun", d + "/out6")),
            d + "/tsvrun/src_vocab.txt and " + d +
                "/tsvrun/tgt_vocab.txt: not the built-in tasks' vocabulary, so the task reverse cannot be encoded with them");
  fs::remove_all(a);
  fs::remove_all(d);
}

// ---- language models on text ---------------------------------------------------------------------

// The architecture of the language-model runs below.
constexpr Arch kLmArch = Arch::DECODER;

// ---- the budget schedule (TrainConfig::time_budget) and the weights' average (TrainConfig::ema) ------

// The tiny run on a budget of 12.5 s, its clock ticking 0.125 s per optimizer step (TrainHooks::clock)
// so that the fitted count is known: the window opens at step max(warmup 5, 0 + 10) = 10 and closes 50
// steps later at 60, 0.125 s a step, evaluations free on this clock; 12.5 − 60·0.125 = 5 s left fit 40
// more steps: the count is 100.
TrainConfig budgeted(const std::string& out) {
  TrainConfig c = tiny(out);
  c.max_steps = 0;
  c.time_budget = 12.5;
  c.min_lr = 1e-4f;
  return c;
}

TrainHooks ticking() {
  TrainHooks h;
  h.clock = [](int64_t steps) { return 0.125 * static_cast<double>(steps); };
  return h;
}

nlohmann::json state_json(const std::string& dir) {
  const io::SafeTensorsFile f = io::load_safetensors(dir + "/trainer_state.safetensors");
  return nlohmann::json::parse(f.metadata.at("tfm_trainer_state"));
}

TEST(TrainerBudget, FixesTheStepCountSavesItAndDecaysToMinLrThere) {
  const std::string a = testing::temp_dir("budget_fix");
  TrainHooks h = ticking();
  std::map<int64_t, int64_t> total_at_eval;  // step → the total the progress reported
  std::string fitted;
  h.progress = [&](const ProgressEvent& e) {
    if (e.kind == ProgressEvent::Kind::EVAL) total_at_eval[e.step] = e.total_steps;
    if (e.kind == ProgressEvent::Kind::NOTE && e.message.rfind("time budget:", 0) == 0) fitted = e.message;
  };
  const TrainResult r = run_training(budgeted(a), h);
  EXPECT_EQ(r.steps, 100);
  EXPECT_EQ(r.budget_steps, 100);
  EXPECT_EQ(r.stop_reason, StopReason::TIME_BUDGET);
  EXPECT_EQ(r.train_seconds, 12.5);  // on the test clock: exactly the budget
  EXPECT_EQ(r.time_budget, 12.5);
  EXPECT_NE(fitted.find("100 steps"), std::string::npos) << fitted;
  const nlohmann::json st = state_json(a);
  EXPECT_EQ(st.at("budget_steps"), 100);
  EXPECT_EQ(st.at("decay_start"), 60);
  EXPECT_EQ(st.at("budget_seconds"), 12.5);
  // The count is unknown before the fix and shown after it.
  EXPECT_EQ(total_at_eval.at(10), 0);
  EXPECT_EQ(total_at_eval.at(70), 100);
  // The learning rate: the peak after the warmup and while measuring, decaying after step 60, min_lr
  // at step 100.
  std::map<int64_t, double> lr;
  for (const EvalRow& row : r.history) lr[row.step] = row.lr;
  EXPECT_EQ(lr.at(10), 3e-3f);
  EXPECT_EQ(lr.at(60), 3e-3f);
  EXPECT_LT(lr.at(90), 3e-3f);
  EXPECT_GT(lr.at(90), 1e-4f);
  EXPECT_EQ(lr.at(100), 1e-4f);
  EXPECT_EQ(lr.at(90), budget_lr(3e-3f, 90, 5, 60, 100, 1e-4f));
}

TEST(TrainerBudget, ResumedAfterTheFixEqualsUninterruptedWithEma) {
  const std::string a = testing::temp_dir("budget_a"), b = testing::temp_dir("budget_b");
  TrainConfig ca = budgeted(a);
  ca.ema = 0.99f;
  const TrainResult ra = run_training(ca, ticking());
  EXPECT_EQ(ra.steps, 100);
  TrainHooks stop = ticking();
  stop.should_stop = [](int64_t step) { return step == 75; };  // after the fix, between evaluations
  TrainConfig cb = budgeted(b);
  cb.ema = 0.99f;
  EXPECT_TRUE(run_training(cb, stop).interrupted);
  EXPECT_EQ(state_json(b).at("budget_steps"), 100);
  // The resumed session's clock is another one (a real one would be): the saved count decides.
  TrainHooks later;
  later.clock = [](int64_t steps) { return 1000.0 + 3.0 * static_cast<double>(steps); };
  const TrainResult rb = run_training(load_train_config(b), later, /*resume=*/true);
  EXPECT_EQ(rb.steps, 100);
  EXPECT_EQ(rb.stop_reason, StopReason::TIME_BUDGET);
  EXPECT_TRUE(file(a, "model.safetensors") == file(b, "model.safetensors")) << "weights differ after resume";
  EXPECT_TRUE(file(a, "trainer_state.safetensors") == file(b, "trainer_state.safetensors")) << "state differs";
  ASSERT_EQ(ra.history.size(), rb.history.size());
  for (size_t i = 0; i < ra.history.size(); ++i) EXPECT_EQ(ra.history[i].valid_loss, rb.history[i].valid_loss) << i;
}

TEST(TrainerBudget, OnResumeTimeBudgetIsRefusedAndMaxStepsReplacesTheCount) {
  const std::string a = testing::temp_dir("budget_resume");
  TrainHooks stop = ticking();
  stop.should_stop = [](int64_t step) { return step == 70; };
  EXPECT_TRUE(run_training(budgeted(a), stop).interrupted);
  const std::string config = file(a, "config.json");

  TrainConfig more = load_train_config(a);
  more.time_budget = 20;
  try {
    run_training(more, ticking(), /*resume=*/true);
    FAIL() << "a new time budget was accepted after the count was fixed";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--time-budget"), std::string::npos) << m;
    EXPECT_NE(m.find("100 steps"), std::string::npos) << m;
    EXPECT_NE(m.find("--max-steps"), std::string::npos) << m;
  }
  // The same on the command line's path: --resume with --time-budget.
  EXPECT_THROW(run_training(resolve_train_options({{"resume", a}, {"time-budget", "30"}}).config, ticking(), true),
               std::invalid_argument);
  EXPECT_EQ(file(a, "config.json"), config) << "a refused length was saved with the run";

  // --max-steps replaces the count: the decay still starts at step 60 and now ends at step 80.
  const TrainSetup s = resolve_train_options({{"resume", a}, {"max-steps", "80"}});
  EXPECT_EQ(s.config.time_budget, 0);
  const TrainResult r = run_training(s.config, ticking(), /*resume=*/true);
  EXPECT_EQ(r.steps, 80);
  EXPECT_EQ(r.stop_reason, StopReason::MAX_STEPS);
  EXPECT_EQ(r.history.back().step, 80);
  EXPECT_EQ(r.history.back().lr, 1e-4f);
  EXPECT_EQ(state_json(a).at("budget_steps"), 80);
  EXPECT_EQ(state_json(a).at("decay_start"), 60);
}

// A checkpoint without the budget's keys — written before the count was fixed, as every budget run's
// checkpoint was before the budget schedule existed — resumes and measures in its new session: the
// window opens 10 steps into it (at 40), closes at 90; 12.5 − 90·0.125 = 1.25 s left fit 10 steps.
TEST(TrainerBudget, CheckpointWithoutACountMeasuresAgainAfterResume) {
  const std::string a = testing::temp_dir("budget_old");
  TrainHooks stop = ticking();
  stop.should_stop = [](int64_t step) { return step == 30; };
  EXPECT_TRUE(run_training(budgeted(a), stop).interrupted);
  const nlohmann::json st = state_json(a);
  EXPECT_FALSE(st.contains("budget_steps"));
  EXPECT_FALSE(st.contains("ema_updates"));
  const TrainResult r = run_training(load_train_config(a), ticking(), /*resume=*/true);
  EXPECT_EQ(r.budget_steps, 100);
  EXPECT_EQ(r.steps, 100);
  EXPECT_EQ(state_json(a).at("decay_start"), 90);
}

// The final decoding is part of the budget. Set aside: the clock jumps 0.5 s inside the one batch the run decodes
// when its window opens at step 10 (its first should_stop poll at step 10 comes just before that batch), so the
// final decoding of the 3 batches of 600 validation sequences is estimated at 1.5 s; the window measures 0.125 s a
// step, and 12.5 − (60·0.125 + 0.5) − 1.5 = 3 s left fit 24 steps: the count is 84 (96 with nothing set aside for
// the decoding). Bounded: on the plain test clock the run ends exactly at the budget, so the decoding stops after
// its first batch (256 sequences).
TrainHooks plain_ticking_with(std::function<void(const ProgressEvent&)> progress) {
  TrainHooks h = ticking();
  h.progress = std::move(progress);
  return h;
}

TEST(TrainerBudget, FinalDecodingIsPartOfTheBudget) {
  const std::string a = testing::temp_dir("budget_decode_a"), b = testing::temp_dir("budget_decode_b");
  TrainConfig c = budgeted(a);
  c.task_valid_size = 600;
  double jump = 0;
  int64_t polls_at_10 = 0;
  TrainHooks h;
  h.clock = [&](int64_t steps) { return 0.125 * static_cast<double>(steps) + jump; };
  h.should_stop = [&](int64_t step) {
    if (step == 10 && ++polls_at_10 == 1) jump += 0.5;
    return false;
  };
  std::string fitted;
  std::vector<std::string> notes;
  h.progress = [&](const ProgressEvent& e) {
    if (e.kind != ProgressEvent::Kind::NOTE) return;
    if (e.message.rfind("time budget: ", 0) == 0 && e.message.find("steps fit") != std::string::npos)
      fitted = e.message;
    else
      notes.push_back(e.message);
  };
  const TrainResult r = run_training(c, h);
  EXPECT_EQ(r.budget_steps, 84) << fitted;
  EXPECT_EQ(r.steps, 84);
  EXPECT_NE(fitted.find("1.5 s the final decoding"), std::string::npos) << fitted;
  EXPECT_EQ(r.final_metrics.examples, 600);  // the whole set, within the budget
  EXPECT_EQ(r.train_seconds, 0.125 * 84 + 0.5);
  EXPECT_TRUE(notes.empty()) << notes[0];
  // Resumed to a --max-steps (its budget then none, its count fitted before): no budget ends the decoding.
  TrainConfig more = load_train_config(a);
  more.time_budget = 0;
  more.max_steps = 90;
  const TrainResult rm = run_training(more, plain_ticking_with(h.progress), /*resume=*/true);
  EXPECT_EQ(rm.steps, 90);
  EXPECT_EQ(rm.final_metrics.examples, 600);
  for (const std::string& n : notes) EXPECT_EQ(n.rfind("time budget: spent", 0), std::string::npos) << n;
  notes.clear();

  c.out_dir = b;
  notes.clear();
  TrainHooks plain = ticking();
  plain.progress = h.progress;
  const TrainResult rb = run_training(c, plain);
  EXPECT_EQ(rb.steps, 100);
  EXPECT_EQ(rb.final_metrics.examples, 256);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "time budget: spent after the final decoding of 256 of the 600 validation sources (the shortest; "
            "they are decoded in order of length): the final figures are theirs (tfm eval decodes a whole set)");
  EXPECT_EQ(rb.train_seconds, 12.5);

  // A run stopped on the clock (no decaying schedule: nothing was set aside) decodes the whole set past it.
  c.out_dir = testing::temp_dir("budget_decode_c");
  c.schedule = Schedule::CONSTANT;
  notes.clear();
  const TrainResult rc = run_training(c, plain);
  EXPECT_EQ(rc.budget_steps, 0);
  EXPECT_EQ(rc.final_metrics.examples, 600);
  EXPECT_TRUE(notes.empty()) << notes[0];
}

// A budget too short for the warmup and the 50 measuring steps ends the run on the clock with its learning rate not
// decayed, and a note says so. On the test clock (0.125 s a step) a 5 s budget ends at step 41: inside a warmup of
// 100 steps (rising), or after a warmup of 5 inside the window 11-60 (peak); 17.5 s with a warmup of 100 ends at
// step 141, inside the window 101-150, where a warmup of 14 would have let it decay.
TEST(TrainerBudget, BudgetTooShortToDecaySaysSo) {
  const std::string d = testing::temp_dir("budget_short");
  std::vector<std::string> notes;
  TrainHooks h = ticking();
  h.progress = [&](const ProgressEvent& e) {
    if (e.kind == ProgressEvent::Kind::NOTE && e.message.find("ran out") != std::string::npos)
      notes.push_back(e.message);
  };
  TrainConfig c = budgeted(d + "/rising");
  c.time_budget = 5;
  c.warmup = 100;
  TrainResult r = run_training(c, h);
  EXPECT_EQ(r.steps, 41);
  EXPECT_EQ(r.budget_steps, 0);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            "time budget: the 5 s ran out at step 41, before the run could fit its step count to it (it "
            "measures its step rate over steps 101-150, after the 100 warmup steps), so the learning rate "
            "never decayed to --min-lr 0.0001: it ended still rising, at 0.00123 (--lr 0.003). A longer "
            "--time-budget lets it decay (the window alone takes 50 steps)");
  c = budgeted(d + "/peak");
  c.time_budget = 5;
  notes.clear();
  run_training(c, h);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("steps 11-60, after the 5 warmup steps"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("it ended at its peak, 0.003 (--lr 0.003)"), std::string::npos) << notes[0];
  c = budgeted(d + "/window");
  c.time_budget = 17.5;
  c.warmup = 100;
  notes.clear();
  r = run_training(c, h);
  EXPECT_EQ(r.steps, 141);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("A shorter --warmup (e.g. 14) or a longer --time-budget lets it decay"), std::string::npos)
      << notes[0];
  // A budget that fits the schedule says nothing of the kind.
  notes.clear();
  run_training(budgeted(d + "/fits"), h);
  EXPECT_TRUE(notes.empty()) << notes[0];
}

// A --time-budget given on --resume that the run's clock has passed already (here 5 s spent on 40 steps, 2 s given)
// trains nothing, as the same budget given again does; the run's files, config.json included, stay as they were.
TEST(TrainerBudget, NewBudgetSpentAlreadyOnResumeTrainsNothing) {
  const std::string d = testing::temp_dir("budget_spent_new");
  run_training(tiny(d), ticking());
  const std::vector<const char*> files = {"model.safetensors", "trainer_state.safetensors", "metrics.csv",
                                          "config.json"};
  std::map<std::string, std::string> before;
  for (const char* f : files) before[f] = file(d, f);
  std::vector<std::string> notes;
  TrainHooks h = ticking();
  h.progress = [&](const ProgressEvent& e) {
    if (e.kind == ProgressEvent::Kind::NOTE) notes.push_back(e.message);
  };
  for (const Schedule schedule : {Schedule::AUTO, Schedule::CONSTANT}) {
    TrainConfig c = load_train_config(d);
    c.max_steps = 0;
    c.time_budget = 2;
    c.schedule = schedule;
    notes.clear();
    const TrainResult r = run_training(c, h, /*resume=*/true);
    EXPECT_EQ(r.steps, 40);
    EXPECT_EQ(r.stop_reason, StopReason::TIME_BUDGET);
    EXPECT_NE(
        std::find(notes.begin(), notes.end(), "the run spent its --time-budget already (5 of 2 s): nothing to train"),
        notes.end());
    for (const char* f : files) EXPECT_EQ(file(d, f), before[f]) << f << " changed";
  }
}

// A stop asked for during the final decoding (after the last checkpoint) ends the run as one during an evaluation
// does: interrupted, no figures, the checkpoint the uninterrupted run's. Asked before the decoding starts (the
// second poll at step 40: the first comes after the step) or between its batches (600 validation sequences decode
// in 3). The decoding goes by batch, and its figures are those of the whole set decoded at once.
TEST(Trainer, StopDuringTheFinalDecodingEndsTheRunInterrupted) {
  const std::string a = testing::temp_dir("final_stop_a"), b = testing::temp_dir("final_stop_b");
  TrainConfig c = tiny(a);
  c.model.arch = Arch::SEQ2SEQ;
  c.task_valid_size = 600;
  const TrainResult whole = run_training(c);
  EXPECT_FALSE(whole.interrupted);
  {
    const TrainedModel m = load_model_dir(a);
    const Metrics once =
        evaluate(m, task_eval_set(data::Task::REVERSE, c.seed, data::Split::VALID, 600), DecodeOptions{}, 256,
                 [&](const data::Tokens& t) { return data::detokenize(t, m.tgt_tokenizer); });
    const Metrics& f = whole.final_metrics;
    EXPECT_EQ(f.examples, 600);
    EXPECT_EQ(f.examples, once.examples);
    EXPECT_EQ(f.exact, once.exact);
    EXPECT_EQ(f.correct_tokens, once.correct_tokens);
    EXPECT_EQ(f.reference_tokens, once.reference_tokens);
    EXPECT_EQ(f.edits, once.edits);
    EXPECT_EQ(f.truncated, once.truncated);
    EXPECT_EQ(f.bleu(), once.bleu());
    EXPECT_EQ(f.chrf(), once.chrf());
  }
  for (const int at_poll : {2, 3}) {
    c.out_dir = b + "/" + std::to_string(at_poll);
    int polls_at_40 = 0;
    TrainHooks stop;
    stop.should_stop = [&](int64_t step) { return step == 40 && ++polls_at_40 == at_poll; };
    const TrainResult r = run_training(c, stop);
    EXPECT_EQ(polls_at_40, at_poll);
    EXPECT_TRUE(r.interrupted) << "poll " << at_poll;
    EXPECT_EQ(r.stop_reason, StopReason::INTERRUPTED);
    EXPECT_EQ(r.steps, 40);
    EXPECT_EQ(r.final_metrics.examples, 0);
    EXPECT_EQ(state_json(c.out_dir).at("step"), 40);
    EXPECT_TRUE(file(a, "model.safetensors") == file(c.out_dir, "model.safetensors")) << "poll " << at_poll;
    EXPECT_TRUE(file(a, "trainer_state.safetensors") == file(c.out_dir, "trainer_state.safetensors"));
    // Resumed, it trains nothing and decodes.
    const TrainResult again = run_training(load_train_config(c.out_dir), {}, /*resume=*/true);
    EXPECT_FALSE(again.interrupted);
    EXPECT_EQ(again.final_metrics.exact, whole.final_metrics.exact);
    EXPECT_EQ(again.final_metrics.edits, whole.final_metrics.edits);
  }
}

TEST(TrainerEma, EvaluatesAndSavesTheAverageAndInitFromStartsFromIt) {
  const std::string a = testing::temp_dir("ema_a"), b = testing::temp_dir("ema_b");
  TrainConfig c = tiny(a);
  c.ema = 0.9f;
  c.max_steps = 20;
  const TrainResult r = run_training(c);
  // model.safetensors holds the average; the state holds the raw weights and the average.
  const io::SafeTensorsFile model = io::load_safetensors(a + "/model.safetensors");
  const io::SafeTensorsFile state = io::load_safetensors(a + "/trainer_state.safetensors");
  EXPECT_EQ(state_json(a).at("ema_updates"), 20);
  bool differs = false;
  for (const auto& [k, t] : model.tensors) {
    const Tensor& avg = state.tensors.at("ema." + k);
    const Tensor& raw = state.tensors.at("model." + k);
    ASSERT_EQ(avg.numel(), t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) {
      ASSERT_EQ(t.data()[i], avg.data()[i]) << k << "[" << i << "]";
      differs |= t.data()[i] != raw.data()[i];
    }
  }
  EXPECT_TRUE(differs) << "the average equals the raw weights";
  // The last evaluation scored the average: the saved model's teacher-forced figures.
  const TrainedModel m = load_model_dir(a);
  std::vector<data::Example> valid;
  for (auto& e : data::make_task_set(data::Task::REVERSE, 11, data::Split::VALID, 50))
    valid.push_back({std::move(e.src), std::move(e.tgt)});
  EXPECT_EQ(r.history.back().valid_loss, evaluate_teacher_forced(*m.model, valid, 256).loss);
  // --init-from starts from the average (its step-0 row scores it), with an average of its own.
  TrainConfig f = fine_tune(a, b);
  f.ema = 0.9f;
  const TrainResult rb = run_training(f);
  EXPECT_EQ(rb.history.front().step, 0);
  EXPECT_EQ(rb.history.front().valid_loss, r.history.back().valid_loss);
  EXPECT_EQ(state_json(b).at("ema_updates"), 6);
}

// --keep-best: after each evaluation that lowers the best validation loss, OUT/best holds that model, a model
// directory of its own whose teacher-forced loss is that row's; an interrupted and resumed run writes the same
// best model byte for byte. best_row takes the first of equal losses and never a NaN.
TEST(TrainerBest, KeepBestHoldsTheModelOfTheLowestValidationLoss) {
  const std::string a = testing::temp_dir("best_a"), b = testing::temp_dir("best_b");
  TrainConfig c = tiny(a);
  c.keep_best = true;
  c.lr = 3e-2f;  // high enough that the validation loss does not fall at every evaluation
  c.eval_every = 5;
  const TrainResult r = run_training(c);
  const int64_t best = best_row(r.history);
  ASSERT_GE(best, 0);
  for (const EvalRow& row : r.history) EXPECT_GE(row.valid_loss, r.history[static_cast<size_t>(best)].valid_loss);
  const TrainedModel m = load_model_dir(a + "/best");
  std::vector<data::Example> valid;
  for (auto& e : data::make_task_set(data::Task::REVERSE, 11, data::Split::VALID, 50))
    valid.push_back({std::move(e.src), std::move(e.tgt)});
  EXPECT_EQ(evaluate_teacher_forced(*m.model, valid, 256).loss, r.history[static_cast<size_t>(best)].valid_loss);
  EXPECT_EQ(file(a, "config.json"), io::read_file(a + "/best/config.json"));
  if (static_cast<size_t>(best) + 1 == r.history.size()) {
    EXPECT_EQ(file(a, "model.safetensors"), io::read_file(a + "/best/model.safetensors"));
  } else {
    EXPECT_NE(file(a, "model.safetensors"), io::read_file(a + "/best/model.safetensors"));
  }
  TrainConfig cb = c;
  cb.out_dir = b;
  TrainHooks stop;
  stop.should_stop = [](int64_t step) { return step == 17; };
  run_training(cb, stop);
  run_training(load_train_config(b), {}, /*resume=*/true);
  EXPECT_EQ(io::read_file(a + "/best/model.safetensors"), io::read_file(b + "/best/model.safetensors"));

  // A kill while best/ was written leaves it stale or missing: when the checkpoint's evaluation is the best, a
  // resumed run (here one with nothing left to train) writes it again from the checkpoint's weights.
  TrainConfig cc = c;
  cc.out_dir = testing::temp_dir("best_c");
  cc.lr = 3e-3f;  // the loss falls at every evaluation: the last one is the best
  cc.eval_every = 10;
  const TrainResult rc = run_training(cc);
  ASSERT_EQ(best_row(rc.history) + 1, static_cast<int64_t>(rc.history.size())) << "premise: the last row is the best";
  const std::string best_model = io::read_file(cc.out_dir + "/best/model.safetensors");
  std::filesystem::remove_all(cc.out_dir + "/best");
  run_training(load_train_config(cc.out_dir), {}, /*resume=*/true);
  EXPECT_EQ(io::read_file(cc.out_dir + "/best/model.safetensors"), best_model);
  EXPECT_EQ(io::read_file(cc.out_dir + "/best/config.json"), file(cc.out_dir, "config.json"));

  std::vector<EvalRow> rows(4);
  rows[0].valid_loss = 2.0;
  rows[1].valid_loss = std::nan("");
  rows[2].valid_loss = 1.5;
  rows[3].valid_loss = 1.5;
  EXPECT_EQ(best_row(rows), 2);
  EXPECT_EQ(best_row({}), -1);
}

// --patience N: the run ends once N evaluations in a row have not lowered the best validation loss. A learning
// rate too small to move a float32 weight keeps the loss exactly where it was.
TEST(TrainerBest, PatienceEndsARunWhoseValidationLossStopsFalling) {
  const std::string a = testing::temp_dir("patience");
  TrainConfig c = tiny(a);
  c.lr = 1e-30f;
  c.max_steps = 100;
  c.patience = 2;
  const TrainResult r = run_training(c);
  EXPECT_EQ(r.stop_reason, StopReason::EARLY_STOPPING);
  EXPECT_EQ(r.steps, 30);  // evaluations at 10 (the best), 20 and 30
  ASSERT_EQ(r.history.size(), 3u);
  EXPECT_EQ(r.history[1].valid_loss, r.history[0].valid_loss);
  // Resumed, it is still out of patience: it stops where it was, without another step.
  const TrainResult again = run_training(load_train_config(a), {}, /*resume=*/true);
  EXPECT_EQ(again.stop_reason, StopReason::EARLY_STOPPING);
  EXPECT_EQ(again.steps, 30);
  c.patience = -1;
  EXPECT_THROW(c.validate(), std::invalid_argument);
}

// oneDNN 2.6's JIT sgemm keeps rsp in a heap workspace while it runs (src/kernels/signal_stack.h): a signal
// handled meanwhile on a thread without an alternate signal stack wrote its frame there, and a Ctrl-C could
// abort `tfm train` with a corrupted heap. A stream of signals at every computing thread, handled with
// SA_ONSTACK as tfm train's and CPython's handlers are, now leaves training as it was: the weights of a run
// without signals, byte for byte.
TEST(TrainerSignals, SignalsDuringTrainingChangeNothing) {
  const std::string a = testing::temp_dir("signals_a"), b = testing::temp_dir("signals_b");
  TrainConfig c = tiny(a);
  c.model.d_model = 64;  // Linear products large enough for oneDNN's JIT kernels
  c.model.nhead = 4;
  c.model.dim_feedforward = 128;
  c.batch.batch_size = 64;
  c.task_train_size = 2000;
  c.max_steps = 120;
  c.eval_every = 60;
  run_training(c);

  struct sigaction quiet {}, old {};
  quiet.sa_handler = [](int) {};
  sigemptyset(&quiet.sa_mask);
  quiet.sa_flags = SA_RESTART | SA_ONSTACK;
  ASSERT_EQ(sigaction(SIGUSR2, &quiet, &old), 0);
  std::vector<long> tids;  // the main thread and its OpenMP team, which run the steps
#pragma omp parallel
  {
    const long tid = syscall(SYS_gettid);
#pragma omp critical
    tids.push_back(tid);
  }
  std::atomic<bool> done{false};
  std::atomic<int64_t> sent{0};
  std::thread storm([&] {
    sigset_t mine;
    sigemptyset(&mine);
    sigaddset(&mine, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &mine, nullptr);
    while (!done.load()) {
      for (const long tid : tids)
        if (syscall(SYS_tgkill, getpid(), tid, SIGUSR2) == 0) sent.fetch_add(1);
      usleep(200);
    }
  });
  c.out_dir = b;
  run_training(c);
  done.store(true);
  storm.join();
  // A signal sent to a team thread that has not run since is still pending: restored to the default action,
  // it would end the process. Every thread of the team runs once more (taking what is pending in the quiet
  // handler) before the old action comes back.
  for (int round = 0; round < 2; ++round) {
#pragma omp parallel
    usleep(1000);
  }
  sigaction(SIGUSR2, &old, nullptr);
  EXPECT_GT(sent.load(), 100);
  EXPECT_TRUE(file(a, "model.safetensors") == file(b, "model.safetensors")) << "signals changed the weights";
}

TEST(TrainerEma, DecayOutsideZeroOneIsAnErrorNamingTheOption) {
  const std::string a = testing::temp_dir("ema_bad");
  for (const float bad : {0.0f, 1.0f, 1.5f, -0.5f}) {
    TrainConfig c = tiny(a);
    c.ema = bad;
    const std::string m = error_of(c);
    EXPECT_NE(m.find("--ema"), std::string::npos) << bad << ": " << m;
  }
}


// A small text with structure to learn: sentences of words from a short list, newlines between.
std::string lm_text(int sentences, unsigned seed) {
  static const char* words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "it"};
  testing::Rng g(seed);
  std::string t;
  for (int i = 0; i < sentences; ++i) {
    const int n = g.uniform_int(3, 7);
    for (int k = 0; k < n; ++k) t += std::string(k ? " " : "") + words[g.uniform_int(0, 10)];
    t += ".\n";
  }
  return t;
}

// 2 KB of text in windows of 16, batches of 8 (15 batches an epoch), dropout on so that the generator
// stream (window positions and dropout) matters.
TrainConfig tiny_lm(const std::string& out, const std::string& text_path) {
  TrainConfig c;
  c.text_path = text_path;
  c.valid_fraction = 0.2;
  c.block_size = 16;
  c.model.arch = kLmArch;
  c.model.d_model = 16;
  c.model.nhead = 2;
  c.model.num_decoder_layers = 1;
  c.model.dim_feedforward = 32;
  c.model.dropout = 0.1f;
  c.max_steps = 30;
  c.eval_every = 10;
  c.lr = 1e-2f;
  c.warmup = 5;
  c.batch.batch_size = 8;
  c.seed = 5;
  c.out_dir = out;
  return c;
}

TEST(TrainerLm, TrainsOnTextAndWritesAModelDirectory) {
  const std::string d = testing::temp_dir("lm");
  testing::spit(d + "/t.txt", lm_text(100, 1));
  TrainConfig c = tiny_lm(d + "/run", d + "/t.txt");
  c.max_steps = 60;
  c.lr = 3e-2f;
  const TrainResult r = run_training(c);
  EXPECT_EQ(r.steps, 60);
  ASSERT_EQ(r.history.size(), 6u);
  // Below the character-unigram entropy of the text (≈ 2.4 nats, what a model without context reaches)
  // by a clear margin: the model uses its context.
  const std::string text = lm_text(100, 1);
  std::map<char, double> counts;
  for (char ch : text) counts[ch] += 1;
  double unigram = 0;
  for (const auto& [ch, n] : counts) unigram -= n / static_cast<double>(text.size()) * std::log(n / static_cast<double>(text.size()));
  EXPECT_LT(r.history.back().valid_loss, unigram - 0.5) << "unigram entropy " << unigram;
  EXPECT_LT(r.history.back().valid_loss, r.history.front().valid_loss);
  EXPECT_LT(r.history.back().train_loss, r.history.front().train_loss);
  for (const char* f : {"config.json", "src_vocab.json", "tgt_vocab.json", "metrics.csv", "curves.svg", "trainer_state.safetensors"})
    EXPECT_TRUE(std::filesystem::exists(d + "/run/" + f)) << f;
  EXPECT_FALSE(std::filesystem::exists(d + "/run/tgt_vocab.txt"));
  const TrainedModel m = load_model_dir(d + "/run");
  EXPECT_EQ(m.model->config().max_len, 16);
  EXPECT_EQ(m.tgt_tokenizer, data::Tokenization::CHAR);
  EXPECT_EQ(data::decode_text(m.tgt_vocab, m.tgt_tokenizer, data::encode_text(m.tgt_vocab, m.tgt_tokenizer, "the cat.\n")), "the cat.\n");
  // The validation loss is the windows' mean over the held-out 20%: recomputed from the loaded model.
  const data::TextCorpus all = data::TextCorpus::read(d + "/t.txt", m.tgt_vocab, m.tgt_tokenizer);
  const int64_t valid = std::llround(static_cast<double>(all.size()) * 0.2);
  const TeacherForced tf = evaluate_teacher_forced_text(*m.model, all.slice(all.size() - valid, all.size()), 16, 256);
  EXPECT_NEAR(tf.loss, r.history.back().valid_loss, 1e-12);
}

TEST(TrainerLm, InterruptedAndResumedEqualsUninterruptedForRandomAndSequentialWindows) {
  for (const bool sequential : {false, true}) {
    const std::string d = testing::temp_dir(sequential ? "lm_seq" : "lm_rand");
    testing::spit(d + "/t.txt", lm_text(100, 2));
    TrainConfig c = tiny_lm(d + "/a", d + "/t.txt");
    c.sequential = sequential;
    c.max_steps = 25;  // crosses an epoch end (15 batches)
    const TrainResult ra = run_training(c);
    c.out_dir = d + "/b";
    TrainHooks stop;
    stop.should_stop = [](int64_t step) { return step == 13; };
    EXPECT_TRUE(run_training(c, stop).interrupted);
    const TrainResult rb = run_training(load_train_config(d + "/b"), {}, /*resume=*/true);
    EXPECT_EQ(rb.steps, 25);
    EXPECT_TRUE(file(d + "/a", "model.safetensors") == file(d + "/b", "model.safetensors")) << "sequential " << sequential;
    ASSERT_EQ(ra.history.size(), rb.history.size());
    for (size_t i = 0; i < ra.history.size(); ++i) EXPECT_EQ(ra.history[i].valid_loss, rb.history[i].valid_loss) << i;
  }
}

TEST(TrainerLm, SameNumbersForOneAndTwoThreads) {
  const std::string d = testing::temp_dir("lm_thr");
  testing::spit(d + "/t.txt", lm_text(100, 3));
  TrainConfig c = tiny_lm(d + "/a", d + "/t.txt");
  c.max_steps = 10;
  c.tgt_tokens = c.src_tokens = data::Tokenization::BYTE;
  train_with_one_and_two_threads(c, d + "/a", d + "/b");
  EXPECT_TRUE(file(d + "/a", "model.safetensors") == file(d + "/b", "model.safetensors")) << "thread count changed the weights";
  EXPECT_EQ(load_model_dir(d + "/a").tgt_vocab.size(), 259);  // the byte vocabulary
  // Tokens read from a memory-mapped cache (written on the first run, mapped on the second): the same run.
  c.token_cache = d + "/cache";
  for (const char* out : {"/c", "/e"}) {
    c.out_dir = d + out;
    run_training(c);
    EXPECT_TRUE(file(d + "/a", "model.safetensors") == file(d + out, "model.safetensors")) << out;
  }
  EXPECT_EQ(std::filesystem::file_size(d + "/cache/t.txt.tokens"), 64 + 2 * std::filesystem::file_size(d + "/t.txt"));
  // A cache whose body was damaged (its header intact: ids past the vocabulary) is encoded again, not trusted.
  std::string cache = io::read_file(d + "/cache/t.txt.tokens");
  for (size_t i = 64 + 1; i < cache.size(); i += 2) cache[i] = '\xff';
  testing::spit(d + "/cache/t.txt.tokens", cache);
  c.out_dir = d + "/f";
  run_training(c);
  EXPECT_TRUE(file(d + "/a", "model.safetensors") == file(d + "/f", "model.safetensors"));
}

TEST(TrainerLm, ResumeRefusesAnotherTextAndDataErrorsNameTheFile) {
  const std::string d = testing::temp_dir("lm_err");
  testing::spit(d + "/t.txt", lm_text(100, 4));
  TrainConfig c = tiny_lm(d + "/run", d + "/t.txt");
  c.max_steps = 5;
  run_training(c);
  testing::spit(d + "/t.txt", lm_text(100, 5));  // the same file name, another text
  TrainConfig more = load_train_config(d + "/run");
  more.max_steps = 10;
  try {
    run_training(more, {}, true);
    FAIL() << "resumed on another text";
  } catch (const std::invalid_argument& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind(d + "/t.txt: not the training text this run started with (its hash is ", 0), 0u) << m;
    EXPECT_NE(m.find(d + "/run/trainer_state.safetensors says "), std::string::npos) << m;
  }
  const auto error_of = [&](const TrainConfig& cfg) -> std::string {
    try {
      run_training(cfg);
    } catch (const data::DataError& e) {
      return e.what();
    }
    return "(no DataError)";
  };
  testing::spit(d + "/small.txt", "abcdefghij");  // 10 tokens: 8 for training, 2 for validation
  TrainConfig s = tiny_lm(d + "/s", d + "/small.txt");
  EXPECT_EQ(error_of(s), d + "/small.txt (its first 8 tokens, for training): 8 tokens, too few for one window of "
                             "block_size + 1 = 17 tokens (a smaller --block-size, or a longer text)");
  s.block_size = 4;
  s.valid_fraction = 0.05;  // 0.5 tokens, rounded to 1
  EXPECT_EQ(error_of(s), d + "/small.txt (its last 5% for validation): 1 tokens, too few to validate on (at least 2: a "
                             "token and its successor)");
  testing::spit(d + "/empty.txt", "");
  EXPECT_EQ(error_of(tiny_lm(d + "/e", d + "/empty.txt")), d + "/empty.txt: file is empty (expected UTF-8 text)");
  testing::spit(d + "/bad.txt", "abc\xFF");
  EXPECT_EQ(error_of(tiny_lm(d + "/b", d + "/bad.txt")),
            d + "/bad.txt: invalid UTF-8 at byte 3 (--tokens char reads UTF-8 text; --tokens byte reads any bytes)");
  TrainConfig v = tiny_lm(d + "/v", d + "/t.txt");
  v.valid_text_path = d + "/empty.txt";
  EXPECT_EQ(error_of(v), d + "/empty.txt: file is empty (expected UTF-8 text)");
}

TEST(TrainerLm, ByteTokensForTsvPairsAndMismatchesRefused) {
  const std::string d = testing::temp_dir("bytes");
  testing::spit(d + "/p.tsv", "ab\tba\nabc\tcba\n\xC3\xA9x\tx\xC3\xA9\n");  // bytes, é included
  TrainConfig c = tiny(d + "/run");
  c.task.reset();
  c.train_path = c.valid_path = d + "/p.tsv";
  c.model.arch = Arch::SEQ2SEQ;
  c.src_tokens = c.tgt_tokens = data::Tokenization::BYTE;
  c.max_steps = 3;
  run_training(c);
  const TrainedModel m = load_model_dir(d + "/run");
  EXPECT_EQ(m.src_vocab.tokens(), data::byte_vocab().tokens());
  EXPECT_EQ(m.src_tokenizer, data::Tokenization::BYTE);
  EXPECT_EQ(translate_lines(m, {"ab"}, 1, 8).size(), 1u);  // byte tokens in and out
  c.tgt_tokens = data::Tokenization::CHAR;
  try {
    run_training(c);
    FAIL() << "byte on one side accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "train config: src_tokens/tgt_tokens byte on one side needs byte on the other (the two "
                                     "vocabularies share the <pad> id)");
  }
  // A language model's directory cannot start a task run.
  testing::spit(d + "/t.txt", lm_text(30, 1));
  TrainConfig lm = tiny_lm(d + "/lm", d + "/t.txt");
  lm.max_steps = 2;
  run_training(lm);
  TrainConfig f = tiny(d + "/fine");
  f.model = ModelConfig{};
  f.init_from = d + "/lm";
  try {
    run_training(f);
    FAIL() << "a decoder fine-tuned on a task";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "train config: init_from " + d + "/lm holds a model of arch decoder, but arch decoder "
                                     "trains on text data (text_path)");
  }
}

}  // namespace
}  // namespace tfm::train
