// tfm/train/config.h — what a training run is: data, model, length, optimisation. The defaults here
// are `tfm train`'s: the CLI sets only the options it is given, on TrainConfig{} or on a preset.
//
// To add a training option: a member with its default, one line in fields() (its key in the run's
// config.json and hence in JSON reading and writing), its check in validate(), its use in the trainer
// (src/train/), and its row in the option table (src/train/options.cc), from which `tfm train`'s
// parser is built.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tfm/data/batching.h"
#include "tfm/data/tasks.h"
#include "tfm/data/tokenizer.h"
#include "tfm/data/vocab.h"
#include "tfm/inference.h"
#include "tfm/models/config.h"
#include "tfm/train/schedule.h"

namespace tfm::train {

enum class OptimizerKind { ADAM, ADAMW };  // torch.optim.Adam (L2 decay) / AdamW (decoupled decay)

// The parameters weight decay applies to: ALL of them, or MATRICES, those with two or more dimensions
// (weight matrices and embeddings; not biases, norm gains, or 1-dim tables), as nanoGPT's two
// parameter groups.
enum class DecayParams { ALL, MATRICES };

struct TrainConfig {
  // ---- data: a built-in task, or a pair of TSV files ----
  std::optional<data::Task> task;           // unset: TSV files
  std::string train_path, valid_path;       // TSV files when task is unset
  data::Tokenization src_tokens = data::Tokenization::CHAR, tgt_tokens = data::Tokenization::CHAR;
  bool strict = false;                      // a bad TSV line is an error instead of skipped
  int64_t max_tokens = 256;                 // longer TSV lines are over-long
  int64_t task_train_size = 20000;          // task examples per epoch (fresh ones every epoch)
  int64_t task_valid_size = 1000;           // task validation sequences

  // ---- data: a text file for a language model (arch decoder), tfm/data/text.h ----
  // The text is tokenized with tgt_tokens (char, byte, spm or gpt2-bpe; src_tokens is kept equal to it), and its
  // vocabulary (built from text_path, validation part included) is the model's target vocabulary.
  // Validation: valid_text_path, or else the last valid_fraction of text_path's tokens.
  std::string text_path, valid_text_path;   // text_path set: text data (no task, no TSV files)
  double valid_fraction = 0.1;              // in (0, 1); used without valid_text_path
  int64_t block_size = 256;                 // context length: windows of block_size + 1 tokens
  bool sequential = false;                  // consecutive windows in order instead of random ones
  // A directory for the texts' token arrays (<text file name>.tokens, memory-mapped; rewritten when
  // the text or the vocabulary changed): a big text costs page cache instead of memory. "" = none.
  std::string token_cache;

  // ---- subword vocabularies: SentencePiece, for src_tokens / tgt_tokens spm (tfm/data/tokenizer.h) ----
  // An spm side of TSV pairs trains a model of src_vocab_size / tgt_vocab_size pieces on that side of
  // the training file, or uses the model file src_spm_model / tgt_spm_model. A language model (text
  // data) and joint_vocab (one model and vocabulary for both TSV sides) take vocab_size or spm_model
  // instead. joint_vocab with char / space tokens builds one vocabulary from both sides. At most
  // spm_max_lines lines, evenly spaced, train a model. A resumed run, or one started from a model
  // directory, uses that directory's models (never retrained).
  int64_t src_vocab_size = 0, tgt_vocab_size = 0, vocab_size = 0;  // pieces, specials included
  data::SpmType spm_type = data::SpmType::UNIGRAM;
  std::string src_spm_model, tgt_spm_model, spm_model;
  bool joint_vocab = false;
  int64_t spm_max_lines = 2000000;
  // ---- GPT-2's byte-level BPE, for tgt_tokens gpt2-bpe (text data only; tfm/data/bpe.h) ----
  // Its vocabulary (encoder.json / vocab.json) and merges (vocab.bpe / merges.txt) files; a run from a
  // model directory uses the directory's copies.
  std::string bpe_vocab, bpe_merges;

  // ---- model (vocab sizes and special ids are filled in from the data) ----
  ModelConfig model;

  // ---- length of the run: whichever limit is reached first; none set → epochs = 10 ----
  int64_t epochs = 0, max_steps = 0;
  // Seconds of training (evaluation included), 0 = none. With a decaying schedule (cosine, or auto
  // when no other length is given) the run fits its step count to the budget: it measures its step
  // rate after the warmup, fixes the count once (saved in its state) and decays to min_lr at it
  // (src/train/trainer.cc, "The budget schedule"); otherwise the budget stops the run on the clock.
  double time_budget = 0;

