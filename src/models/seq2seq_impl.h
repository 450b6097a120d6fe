// src/models/seq2seq_impl.h — the inside of Seq2SeqModel, shared by seq2seq.cc (training forward)
// and decode.cc (incremental decoding). Internal: not installed, not part of the public API.
#pragma once

#include <memory>
#include <vector>

#include "tfm/models/seq2seq.h"

namespace tfm {

// nn.Linear(D, V) whose weight may be tied to an embedding matrix (V, D). When tied, `weight` is a
// second handle to the embedding's tensor and is not registered, so the key generator.weight is
// absent and the optimizer sees the matrix once; both uses accumulate into the same .grad.
class OutputProjection : public Module {
 public:
  OutputProjection(int64_t d_model, int64_t vocab, const Tensor* tied, Generator& gen);
  Tensor forward(const Tensor& x) const;  // (..., D) → (..., V)
  Tensor weight, bias;                    // (V, D), (V)
};

struct Seq2SeqModel::Impl {
  Impl(const ModelConfig& c, Generator& gen) : pe(c.d_model, c.max_len), dropout(c.dropout, gen) {}
  // arch "encoder"
  std::unique_ptr<Embedding> embedding;        // (V_src, D)
  std::unique_ptr<TransformerEncoder> encoder;  // batch_first
  // arch "seq2seq"
  std::unique_ptr<Embedding> src_embedding;  // (V_src, D)
  std::unique_ptr<Embedding> tgt_embedding;  // (V_tgt, D)
  std::unique_ptr<Transformer> transformer;  // batch_first, both final norms
  // both
  std::unique_ptr<OutputProjection> generator;  // (V_tgt, D)
  PositionalEncoding pe;                        // table (max_len, D), a buffer
  Dropout dropout;                              // after the positional encoding
  float embed_scale = 1.0f;                     // √D for seq2seq, 1 for encoder

  // ids (B, T) → dropout(embedding(ids)·scale + pe[:T]) (B, T, D)
  Tensor embed(const Embedding& emb, const std::vector<int32_t>& ids, int64_t B, int64_t T) const;
};

// Bool (B, T): true where ids == pad (PyTorch's key_padding_mask convention).
Tensor padding_mask(const std::vector<int32_t>& ids, int64_t B, int64_t T, int32_t pad_id);

}  // namespace tfm
