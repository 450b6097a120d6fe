// tfm/models/model_dir.h — a trained model directory: its files, loading it, and decoding with it.
//
// Directory (written by tfm::train, every file atomically: temporary file + rename):
//   config.json               {"format": "tfm-train", "version": 1, "model": ModelConfig,
//                              "train": TrainConfig, "vocab": {"src", "tgt", "src_size", "tgt_size",
//                              "src_tokens", "tgt_tokens"}}
//   src_vocab.json, tgt_vocab.json  the vocabularies as JSON arrays (entry i = id i), which hold any
//                              token (a newline too); written for language models (text data) and
//                              whenever a token contains a newline
//   src_vocab.txt, tgt_vocab.txt    otherwise one token per line, line i + 1 = id i (directories
//                              written before the JSON format have these and keep loading)
//   src.spm.model, tgt.spm.model    a side's SentencePiece model when its tokenization is spm
//   spm.model                 instead, the one SentencePiece model of both sides (a joint vocabulary,
//                              or a language model)
//   bpe_vocab.json, bpe_merges.txt  GPT-2's byte-level BPE files (tokenization gpt2-bpe), byte for
//                              byte as given (encoder.json / vocab.json and vocab.bpe / merges.txt)
//   gpt2_source.json          a directory imported from GPT-2 (tfm/models/gpt2.h): how to write the
//                              source back bit for bit
//   model.safetensors         the model's state_dict (PyTorch keys)
//   trainer_state.safetensors, trainer_clock.json, metrics.csv, curves.svg   the training run
//                              (tfm/train/trainer.h)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tfm/data/tokenizer.h"
#include "tfm/data/vocab.h"
#include "tfm/inference.h"
#include "tfm/models/decode.h"
#include "tfm/models/generate.h"
#include "tfm/models/model.h"
#include "tfm/random.h"

