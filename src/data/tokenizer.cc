// src/data/tokenizer.cc — Tokenizer and SentencePiece training (see tfm/data/tokenizer.h).
#include "tfm/data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <unordered_map>

#include "data/spm_charsmap.h"
#include "io/file_util.h"
#include "quote.h"
#include "utf8.h"

namespace tfm::data {

struct Tokenizer::Spm {
  sentencepiece::SentencePieceProcessor processor;
  std::string model;  // serialized
  std::string name;   // the file (or data) it came from
};

struct Tokenizer::Bpe {
  ByteLevelBpe bpe;
  std::string vocab_json, merges;            // the files' contents, as read
  std::string vocab_name, merges_name;       // where they came from
};

namespace {

const std::string kEmpty;

// U+2581 LOWER ONE EIGHTH BLOCK: SentencePiece's spelling of a space inside its pieces.
constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

// Feeds the chosen lines to SentencePiece's trainer without copying them into a file, then the `extra` lines.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  LineIterator(const std::vector<std::string_view>& lines, std::vector<size_t> pick,
               std::vector<std::string_view> extra)
      : lines_(lines), pick_(std::move(pick)), extra_(std::move(extra)) {
    load();
  }
  bool done() const override { return k_ >= pick_.size() + extra_.size(); }
  void Next() override {
    ++k_;
    load();
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void load() {
    if (k_ < pick_.size()) value_.assign(lines_[pick_[k_]]);
    else if (k_ < pick_.size() + extra_.size())
      value_.assign(extra_[k_ - pick_.size()]);
  }
  const std::vector<std::string_view>& lines_;
  std::vector<size_t> pick_;
  std::vector<std::string_view> extra_;
  size_t k_ = 0;
  std::string value_;
};

// SentencePiece's status text without its source location: "Internal: ./src/x.cc(660) [cond] What."
// → "What.".
std::string status_text(const sentencepiece::util::Status& st) {
  std::string s = st.error_message();
  const size_t close = s.find("] ");
  if (s.rfind("./src/", 0) == 0 || s.find(".cc(") != std::string::npos)
    if (close != std::string::npos) s = s.substr(close + 2);
  return s;
}

}  // namespace

Tokenizer::Tokenizer(Tokenization t) : kind_(t) {}

Tokenizer Tokenizer::load_spm(const std::string& path) {
  std::string bytes;
  try {
    bytes = io::read_file(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": cannot read the SentencePiece model: " + e.what());
  }
  return from_spm_model(std::move(bytes), path);
}

Tokenizer Tokenizer::from_spm_model(std::string model, const std::string& name) {
  if (model.empty()) throw std::runtime_error(name + ": not a SentencePiece model (the file is empty)");
  auto spm = std::make_shared<Spm>();
  sentencepiece::util::Status st;
  try {  // a damaged piece can make SentencePiece's trie builder (darts) throw its own error
    st = spm->processor.LoadFromSerializedProto(model);
  } catch (const std::exception& e) {
    throw std::runtime_error(name + ": not a SentencePiece model (" + e.what() + ")");
  }
  if (!st.ok() || spm->processor.GetPieceSize() == 0) {
    // A file that does not parse as the model's protobuf gets an empty status message.
    const std::string why = st.ok() ? "it has no pieces" : status_text(st);
    throw std::runtime_error(name + ": not a SentencePiece model (" +
                             (why.empty() ? "its " + std::to_string(model.size()) + " bytes do not parse as one" : why) + ")");
  }
  // SentencePiece walks the normalization tables unchecked, at each character tokenized: a damaged one is refused now.
  if (const std::string why = spm_charsmaps_problem(model); !why.empty())
    throw std::runtime_error(name + ": not a SentencePiece model (" + why + ")");
  const char* specials[] = {Vocab::PAD, Vocab::BOS, Vocab::EOS, Vocab::UNK};
  for (int id = 0; id < 4; ++id)
    if (spm->processor.GetPieceSize() <= id || spm->processor.IdToPiece(id) != specials[id])
      throw std::runtime_error(name + ": SentencePiece model without tfm's specials <pad>=0, <bos>=1, <eos>=2, <unk>=3 "
                               "(piece " + std::to_string(id) + " is " +
                               quote_name(spm->processor.GetPieceSize() > id ? spm->processor.IdToPiece(id) : std::string()) +
                               "; train it with --pad_id=0 --bos_id=1 --eos_id=2 --unk_id=3 --pad_piece=<pad> "
                               "--bos_piece=<bos> --eos_piece=<eos> --unk_piece=<unk>)");
  spm->model = std::move(model);
  spm->name = name;
  Tokenizer t(Tokenization::SPM);
  t.spm_ = std::move(spm);
  return t;
}

