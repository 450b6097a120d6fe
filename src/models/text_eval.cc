// src/models/text_eval.cc — evaluate_text: a language model's loss over a text in consecutive
// windows (tfm/models/text_eval.h), scored by the trainer's validation scorer (src/models/scorer.h).
#include "tfm/models/text_eval.h"

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
  j["bits_per_char"] = bits_per_char;
  j["tokens"] = tokens;
  return j.dump();
}

TextScore evaluate_text(const Model& model, const data::TextCorpus& corpus, int64_t chars, int64_t batch_size) {
  const ModelConfig& c = model.config();
  if (c.family().data != DataKind::TEXT)
    throw std::invalid_argument("evaluate_text: needs a language model (arch decoder), got arch " +
                                std::string(enum_name(c.arch)));
  if (corpus.size() < 2)
    throw std::invalid_argument(corpus.name() + ": " + std::to_string(corpus.size()) +
                                " tokens, at least 2 are needed to predict one");
  if (batch_size < 1) throw std::invalid_argument("evaluate_text: batch_size must be ≥ 1");
  const detail::ScoreSums sums = detail::score(model, detail::window_batches(corpus, c.max_len, batch_size));
  const double nll = sums.loss_sum;  // Σ −log p(target), nats
  const int64_t count = sums.tokens;
  TextScore s;
  s.tokens = count;
  s.chars = chars;
  s.loss = nll / static_cast<double>(count);
  s.perplexity = std::exp(s.loss);
  s.bits_per_token = s.loss / std::log(2.0);
  s.bits_per_char = chars > 0 ? nll / std::log(2.0) / static_cast<double>(chars) : 0.0;
  return s;
}

TextScore evaluate_text_file(const TrainedModel& m, const std::string& path, int64_t batch_size) {
  if (m.model->family().data != DataKind::TEXT)
    throw std::invalid_argument(m.dir + " is not a language model (arch " + std::string(enum_name(m.model->config().arch)) +
                                "); eval --text needs arch decoder (eval --data / --task score the others)");
  const data::TextCorpus corpus = data::TextCorpus::read(path, m.tgt_vocab, m.tgt_tokenizer);
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::vector<char> buf(1 << 20);
  int64_t code_points = 0;
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    for (std::streamsize i = 0; i < f.gcount(); ++i)
      code_points += (static_cast<unsigned char>(buf[static_cast<size_t>(i)]) & 0xC0) != 0x80;
  }
  return evaluate_text(*m.model, corpus, std::max<int64_t>(code_points - 1, 0), batch_size);
}

}  // namespace tfm
