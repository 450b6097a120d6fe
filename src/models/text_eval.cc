// src/models/text_eval.cc — evaluate_text: a language model's loss over a text in consecutive
// windows (tfm/models/text_eval.h), scored by the trainer's validation scorer (src/models/scorer.h).
#include "tfm/models/text_eval.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

#include "models/scorer.h"

namespace tfm {

std::string TextScore::to_json() const {
  nlohmann::ordered_json j;
  j["loss"] = loss;
  j["perplexity"] = perplexity;
  j["bits_per_token"] = bits_per_token;
  j["bits_per_char"] = chars > 0 ? nlohmann::ordered_json(bits_per_char) : nlohmann::ordered_json(nullptr);
  j["tokens"] = tokens;
  j["unknown_tokens"] = unknown_tokens;
  return j.dump();
}

TextScore evaluate_text(const Model& model, const data::TextCorpus& corpus, int64_t chars, int64_t batch_size) {
  const ModelConfig& c = model.config();
  if (c.family().data != DataKind::TEXT)
    throw std::invalid_argument("evaluate_text: needs a language model (arch decoder), got arch " +
                                std::string(enum_name(c.arch)));
  if (corpus.size() < 2)
    throw std::invalid_argument(corpus.name() + ": " + std::to_string(corpus.size()) +
                                (corpus.size() == 1 ? " token" : " tokens") + ", at least 2 are needed to predict one");
  if (batch_size < 1) throw std::invalid_argument("batch_size must be ≥ 1, got " + std::to_string(batch_size));
  const detail::ScoreSums sums = detail::score(model, detail::window_batches(corpus, c.max_len, batch_size));
  const double nll = sums.loss_sum;  // Σ −log p(target), nats
  const int64_t count = sums.tokens;
  TextScore s;
  s.tokens = count;
  s.chars = chars;
  s.loss = nll / static_cast<double>(count);
  s.perplexity = std::exp(s.loss);
  s.bits_per_token = s.loss / std::log(2.0);
  s.bits_per_char = chars > 0 ? nll / std::log(2.0) / static_cast<double>(chars) : std::nan("");
  return s;
}

namespace {

// A model directory's language model, or an error naming the directory.
void require_language_model(const TrainedModel& m) {
  if (require_model(m).family().data != DataKind::TEXT)
    throw std::invalid_argument(m.dir + " is not a language model (arch " + std::string(enum_name(m.model->config().arch)) +
                                "); eval --text needs arch decoder (eval --data / --task score the others)");
}

// UTF-8 code points of bytes: those that are not continuation bytes (each code point counted at its lead byte).
int64_t code_points(const char* p, size_t n) {
  int64_t count = 0;
  for (size_t i = 0; i < n; ++i) count += (static_cast<unsigned char>(p[i]) & 0xC0) != 0x80;
  return count;
}
int64_t code_points(const std::string& s) { return code_points(s.data(), s.size()); }

// The characters predicted: the text's code points but those of its first token (given, never predicted), i.e. the
// code points whose lead byte is in a predicted token. The first token as decoded: one character under char tokens
// (an unknown one <unk>, decoded U+FFFD, is one too), one byte under byte tokens (a lead byte: one, as for char; a
// continuation byte: none), a piece (" License") or a BPE token (possibly part of a UTF-8 sequence) under spm and
// gpt2-bpe.
int64_t predicted_chars(const TrainedModel& m, const data::TextCorpus& corpus, int64_t text_code_points) {
  if (corpus.size() == 0) return 0;  // (evaluate_text refuses it)
  const std::string first = data::decode_text(m.tgt_vocab, m.tgt_tokenizer, {corpus[0]});
  return std::max<int64_t>(text_code_points - code_points(first), 0);
}

}  // namespace

TextScore evaluate_text_file(const TrainedModel& m, const std::string& path, int64_t batch_size) {
  require_language_model(m);
  const data::TextCorpus corpus = data::TextCorpus::read(path, m.tgt_vocab, m.tgt_tokenizer);
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::vector<char> buf(1 << 20);
  int64_t chars = 0;
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    chars += code_points(buf.data(), static_cast<size_t>(f.gcount()));
  }
  TextScore s = evaluate_text(*m.model, corpus, predicted_chars(m, corpus, chars), batch_size);
  if (m.tgt_vocab.unk_id() >= 0) s.unknown_tokens = corpus.count(m.tgt_vocab.unk_id());
  return s;
}

TextScore evaluate_text_string(const TrainedModel& m, const std::string& text, int64_t batch_size) {
  require_language_model(m);
  const std::vector<int32_t> ids = data::encode_text(m.tgt_vocab, m.tgt_tokenizer, text, "text");
  const data::TextCorpus corpus = data::TextCorpus::from_ids(ids, m.tgt_vocab.size(), "text");
  TextScore s = evaluate_text(*m.model, corpus, predicted_chars(m, corpus, code_points(text)), batch_size);
  if (m.tgt_vocab.unk_id() >= 0) s.unknown_tokens = corpus.count(m.tgt_vocab.unk_id());
  return s;
}

}  // namespace tfm