namespace tfm {

namespace model_dir {
inline constexpr const char* CONFIG = "config.json";
inline constexpr const char* MODEL = "model.safetensors";
inline constexpr const char* SRC_VOCAB = "src_vocab.txt";
inline constexpr const char* TGT_VOCAB = "tgt_vocab.txt";
inline constexpr const char* SRC_VOCAB_JSON = "src_vocab.json";
inline constexpr const char* TGT_VOCAB_JSON = "tgt_vocab.json";
inline constexpr const char* SRC_SPM = "src.spm.model";
inline constexpr const char* TGT_SPM = "tgt.spm.model";
inline constexpr const char* JOINT_SPM = "spm.model";
inline constexpr const char* BPE_VOCAB = "bpe_vocab.json";
inline constexpr const char* BPE_MERGES = "bpe_merges.txt";
inline constexpr const char* GPT2_SOURCE = "gpt2_source.json";  // tfm/models/gpt2.h
// What describes the model besides its weights (config, vocabularies, tokenizer models): the files a
// copy of the model takes along (tfm quantize) and a fresh run into the directory replaces.
inline constexpr const char* DESCRIPTION_FILES[] = {CONFIG,  SRC_VOCAB, TGT_VOCAB, SRC_VOCAB_JSON, TGT_VOCAB_JSON,
                                                     SRC_SPM, TGT_SPM,   JOINT_SPM, BPE_VOCAB,      BPE_MERGES};
// What a training run writes beside them (tfm/train/trainer.h): its state, wall clock, metrics, plot and best
// model. A model directory may be a run's; its replacement (tfm quantize --force) may delete these and no other.
inline constexpr const char* TRAINER_STATE = "trainer_state.safetensors";
inline constexpr const char* TRAINER_CLOCK = "trainer_clock.json";
inline constexpr const char* METRICS = "metrics.csv";
inline constexpr const char* CURVES = "curves.svg";
inline constexpr const char* BEST = "best";
inline constexpr const char* RUN_FILES[] = {TRAINER_STATE, TRAINER_CLOCK, METRICS, CURVES, BEST};
inline constexpr int FORMAT_VERSION = 1;

std::string path(const std::string& dir, const char* file);  // dir/file

// config.json's text from its parts (`train_json`: the "train" object as JSON text; `json_vocab`: the
// vocabulary files are the JSON ones).
std::string config_json(const ModelConfig& model, const std::string& train_json, const data::Vocab& src_vocab,
                        const data::Vocab& tgt_vocab, data::Tokenization src_tokens, data::Tokenization tgt_tokens,
                        bool json_vocab = false);
// The vocabulary file of DIR for a side: the JSON file when it exists, else the one-token-a-line one.
std::string src_vocab_path(const std::string& dir);
std::string tgt_vocab_path(const std::string& dir);
// Writes both vocabularies into DIR, as JSON when `json` (else one token a line), and removes the
// files of the other format so that a directory never holds two vocabularies for a side.
void save_vocabs(const std::string& dir, const data::Vocab& src_vocab, const data::Vocab& tgt_vocab, bool json);
// Writes the SentencePiece models of the spm sides into DIR: spm.model when both sides have the same
// model, else src.spm.model / tgt.spm.model; and a gpt2-bpe side's two files (one BPE a directory:
// two different ones throw). Removes the files no side uses.
void save_tokenizers(const std::string& dir, const data::Tokenizer& src, const data::Tokenizer& tgt);
// Copies the DESCRIPTION_FILES `from` holds (config, vocabularies, tokenizers) into the directory `to`: a new
// model directory of the same model, whose weights the caller writes (tfm quantize, tfm train --keep-best).
void copy_description(const std::string& from, const std::string& to);
// A side's tokenizer for tokenization `t`: for spm, DIR's src.spm.model (tgt.spm.model), else its
// spm.model; throws std::runtime_error naming the files when neither exists (or the file's error).
// For gpt2-bpe DIR's bpe_vocab.json and bpe_merges.txt (their errors name them).
data::Tokenizer load_tokenizer(const std::string& dir, data::Tokenization t, bool target);
// One object of DIR/config.json ("model", "train" or "vocab") as JSON text, after checking the
// format and version; throws std::runtime_error naming the file (data::DataError when the file is
// not such a config: not JSON, another format or version, a section missing).
std::string read_config_section(const std::string& dir, const char* section);
// The three objects of DIR/config.json, read and checked once.
struct ConfigSections {
  std::string model, train, vocab;  // JSON text
};
ConfigSections read_config(const std::string& dir);
}  // namespace model_dir

// A trained model directory, ready for decoding, fine-tuning or resuming: the one reader of a model
// directory (config.json is read once).
struct TrainedModel {
  std::string dir;  // where it was loaded from
  // The generator the model's dropout draws from, should it be put in training mode (its modules keep a
  // pointer to it, so it lives here, at a fixed address): Generator{0, 0}.
  std::unique_ptr<Generator> generator;
  std::unique_ptr<Model> model;  // in eval mode
  data::Vocab src_vocab, tgt_vocab;
  // The tokenizers (an spm one with its model, loaded from the directory).
  data::Tokenizer src_tokenizer = data::Tokenization::SPACE, tgt_tokenizer = data::Tokenization::SPACE;
  std::string train_json;  // config.json's "train" object (the run that wrote it; tfm/train/config.h reads it)
  bool quantized = false;  // its weights are int8 (tfm/models/quantize.h), dequantized into `model` (or lazily)
  // The precision it runs in unless told otherwise (tfm CLI and Python defaults): int8 for a quantized
  // directory, float32 else. The functions below compute under the caller's InferenceMode, so open it
  // with this: `tfm::InferenceMode scope(m.default_precision());`.
  Precision default_precision() const { return quantized ? Precision::INT8 : Precision::FLOAT32; }
};
// How load_model_dir brings in DIR/model.safetensors.
enum class WeightsLoad {
  NONE,  // none: the model keeps its initial draws (a resumed run takes its weights from its checkpoint)
  COPY,  // copied into memory of the model's own, free to change (training, fine-tuning)
  // For a model that only runs, whose parameters are never written: each float32 parameter views the
  // file's read-only mapping (no copy; a write to one faults), and once read its pages are given back —
  // after the load's checks, and after InferenceMode packs a Linear weight — to be read again from the
  // page cache or the file when touched. An int8 directory's matrices stay int8 in the mapping: each is
  // a lazy tensor whose float32 values are computed only if read (dequantize_state_dict_lazy), which
  // int8 inference never does. So a running model holds its packed Linear weights, not those and a
  // float32 copy too. The file must not be truncated or written in place while the model lives (tfm's
  // writers replace files by rename, which the mapping does not see): a truncated file's lost pages
  // raise SIGBUS, an overwritten one's are read with their new bytes.
  MAP_READ_ONLY,
};

// Throws, naming the file: std::runtime_error for a directory, config or vocabulary that cannot be read
// (the message ends with strerror's text) or is malformed, io::SafeTensorsError for missing or corrupt
// weights, std::invalid_argument for weights or a config that do not fit the model.
TrainedModel load_model_dir(const std::string& dir, WeightsLoad weights = WeightsLoad::COPY);
// m's model. A TrainedModel that holds none — default-constructed (the target of a load_model_dir that threw),
// or moved from — throws std::invalid_argument "TrainedModel: holds no model (default-constructed or moved
// from): load one with load_model_dir", as does every function below that takes a TrainedModel (they check
// with this first), instead of dereferencing a null model.
const Model& require_model(const TrainedModel& m);

// Throws std::invalid_argument unless m's model family takes `kind` data (tfm/models/family.h), naming
// the directory and its architecture, then `use`: what the command needs and where to go instead.
//   "<dir> is not a language model (arch seq2seq); <use>"   (kind TEXT)
//   "<dir> is a language model: <use>"                        (kind PAIRS)
void require_data(const TrainedModel& m, DataKind kind, const std::string& use);

// The target tokens a language model of DIR never generates (GenerateOptions::suppress, in id
// order): <pad>, <bos> unless it is also <eos> (GPT-2's <|endoftext|>), <unk>, with a gpt2-bpe
// tokenizer the vocabulary's rows past the BPE's tokens (a vocabulary padded to a round size), and <eos> for a
// model tfm trained on text with char, byte or spm tokens: a text's tokens hold no <eos>, so training never made it
// a target, and its leftover probability would end a sample at random. (GPT-2's <|endoftext|> is text's own.)
std::vector<int32_t> never_generated(const TrainedModel& m);

// Throws std::invalid_argument "stop: empty: give the text to stop at" for an empty stop text: every
// continuation contains "", so it could only mean "stop before the first token", and an empty text given by
// accident (an empty variable) would otherwise pass for "no stop". No stop is no text (std::nullopt below).
// stop_at_text checks with it; a front end may call it first, to fail before loading the model.
void check_stop_text(const std::string& text);

// GenerateOptions::stop_after for a stop text (non-empty: check_stop_text): a sample ends right after the
// token with which its decoded continuation (the prompt not included) first contains `text`, however the
// tokenizer cuts it (a subword may hold the stop text and more: the whole token is kept). Decodes as
// decode_text does token by token, i.e. as `tfm generate` prints. Stateless (one function may serve
// any number of calls and threads); m must outlive it.
std::function<bool(int64_t sample, const std::vector<int32_t>& generated)> stop_at_text(const TrainedModel& m,
                                                                                     const std::string& text);

// A language model's text generation, text in and text out, as `tfm generate` and tfm.Model.generate run
// it: the prompt encoded by encode_prompt, generate() with m's never_generated tokens added to
// options.suppress and `stop` (std::nullopt: none; an empty text throws, check_stop_text) as stop_at_text,
// each drawn token's text handed to on_piece(sample, bytes) at once (a piece may end inside a UTF-8
// character: the bytes are the model's; a sample's pieces join to its text). Returns each sample's text, the prompt not
// included. Runs under the caller's InferenceMode; check require_data(m, TEXT, ...) first.
std::vector<std::string> generate_text(
    const TrainedModel& m, const std::string& prompt, GenerateOptions options,
    const std::optional<std::string>& stop = std::nullopt,
    const std::function<void(int64_t sample, const std::string& piece)>& on_piece = {},
    const std::string& prompt_name = "prompt");
// The same from a prompt encode_prompt has encoded (non-empty): for a front end that also looks at the ids
// (unknown_tokens) without encoding the prompt twice.
std::vector<std::string> generate_text(
    const TrainedModel& m, const std::vector<int32_t>& prompt_ids, GenerateOptions options,
    const std::optional<std::string>& stop = std::nullopt,
    const std::function<void(int64_t sample, const std::string& piece)>& on_piece = {});

// A language model's prompt as its token ids: `prompt` (non-empty) encoded with m's tokenizer; an empty
// prompt or text that does not encode (invalid UTF-8 for a char or spm tokenizer) throws std::invalid_argument
// naming `prompt_name` (a file's name, or an option or "prompt" for a given string).
std::vector<int32_t> encode_prompt(const TrainedModel& m, const std::string& prompt,
                                   const std::string& prompt_name = "prompt");

// How many of `text`'s tokens m's tokenizer reads as <unk> (tokens its vocabulary lacks, and "<unk>" itself):
// what a front end tells the user before it generates from a prompt that lost characters. 0 for a
// vocabulary without <unk> (bytes, GPT-2's BPE: every text encodes). Throws as encode_prompt does for text
// that does not encode (`prompt_name` names it); "" has none.
int64_t unknown_tokens(const TrainedModel& m, const std::string& text, const std::string& prompt_name = "prompt");
// The same over ids already encoded (encode_prompt).
int64_t unknown_tokens(const TrainedModel& m, const std::vector<int32_t>& ids);

// A prompt file's text, its bytes as they are, for generate_text with the file's name as prompt_name: a
// regular file, or a pipe or device read to its end (/dev/stdin or "-", a shell's <(cmd)) up to 64 MiB; a
// directory, a missing or unreadable file, or a longer stream throws naming it.
std::string read_prompt_file(const std::string& path);

// Source ids (no bos/eos/pad) → predicted target tokens (greedy or beam), in input order, decoded
// in length-sorted batches of `batch_size` under one InferenceMode scope of the caller's precision.
// beam and batch_size ≥ 1 (std::invalid_argument otherwise; the batch size checked by data::plan_eval). Empty sources predict nothing (decode()
// itself, given an empty source, decodes from the bos token alone). A decoder's prediction ends at eos; an encoder's is one token per
// source position, padding dropped.
std::vector<data::Tokens> predict(const Model& model, const data::Vocab& tgt_vocab,
                                  const std::vector<std::vector<int32_t>>& sources, int beam, int64_t batch_size);
// The same with every decoding option (options.sample_streams is ignored: source i samples from
// stream first_stream + i, so a stream cut into calls samples as one call would). When `truncated` is
// given, it is set to the number of predictions that stopped at the length limit (options.max_len, by
// default 2·source length + 10) without eos (Hypothesis::truncated): a front end's cue to say that
// --max-len raises the limit. The library says nothing itself.
std::vector<data::Tokens> predict(const Model& model, const data::Vocab& tgt_vocab,
                                  const std::vector<std::vector<int32_t>>& sources, const DecodeOptions& options,
                                  int64_t batch_size, uint64_t first_stream = 0, int64_t* truncated = nullptr);

// Checks decoding options against a loaded model, naming the option (std::invalid_argument): first the checks
// that need no model (check_decode_options(DecodeOptions), tfm/models/decode.h), then beam above 1
// and max_len other than 0 for a model that predicts every source position at once (arch encoder: no
// search, no length limit), and max_len beyond the model's max_len (its position table). translate_lines
// and train::evaluate check with it; a front end may call it first, to fail before reading its input.
void check_decode_options(const TrainedModel& m, const DecodeOptions& options);

// What a front end tells the user when `truncated` of `outputs` predictions stopped at the length limit
// without an end token (predict's count), decoded with max_len (0: the default limit, 2·source + 10 but at
// most the model's max_len): one line saying how many and, below the model's max_len, that a larger
// max_len raises the limit; "" when none did.
std::string truncation_note(const TrainedModel& m, int64_t truncated, int64_t outputs, int64_t max_len);

// The error of a source line translate_lines cannot take (not UTF-8, more tokens than the model's max_len):
// what() names its line ("input line N: <why>"); `translated` holds the translations of the lines before it, in
// order, so that a front end streaming its input loses none of them (and one naming its inputs otherwise, as the
// Python package's lines[i], says `why` after its own name).
struct BadInputLine : std::invalid_argument {
  BadInputLine(uint64_t line, const std::string& why, std::vector<std::string> before)
      : std::invalid_argument("input line " + std::to_string(line) + ": " + why),
        line(line),
        why(why),
        translated(std::move(before)) {}
  uint64_t line;    // 1-based, in the whole stream
  std::string why;  // what is wrong with it
  std::vector<std::string> translated;
};

// Source texts → predicted target texts: tokenized, predicted, detokenized. An untokenizable line, or
// one of more tokens than the model's max_len, throws BadInputLine naming its line number.
std::vector<std::string> translate_lines(const TrainedModel& m, const std::vector<std::string>& sources, int beam,
                                         int64_t batch_size);
// The same with every decoding option, for a stream cut into calls: first_stream is the index of sources[0]
// in the stream, so sources[i] samples from stream first_stream + i (predict) and an error names it as
// input line first_stream + i + 1. `truncated`: as predict's. `unknown`, when given, is increased by the
// source tokens the vocabulary lacks (read as <unk>: unknown_note says so).
std::vector<std::string> translate_lines(const TrainedModel& m, const std::vector<std::string>& sources,
                                         const DecodeOptions& options, int64_t batch_size, uint64_t first_stream = 0,
                                         int64_t* truncated = nullptr, int64_t* unknown = nullptr);

// The one-line note a front end gives when `unknown` source tokens were read as <unk> ("" for none): the
// prediction of such a source may lose what they stood for.
std::string unknown_note(int64_t unknown);

}  // namespace tfm