  // ---- optimisation ----
  OptimizerKind optimizer = OptimizerKind::ADAM;
  float lr = 1e-3f;
  int64_t warmup = 100;                     // linear warmup steps
  Schedule schedule = Schedule::AUTO;
  float weight_decay = 0.0f, label_smoothing = 0.0f;
  std::optional<DecayParams> decay_params;  // unset: ALL for encoder / seq2seq, MATRICES for decoder
  float beta1 = 0.9f, beta2 = 0.999f;       // Adam / AdamW moment decay rates (torch's defaults)
  float min_lr = 0.0f;                      // the cosine schedule decays from lr to min_lr
  float clip_norm = 1.0f;                   // 0 = no clipping
  data::BatchSettings batch;
  uint64_t seed = 0;
  int64_t eval_every = 0;                   // steps between evaluations; 0 = each epoch (or 10 per run)
  // After each evaluation that lowers the best validation loss so far, write the evaluated model (with ema,
  // the average) to out_dir/best, a model directory of its own (config, vocabularies, tokenizers, weights),
  // written whole and renamed into place.
  bool keep_best = false;
  // Early stopping: end the run once this many evaluations in a row have not lowered the best validation
  // loss (0 = off). Counted from the run's evaluation history, so a resumed run counts on where it stopped.
  int64_t patience = 0;
  bool skip_nonfinite = false;              // skip batches with a non-finite loss or gradient
  // Exponential moving average of the weights, in (0, 1); unset = none. After optimizer step t the
  // average becomes d·avg + (1 − d)·w with d = min(ema, (1 + t)/(10 + t)) (src/train/ema.h); evaluation
  // and model.safetensors use the average, trainer_state.safetensors keeps both.
  std::optional<float> ema;
  // Precision of the Linear layers' matmuls in training: FLOAT32, or BFLOAT16 (bfloat16 operands,
  // float32 sums and master weights; tfm/autocast.h, docs/bf16.md). INT8 is for inference only.
  Precision dtype = Precision::FLOAT32;

  std::string out_dir;

  // ---- fine-tuning: start from a model directory (tfm/models/model_dir.h) instead of fresh weights ----
  // DIR's config.json "model" is the run's model (every field but dropout and drop_path, which are the
  // run's: regularisation is a training choice), DIR/model.safetensors its initial weights (strict
  // load), DIR's vocabularies and tokenizations encode the data (never rebuilt from it). `model` must
  // then keep ModelConfig{}'s values for every other field. The optimizer starts fresh and the first
  // evaluation (step 0) scores DIR's model as loaded. A resumed run takes its weights from its own
  // checkpoint, never from DIR again. "" = fresh weights.
  std::string init_from;

  // ---- data parallelism (tfm/train/comm.h, tfm/train/trainer.h) ----
  // The batch is cut into grad_shards parts by rows whose gradients are added in one fixed order, so
  // the run's numbers are the same in one process and in any number of processes P dividing it.
  // 0 = resolved when the run starts: 1 in one process (one part: the plain step), P under MPI; the run's
  // config.json keeps the resolved value, so a resumed run keeps it.
  int64_t grad_shards = 0;

  // The keys of config.json's "train" object (the model is its own object, "model").
  template <typename Self, typename Visit>
  static void fields(Self& c, Visit&& visit) {
    visit("task", c.task);
    visit("train_path", c.train_path);
    visit("valid_path", c.valid_path);
    visit("src_tokens", c.src_tokens);
    visit("tgt_tokens", c.tgt_tokens);
    visit("strict", c.strict);
    visit("max_tokens", c.max_tokens);
    visit("task_train_size", c.task_train_size);
    visit("task_valid_size", c.task_valid_size);
    visit("text_path", c.text_path);
    visit("valid_text_path", c.valid_text_path);
    visit("valid_fraction", c.valid_fraction);
    visit("block_size", c.block_size);
    visit("sequential", c.sequential);
    visit("token_cache", c.token_cache);
    visit("src_vocab_size", c.src_vocab_size);
    visit("tgt_vocab_size", c.tgt_vocab_size);
    visit("vocab_size", c.vocab_size);
    visit("spm_type", c.spm_type);
    visit("src_spm_model", c.src_spm_model);
    visit("tgt_spm_model", c.tgt_spm_model);
    visit("spm_model", c.spm_model);
    visit("joint_vocab", c.joint_vocab);
    visit("spm_max_lines", c.spm_max_lines);
    visit("bpe_vocab", c.bpe_vocab);
    visit("bpe_merges", c.bpe_merges);
    visit("epochs", c.epochs);
    visit("max_steps", c.max_steps);
    visit("time_budget", c.time_budget);
    visit("optimizer", c.optimizer);
    visit("lr", c.lr);
    visit("warmup", c.warmup);
    visit("schedule", c.schedule);
    visit("weight_decay", c.weight_decay);
    visit("decay_params", c.decay_params);
    visit("beta1", c.beta1);
    visit("beta2", c.beta2);
    visit("min_lr", c.min_lr);
    visit("label_smoothing", c.label_smoothing);
    visit("clip_norm", c.clip_norm);
    visit("batch_size", c.batch.batch_size);
    visit("batch_tokens", c.batch.batch_tokens);
    visit("seed", c.seed);
    visit("eval_every", c.eval_every);
    visit("keep_best", c.keep_best);
    visit("patience", c.patience);
    visit("skip_nonfinite", c.skip_nonfinite);
    visit("ema", c.ema);
    visit("dtype", c.dtype);
    visit("out_dir", c.out_dir);
    visit("init_from", c.init_from);
    visit("grad_shards", c.grad_shards);
  }