Tokenizer Tokenizer::load_gpt2_bpe(const std::string& vocab_path, const std::string& merges_path) {
  ByteLevelBpe::Files f = ByteLevelBpe::read_files(vocab_path, merges_path);
  return from_gpt2_bpe(std::move(f.vocab_json), vocab_path, std::move(f.merges), merges_path);
}

Tokenizer Tokenizer::from_gpt2_bpe(std::string vocab_json, const std::string& vocab_name, std::string merges,
                                   const std::string& merges_name) {
  auto b = std::make_shared<Bpe>(Bpe{ByteLevelBpe::from_strings(vocab_json, vocab_name, merges, merges_name),
                                     std::move(vocab_json), std::move(merges), vocab_name, merges_name});
  Tokenizer t(Tokenization::GPT2_BPE);
  t.bpe_ = std::move(b);
  return t;
}

const std::string& Tokenizer::spm_model() const { return spm_ ? spm_->model : kEmpty; }
const std::string& Tokenizer::spm_name() const { return spm_ ? spm_->name : kEmpty; }

const ByteLevelBpe& Tokenizer::bpe() const {
  if (!bpe_) throw std::invalid_argument("gpt2-bpe tokenization needs its vocabulary and merges files (data::Tokenizer)");
  return bpe_->bpe;
}
const std::string& Tokenizer::bpe_vocab_json() const { return bpe_ ? bpe_->vocab_json : kEmpty; }
const std::string& Tokenizer::bpe_merges() const { return bpe_ ? bpe_->merges : kEmpty; }

std::string Tokenizer::name() const {
  if (spm_) return spm_->name;
  if (bpe_) return bpe_->vocab_name + " and " + bpe_->merges_name;
  return std::string(enum_name(kind_));
}

Tokens Tokenizer::tokenize(const std::string& text) const {
  if (kind_ == Tokenization::GPT2_BPE) {
    const ByteLevelBpe& b = bpe();
    Tokens out;
    for (int32_t id : b.encode(text)) out.push_back(b.token(id));
    return out;
  }
  if (kind_ != Tokenization::SPM) return data::tokenize(text, kind_);
  if (!spm_) data::tokenize(text, kind_);  // throws: no model
  // SentencePiece's normaliser turns bytes that are not UTF-8 into U+FFFD without a word: its pieces
  // would stand for another text than the one given (even a lossless model's).
  if (const size_t bad = first_invalid_utf8(text); bad < text.size())
    throw std::invalid_argument("invalid UTF-8 at byte " + std::to_string(bad));  // as char tokens say
  Tokens pieces;
  const auto st = spm_->processor.Encode(text, &pieces);
  if (!st.ok()) throw std::invalid_argument(spm_->name + ": cannot encode: " + status_text(st));
  return pieces;
}

std::string Tokenizer::detokenize(const Tokens& tokens) const {
  if (kind_ == Tokenization::GPT2_BPE) {
    const ByteLevelBpe& b = bpe();
    std::vector<int32_t> ids;
    ids.reserve(tokens.size());
    for (const auto& tok : tokens) {
      const auto id = b.find(tok);
      if (!id) throw std::invalid_argument(name() + ": token " + quote_name(tok) + " is not in the BPE vocabulary");
      ids.push_back(*id);
    }
    return b.decode(ids);
  }
  if (kind_ != Tokenization::SPM) return data::detokenize(tokens, kind_);
  if (!spm_) data::detokenize(tokens, kind_);  // throws: no model
  std::string text;
  const auto st = spm_->processor.Decode(tokens, &text);
  if (!st.ok()) throw std::invalid_argument(spm_->name + ": cannot decode: " + status_text(st));
  return text;
}

Vocab Tokenizer::vocab() const {
  if (bpe_) {
    std::vector<std::string> tokens;
    tokens.reserve(static_cast<size_t>(bpe_->bpe.vocab_size()));
    for (int32_t id = 0; id < bpe_->bpe.vocab_size(); ++id) tokens.push_back(bpe_->bpe.token(id));
    return Vocab::from_tokens(std::move(tokens));  // ids 0..V−1 once each: ByteLevelBpe checked them
  }
  if (!spm_) throw std::invalid_argument("Tokenizer::vocab: only an spm or gpt2-bpe tokenizer has its own vocabulary");
  std::vector<std::string> pieces;
  pieces.reserve(static_cast<size_t>(spm_->processor.GetPieceSize()));
  for (int id = 0; id < spm_->processor.GetPieceSize(); ++id) pieces.push_back(spm_->processor.IdToPiece(id));
  try {
    return Vocab::from_tokens(std::move(pieces));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(spm_->name + ": " + e.what());
  }
}

