// tfm/data/tokenizer.h — a tokenizer as one copyable value: char / space / byte (the functions of
// tfm/data/vocab.h, which it calls unchanged), a SentencePiece model (spm) or GPT-2's byte-level BPE
// (gpt2-bpe, tfm/data/bpe.h), and training a SentencePiece model in-process.
//
// A gpt2-bpe tokenizer is its two files (vocabulary JSON and merges), kept as read so that a model
// directory stores them unchanged; its vocabulary (Tokenizer::vocab) is the BPE's tokens in id order,
// with "<|endoftext|>" as both bos and eos and no <pad> or <unk> (every byte has a token).
//
// An spm model for tfm has the specials at tfm's ids with tfm's spelling: <pad>=0, <bos>=1, <eos>=2,
// <unk>=3, so the vocabulary of its pieces in id order (Tokenizer::vocab) is an ordinary Vocab. The
// models train_spm writes are like that; a given .model file is checked when loaded.
//
// Two kinds of spm model (SpmOptions::lossless):
//   pairs (TSV sides)  SentencePiece's defaults for translation: NFKC normalisation (nmt_nfkc),
//                      extra whitespace removed, a dummy "▁" prefix on every sentence, no byte
//                      fallback (an unknown character is <unk>).
//   lossless (text)    for language models: no normalisation, whitespace kept, no dummy prefix, byte
//                      fallback (a character outside the pieces becomes its UTF-8 bytes "<0xNN>"),
//                      and the piece "▁" whatever the text (SentencePiece's required_chars; a text
//                      without a space trains with one more line, a space), so that every text,
//                      newlines and spaces included, encodes and decodes back to itself: without "▁"
//                      a space would become the byte pieces of "▁" and decode as that character.
//                      A text is encoded line by line with the piece "<0x0A>" for each
//                      newline (tfm/data/text.h), since SentencePiece never sees a newline inside a
//                      sentence, and a "▁" (U+2581) of the text as its byte pieces, since pieces
//                      spell a space so.
//
// Determinism: train_spm gives bitwise the same model for the same lines and options whatever the
// machine and tfm's --threads: SentencePiece's own trainer runs a fixed number of threads
// (kSpmTrainerThreads), never shuffles or samples its input (we pass every line we chose), and its
// logging is off (the library never prints).
//
// To add a tokenizer kind: a Tokenization enumerator (tfm/data/vocab.h), its case in tokenize /
// detokenize here, its files in tfm/models/model_dir.h, and tests in tests/spm/ or tests/data/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tfm/data/bpe.h"
#include "tfm/data/vocab.h"

namespace tfm::data {

enum class SpmType { UNIGRAM, BPE };

struct SpmOptions {
  int64_t vocab_size = 8000;   // pieces, specials included
  SpmType type = SpmType::UNIGRAM;
  int64_t max_lines = 2000000; // at most this many lines train the model (evenly spaced ones)
  bool lossless = false;       // the language-model kind (see above)
};

// The longest piece a trained model holds, in code points (SentencePiece's max_sentencepiece_length, its default).
inline constexpr int64_t kSpmMaxPieceChars = 16;

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

  // GPT-2's byte-level BPE from its vocabulary (encoder.json / vocab.json) and merges (vocab.bpe /
  // merges.txt) files; errors as ByteLevelBpe::load (one line naming the file).
  static Tokenizer load_gpt2_bpe(const std::string& vocab_path, const std::string& merges_path);
  // The same from the files' contents; the names stand for the files in messages.
  static Tokenizer from_gpt2_bpe(std::string vocab_json, const std::string& vocab_name, std::string merges,
                                 const std::string& merges_name);

  Tokenization kind() const { return kind_; }
  bool is_spm() const { return kind_ == Tokenization::SPM; }
  bool is_bpe() const { return kind_ == Tokenization::GPT2_BPE; }
  // A tokenizer with its own vocabulary (spm, gpt2-bpe): Tokenizer::vocab gives it.
  bool has_vocab() const { return is_spm() || is_bpe(); }
  // SPM: the serialized model (the .model file's bytes) and where it came from; "" otherwise.
  const std::string& spm_model() const;
  const std::string& spm_name() const;
  // GPT2_BPE: the loaded BPE, and its two files' contents as read (throws unless loaded from files).
  const ByteLevelBpe& bpe() const;
  const std::string& bpe_vocab_json() const;
  const std::string& bpe_merges() const;
  // The file(s) the model came from, for messages: spm_name, or "<vocab file> and <merges file>".
  std::string name() const;

  // Text → tokens: char / space / byte as data::tokenize; SPM the model's pieces ("▁the", "<0x0A>");
  // GPT2_BPE the BPE's tokens ("Ġthe"; any bytes, as GPT-2's byte-level BPE reads them). Throws
  // std::invalid_argument (invalid UTF-8 under char and spm — SentencePiece alone would read such bytes as
  // U+FFFD; SPM / GPT2_BPE without their files).
  Tokens tokenize(const std::string& text) const;
  // Tokens → text: char / space / byte as data::detokenize; SPM SentencePiece's decoding ("▁" becomes
  // a space, the dummy prefix is dropped, byte pieces become their bytes, <unk> " ⁇ "); GPT2_BPE the
  // bytes the tokens stand for (a token outside the vocabulary throws std::invalid_argument).
  std::string detokenize(const Tokens& tokens) const;

  // SPM: the model's pieces in id order, as a Vocab (specials at 0..3); GPT2_BPE: the BPE's tokens
  // in id order (bos = eos = "<|endoftext|>", no <pad>, no <unk>). Throws for the other kinds.
  Vocab vocab() const;

  friend bool operator==(const Tokenizer& a, Tokenization t) { return a.kind_ == t; }

 private:
  struct Spm;
  struct Bpe;
  Tokenization kind_ = Tokenization::CHAR;
  std::shared_ptr<const Spm> spm_;  // SPM: the loaded model, shared by copies (read-only)
  std::shared_ptr<const Bpe> bpe_;  // GPT2_BPE: the loaded BPE and its files, shared by copies
};

// data::tokenize / data::detokenize with a Tokenizer (an spm one included): callers written for a
// Tokenization work unchanged when handed a Tokenizer.
inline Tokens tokenize(const std::string& text, const Tokenizer& t) { return t.tokenize(text); }
inline std::string detokenize(const Tokens& tokens, const Tokenizer& t) { return t.detokenize(tokens); }

// Trains a SentencePiece model on `lines` (at most o.max_lines of them, evenly spaced: line
// ⌊i·n/max_lines⌋ for i < max_lines; empty lines and lines that are not UTF-8, which tokenize
// refuses, are skipped; a chosen line trains it however long it is, where SentencePiece's trainer alone
// skips lines above 4192 bytes; a lossless model's trainer also reads a line of one space when none of the
// chosen lines holds a space, see above) and returns the serialized model.
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
