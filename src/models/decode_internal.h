// src/models/decode_internal.h — the two step decoders behind tfm::decode, exposed to tests so they
// can compare the cached step with the full decoder position by position.
//
// A step decoder holds N rows (hypotheses); row n decodes source row_source[n] of an encoded batch.
// step(tokens) feeds token tokens[n] at the next position of every row and returns the logits of
// that position (N, V). select_rows reorders/drops rows between steps (beam search).
// Both must be used under NoGradGuard with the model in eval mode.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tfm/models/model.h"

namespace tfm::detail {

// The encoder side of a batch of sources, computed once: ids (Bs, S) padded at the end.
struct EncodedSources {
  int64_t Bs = 0, S = 0;
  std::vector<int64_t> lengths;  // (Bs) unpadded lengths
  Tensor memory;                 // (Bs, S, D) encoder output (final norm applied)
  Tensor kpm;                    // (Bs, S) Bool, true at padding
};
EncodedSources encode_sources(const Model& model, const std::vector<std::vector<int32_t>>& sources);

class StepDecoder {
 public:
  virtual ~StepDecoder() = default;
  virtual Tensor step(const std::vector<int32_t>& tokens) = 0;  // (N) → logits (N, V)
  virtual void select_rows(const std::vector<int64_t>& rows) = 0;
  const std::vector<int64_t>& row_source() const { return row_source_; }
  int64_t position() const { return position_; }  // positions fed so far

 protected:
  std::vector<int64_t> row_source_;  // (N)
  int64_t position_ = 0;
};

// With the key/value cache: each step runs the decoder stack's forward on one token per row, with a
// TransformerDecoderCache (tfm/modules/transformer.h).
std::unique_ptr<StepDecoder> make_cached_decoder(const Model& model, const EncodedSources& enc,
                                                 std::vector<int64_t> row_source, int64_t capacity);
// Without: each step re-runs the full decoder (causal mask) on the whole prefix of every row.
std::unique_ptr<StepDecoder> make_full_decoder(const Model& model, const EncodedSources& enc,
                                               std::vector<int64_t> row_source);

}  // namespace tfm::detail