std::string train_spm(const std::vector<std::string_view>& lines, const SpmOptions& o, const std::string& name) {
  if (o.vocab_size < 5) throw std::invalid_argument(name + ": an spm vocabulary size must be ≥ 5 (4 specials), got " +
                                                    std::to_string(o.vocab_size));
  if (o.max_lines < 1) throw std::invalid_argument(name + ": spm_max_lines must be ≥ 1");
  std::vector<size_t> nonempty;
  for (size_t i = 0; i < lines.size(); ++i)  // a line that is not UTF-8 would teach U+FFFD (tokenize refuses it)
    if (!lines[i].empty() && first_invalid_utf8(lines[i]) == lines[i].size()) nonempty.push_back(i);
  if (nonempty.empty()) throw std::invalid_argument(name + ": no text to train a SentencePiece model on");
  const auto n = static_cast<uint64_t>(nonempty.size());
  const auto m = std::min<uint64_t>(n, static_cast<uint64_t>(o.max_lines));
  std::vector<size_t> pick(m);
  for (uint64_t i = 0; i < m; ++i) pick[i] = nonempty[static_cast<size_t>(i * n / m)];  // evenly spaced
  // SentencePiece's trainer skips, silently, every line longer than max_sentence_length (4192 bytes by
  // default): a text of long lines would train on its short lines alone. The longest chosen line sets it.
  size_t longest = 4192;
  for (const size_t i : pick) longest = std::max(longest, lines[i].size());
  longest = std::min<size_t>(longest, std::numeric_limits<int32_t>::max());  // a proto int32
  // A lossless model holds the piece "▁" whatever its text: SentencePiece's alphabet is the text's characters
  // (those within its character coverage, 99.95% of them), and without "▁" a space of another text would go to
  // byte fallback as the bytes of "▁", which decode to that character, not to a space. required_chars keeps it in
  // the alphabet; its count is the text's spaces (and "▁"s), and a text with none gets one more line, a space,
  // since SentencePiece's BPE trainer ends the process on a required character of count 0 (unigram's does not, and
  // takes the line the same).
  std::vector<std::string_view> extra;
  if (o.lossless && std::none_of(pick.begin(), pick.end(), [&](size_t i) {
        return lines[i].find(' ') != std::string_view::npos || lines[i].find(kSpmSpace) != std::string_view::npos;
      }))
    extra.emplace_back(" ");
  std::unordered_map<std::string, std::string> spec = {
      {"model_type", o.type == SpmType::BPE ? "bpe" : "unigram"},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"pad_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"unk_id", "3"},
      {"pad_piece", Vocab::PAD},
      {"bos_piece", Vocab::BOS},
      {"eos_piece", Vocab::EOS},
      {"unk_piece", Vocab::UNK},
      {"num_threads", std::to_string(kSpmTrainerThreads)},
      {"input_sentence_size", "0"},                      // every line given (our own sampling chose them)
      {"max_sentence_length", std::to_string(longest)},  // ... and none skipped for its length
      {"shuffle_input_sentence", "false"},
      {"minloglevel", "100"},  // nothing on stderr
      {"hard_vocab_limit", "true"},
      {"max_sentencepiece_length", std::to_string(kSpmMaxPieceChars)},
      {"byte_fallback", o.lossless ? "true" : "false"},
      {"normalization_rule_name", o.lossless ? "identity" : "nmt_nfkc"},
      {"remove_extra_whitespaces", o.lossless ? "false" : "true"},
      {"add_dummy_prefix", o.lossless ? "false" : "true"},
  };
  if (o.lossless) spec.emplace("required_chars", kSpmSpace);
  LineIterator it(lines, std::move(pick), std::move(extra));
  std::string model;
  const auto st = sentencepiece::SentencePieceTrainer::Train(spec, &it, &model);
  if (!st.ok()) {
    // "Vocabulary size is smaller than required_chars. 300 vs 331. Increase vocab_size or decrease
    // character_coverage with --character_coverage option.": said in tfm's terms (it has no such option).
    const std::string text = status_text(st);
    const size_t at = text.find("required_chars. ");
    long long asked = 0, needed = 0;
    if (at != std::string::npos &&
        std::sscanf(text.c_str() + at + 16, "%lld vs %lld", &asked, &needed) == 2)
      throw std::invalid_argument(
          name + ": a vocabulary of " + std::to_string(asked) + " pieces is too small: this text needs " +
          std::to_string(needed) + " (its characters" + (o.lossless ? " with a space, the 256 byte pieces" : "") +
          " and the 4 specials); give a vocabulary size of " + std::to_string(needed) + " or more");
    throw std::invalid_argument(name + ": SentencePiece cannot make a vocabulary of " + std::to_string(o.vocab_size) +
                                " pieces from " + std::to_string(m) + " lines: " + text);
  }
  return model;
}

}  // namespace tfm::data