  bool text() const { return !text_path.empty(); }  // language-model data

  std::string to_json(bool with_model = true) const;  // pretty JSON: every field (and "model")
  static TrainConfig from_json(const std::string& text);  // missing keys keep their defaults
  void validate() const;                    // throws std::invalid_argument naming the bad field
  // What a run trains: this config with a built-in task's char tokens read as space (its tokens are
  // numbers, space-separated) and, when no length is given, kDefaultEpochs epochs.
  TrainConfig with_run_defaults() const;
  static constexpr int64_t kDefaultEpochs = 10;
  void validate_subwords() const;           // the subword fields' combinations (part of validate)
  DecayParams decay_params_value() const {  // decay_params resolved by the model family's default
    return decay_params.value_or(model.family().defaults.decay_matrices_only ? DecayParams::MATRICES : DecayParams::ALL);
  }
};

// The built-in tasks' preset: TrainConfig{} for `task` and `arch`, with 1600 steps, lr 2e-3, no
// dropout and batches of 256. At the reverse task's size (d_model 64, 2 layers, 4 heads, FFN 256) a step
// costs mostly fixed overhead, so a larger batch learns faster per second; 100 warmup steps and cosine
// decay reach full sequence accuracy well within the 1600 steps (make run prints what it reaches). Dropout only slows
// these noiseless tasks.
TrainConfig task_preset(data::Task task, Arch arch);

// Throws std::invalid_argument when c.out_dir is c.init_from's directory (a fine-tuning run writes into a new one).
void check_out_is_not_init_from(const TrainConfig& c);

// Built-in recipes a run starts from (`tfm train --preset NAME`); options given still apply on top.
//   NANOGPT_BABY  nanoGPT's "baby" Shakespeare character model as its README runs it on a CPU
//                 (config/train_shakespeare_char.py with --block_size=64 --batch_size=12 --n_layer=4
//                 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0):
//                 arch decoder, char tokens, 4 layers, 4 heads, d_model 128, FFN 512, block 64,
//                 batch 12, 2000 steps, warmup 100, AdamW lr 1e-3 with cosine decay to 1e-4 (the
//                 AUTO schedule of a run of known length), β2 0.99, weight decay 0.1 on matrices,
//                 clip 1.0, dropout 0, no biases, evaluation every 250 steps. The data (--text) is
//                 the run's.
enum class Preset { NANOGPT_BABY };
TrainConfig preset_config(Preset preset);

// One field of a TrainConfig or of its ModelConfig by its key ("lr", "d_model", "norm_first",
// "task"), from or to its text on the command line (a key of both, src_vocab_size or tgt_vocab_size,
// is the TrainConfig's: the model's sizes come from the data): numbers in C++ syntax, booleans true / false,
// closed sets by name. set_field throws std::invalid_argument "train config: <key> ..." for an unknown
// key or a value that does not parse or fit; field_text gives "" for an unset optional field.
// `option`: the train option (tfm/train/options.h, "layers") whose value `text` is, named in the errors in
// place of the key it sets, which the user never wrote ("train config: --layers must be an integer, got 'x'",
// not num_encoder_layers; "--tokens: unknown tokenization ...", not src_tokens).
void set_field(TrainConfig& c, const std::string& key, const std::string& text, const std::string& option = "");
std::string field_text(const TrainConfig& c, const std::string& key);

// True for the keys a run with init_from takes from the model directory, so that setting them too is
// refused: every ModelConfig field except dropout and drop_path, src_tokens / tgt_tokens, and the
// subword vocabulary fields (the directory's vocabularies are used).
bool fixed_by_init_from(const std::string& key);

}  // namespace tfm::train

namespace tfm {
template <>
struct EnumNames<train::Preset> {
  static constexpr const char* noun = "preset";
  static constexpr std::array<std::pair<train::Preset, std::string_view>, 1> names{
      {{train::Preset::NANOGPT_BABY, "nanogpt-baby"}}};
};
template <>
struct EnumNames<train::DecayParams> {
  static constexpr const char* noun = "decay_params";
  static constexpr std::array<std::pair<train::DecayParams, std::string_view>, 2> names{
      {{train::DecayParams::ALL, "all"}, {train::DecayParams::MATRICES, "matrices"}}};
};
template <>
struct EnumNames<train::OptimizerKind> {
  static constexpr const char* noun = "optimizer";
  static constexpr std::array<std::pair<train::OptimizerKind, std::string_view>, 2> names{
      {{train::OptimizerKind::ADAM, "adam"}, {train::OptimizerKind::ADAMW, "adamw"}}};
};
}  // namespace tfm
