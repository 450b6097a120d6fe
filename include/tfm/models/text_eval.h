// tfm/models/text_eval.h — scoring a language model (arch DECODER) on a text: loss per token,
// perplexity, bits per token and bits per character.
//
// The text is cut into consecutive windows of block = config.max_len tokens, as the trainer's
// validation does (tfm/data/text.h, validation_windows): every token but the first is predicted
// exactly once, from the tokens before it in its window; the last window is shorter when block
// does not divide tokens − 1. Losses are summed in double.
#pragma once

#include <cstdint>
#include <string>

#include "tfm/data/text.h"
#include "tfm/models/model.h"
#include "tfm/models/model_dir.h"

namespace tfm {

struct TextScore {
  double loss = 0;            // mean cross-entropy per predicted token, in nats
  double perplexity = 0;      // exp(loss)
  double bits_per_token = 0;  // loss / ln 2
  // Total bits over the characters predicted: every code point of the text but those of its first token
  // (given, never predicted: one character under char tokens, a whole piece such as " License" under spm),
  // a code point counted with the token that holds its lead byte; comparable across tokenizations. NaN
  // (null in to_json) when chars is 0: a text of one character whose tokens (bytes, pieces) are scored
  // has no whole character predicted.
  double bits_per_char = 0;
  int64_t tokens = 0;  // tokens predicted (the text's tokens − 1)
  int64_t chars = 0;
  // The text's tokens the vocabulary lacks, read as <unk> (characters a char model never saw): the figures score
  // the model's guess of "some unknown character", not the characters themselves.
  int64_t unknown_tokens = 0;
  // {"loss", "perplexity", "bits_per_token", "bits_per_char", "tokens", "unknown_tokens"}
  std::string to_json() const;
};

// Windows scored together when a caller does not say (tfm eval --text, Python's score and score_file): a
// window is block_size tokens, so a batch's logits are kScoreBatchSize·block_size·V floats (GPT-2 small:
// 16·1024·50257, 3.3 GB).
inline constexpr int64_t kScoreBatchSize = 16;

// corpus: the text's ids; chars: its characters predicted (see TextScore). Windows are scored
// `batch_size` at a time under InferenceMode in eval mode (the training flag is restored). Throws
// std::invalid_argument for another architecture or a corpus of fewer than 2 tokens.
TextScore evaluate_text(const Model& model, const data::TextCorpus& corpus, int64_t chars,
                        int64_t batch_size = kScoreBatchSize);

// A text file scored with a trained model directory's vocabulary and tokenization (its target
// side); errors name the file (data::TextCorpus::read). Characters: the file's UTF-8 code points
// (bytes that are not continuation bytes) minus those of its first token as decoded (see TextScore).
TextScore evaluate_text_file(const TrainedModel& m, const std::string& path, int64_t batch_size = kScoreBatchSize);
// The same for a text in memory (`tfm.load(...).score(text)`): the same characters rule and errors,
// the text named "text" in messages.
TextScore evaluate_text_string(const TrainedModel& m, const std::string& text, int64_t batch_size = kScoreBatchSize);

}  // namespace tfm
