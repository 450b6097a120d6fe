// tfm/data/tokenizer.h — a tokenizer as one copyable value: char / space / byte (the functions of
// tfm/data/vocab.h, which it calls unchanged) or a SentencePiece model (spm), and training such a
// model in-process.
//
// An spm model for tfm has the specials at tfm's ids with tfm's spelling: <pad>=0, <bos>=1, <eos>=2,
// <unk>=3, so the vocabulary of its pieces in id order (Tokenizer::vocab) is an ordinary Vocab. The
// models train_spm writes are like that; a given .model file is checked when loaded.
//
// Two kinds of spm model (SpmOptions::lossless):
//   pairs (TSV sides)  SentencePiece's defaults for translation: NFKC normalisation (nmt_nfkc),
//                      extra whitespace removed, a dummy "▁" prefix on every sentence, no byte
//                      fallback (an unknown character is <unk>).
//   lossless (text)    for language models: no normalisation, whitespace kept, no dummy prefix, and
//                      byte fallback (a character outside the pieces becomes its UTF-8 bytes
//                      "<0xNN>"), so that every text, newlines included, encodes and decodes back to
//                      itself. A text is encoded line by line with the piece "<0x0A>" for each
//                      newline (tfm/data/text.h), since SentencePiece never sees a newline inside a
//                      sentence.
//
// Determinism: train_spm gives bitwise the same model for the same lines and options whatever the
// machine and tfm's --threads: SentencePiece's own trainer runs a fixed number of threads
// (kSpmTrainerThreads), never shuffles or samples its input (we pass every line we chose), and its
// logging is off (the library never prints).
//
// To add a tokenizer kind: a Tokenization enumerator (tfm/data/vocab.h), its case in tokenize /
// detokenize here, and tests in tests/spm/ or tests/data/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tfm/data/vocab.h"

namespace tfm::data {

enum class SpmType { UNIGRAM, BPE };

struct SpmOptions {
  int64_t vocab_size = 8000;   // pieces, specials included
  SpmType type = SpmType::UNIGRAM;
  int64_t max_lines = 2000000; // at most this many lines train the model (evenly spaced ones)
  bool lossless = false;       // the language-model kind (see above)
};

// SentencePiece trainer threads: fixed, so that the model does not depend on the machine.
inline constexpr int kSpmTrainerThreads = 4;

class Tokenizer {
 public:
  // char / space / byte. Tokenizer(Tokenization::SPM) has no model: tokenize throws.
  Tokenizer(Tokenization t = Tokenization::CHAR);  // NOLINT: implicit, a Tokenization is a tokenizer
  // A SentencePiece model file. Throws std::runtime_error naming the file when it is missing, not a
  // SentencePiece model, or lacks tfm's specials at their ids.
  static Tokenizer load_spm(const std::string& path);
  // The same from the file's bytes; `name` stands for the file in messages.
  static Tokenizer from_spm_model(std::string model, const std::string& name);

  Tokenization kind() const { return kind_; }
  bool is_spm() const { return kind_ == Tokenization::SPM; }
  // SPM: the serialized model (the .model file's bytes) and where it came from; "" otherwise.
  const std::string& spm_model() const;
  const std::string& spm_name() const;

  // Text → tokens: char / space / byte as data::tokenize; SPM the model's pieces ("▁the", "<0x0A>").
  // Throws std::invalid_argument (invalid UTF-8 under char, SPM without a model).
  Tokens tokenize(const std::string& text) const;
  // Tokens → text: char / space / byte as data::detokenize; SPM SentencePiece's decoding ("▁" becomes
  // a space, the dummy prefix is dropped, byte pieces become their bytes, <unk> " ⁇ ").
  std::string detokenize(const Tokens& tokens) const;

  // SPM: the model's pieces in id order, as a Vocab (specials at 0..3).
  Vocab vocab() const;

  friend bool operator==(const Tokenizer& a, Tokenization t) { return a.kind_ == t; }

 private:
  struct Spm;
  Tokenization kind_ = Tokenization::CHAR;
  std::shared_ptr<const Spm> spm_;  // SPM: the loaded model, shared by copies (read-only)
};

// data::tokenize / data::detokenize with a Tokenizer (an spm one included): callers written for a
// Tokenization work unchanged when handed a Tokenizer.
inline Tokens tokenize(const std::string& text, const Tokenizer& t) { return t.tokenize(text); }
inline std::string detokenize(const Tokens& tokens, const Tokenizer& t) { return t.detokenize(tokens); }

// Trains a SentencePiece model on `lines` (at most o.max_lines of them, evenly spaced: line
// ⌊i·n/max_lines⌋ for i < max_lines; empty lines are skipped) and returns the serialized model.
// `name` names the data in messages. Throws std::invalid_argument "<name>: ..." when there is no text,
// or when SentencePiece cannot make o.vocab_size pieces from it (with the size it allows when it says).
std::string train_spm(const std::vector<std::string_view>& lines, const SpmOptions& o, const std::string& name);

}  // namespace tfm::data

namespace tfm {
template <>
struct EnumNames<data::SpmType> {
  static constexpr const char* noun = "spm_type";
  static constexpr std::array<std::pair<data::SpmType, std::string_view>, 2> names{
      {{data::SpmType::UNIGRAM, "unigram"}, {data::SpmType::BPE, "bpe"}}};
};
}  // namespace tfm
