// tfm/models/config.h — the description a trainable model is assembled from (tfm/models/model.h).
//
// Architectures (Arch):
//   ENCODER  the "reverse a sequence" notebook: ids (B, S) → embedding → + positions → dropout →
//            TransformerEncoder → generator Linear → logits (B, S, V_tgt); one prediction per source
//            position (source and target have the same length).
//            Keys: embedding.weight, [pos_embedding.weight], encoder.layers.N.*, [encoder.norm.*],
//            generator.weight, generator.bias.
//   SEQ2SEQ  the "build_transformer" notebook: src/tgt embeddings (scaled by √D), + positions, dropout,
//            nn.Transformer (both final norms) with a causal target mask and padding masks, generator
//            Linear; Xavier-uniform initialisation of every matrix (but the learned position tables).
//            Optional tied target embedding and generator; with share_embeddings the encoder reads
//            the target embedding too (fairseq's share-all-embeddings; src_embedding.weight absent, equal
//            vocabulary sizes). Keys: src_embedding.weight (unless shared),
//            tgt_embedding.weight, [src_pos_embedding.weight, tgt_pos_embedding.weight],
//            transformer.encoder.*, transformer.decoder.*, generator.weight (absent when tied),
//            generator.bias.
//   DECODER  a decoder-only (GPT-style) language model: ids (B, T) → embedding → + positions → dropout →
//            a stack of num_decoder_layers causal self-attention layers (nn.TransformerEncoderLayer with
//            the causal mask, under the key decoder.; always a final norm) → generator Linear without
//            bias → logits (B, T, V_tgt), the prediction of the next token at every position. Its
//            vocabulary is the target one (src_vocab_size is not used). Initialisation as GPT-2 /
//            nanoGPT: N(0, 0.02) for the embeddings and every weight matrix, N(0, 0.02/√(2·L)) for the
//            residual output projections (out_proj.weight, linear2.weight), biases 0, norms 1.
//            Keys: embedding.weight, [pos_embedding.weight], decoder.layers.N.*, decoder.norm.*,
//            generator.weight only when untied (no generator bias).
//            config.json files written before the stack was sized by num_decoder_layers hold its size in
//            num_encoder_layers (≥ 1 there); from_json reads such a file by that rule. Written now:
//            num_decoder_layers, with num_encoder_layers 0.
// Defaults that depend on the family (optional fields; unset: the family's choice, FamilyDefaults):
//                      ENCODER      SEQ2SEQ      DECODER
//   norm_first         false        false        true
//   activation         relu         relu         gelu
//   positional         sinusoidal   sinusoidal   learned
//   scale_embeddings   false        true         false
//   tie_embeddings     false        false        true
// with_arch_defaults() makes them explicit (the trainer saves a model's config that way, so a saved
// config.json means the same whatever the defaults).
// Layer variants (each unset or at its default: torch.nn's layer exactly): the attention's head widths,
// biases and scale (head_dim, v_head_dim, qkv_bias, out_bias, attn_scale), a bias switch for all of a
// layer's projections and norms (bias) with per-part overrides (ffn_bias, norm_bias), the norm type,
// one set of layer weights shared by every layer of a stack (share_layers), stochastic depth
// (drop_path). They apply to every layer of the model, the decoder's two attentions alike
// (TransformerLayerOptions, tfm/modules/transformer.h, holds their meaning).
// Token conventions: pad_id is ignored everywhere (padding masks, loss); a DECODER may have none
// (pad_id −1: GPT-2's vocabulary, whose one special <|endoftext|> is bos_id = eos_id). Sources carry no bos/eos; the
// decoder input is bos + target, the decoder output target + eos. DECODER windows hold text only
// (no padding, no bos/eos): input window[0:T], targets window[1:T+1].
//
// To add a field: a member with its default here and one line in fields(); its check in validate().
// JSON reading and writing (config.json's "model") follow from fields().
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tfm/data/batching.h"
#include "tfm/enum_names.h"
#include "tfm/models/family.h"
#include "tfm/modules/basic.h"  // NormType
#include "tfm/modules/transformer.h"  // LayerOptions
#include "tfm/ops/activation.h"

namespace tfm {

// The layer options (d_model, nhead, dim_feedforward, dropout, layer_norm_eps, bias, the attention
// variant, ffn_bias, norm_bias, norm_type, share_layers, drop_path) are LayerOptions' members, keys and
// checks (tfm/modules/transformer.h), with this config's own defaults for the sizes.
struct ModelConfig : LayerOptions {
  ModelConfig() {
    d_model = 64;
    nhead = 4;
    dim_feedforward = 256;
  }
  Arch arch = Arch::ENCODER;
  int64_t src_vocab_size = 0, tgt_vocab_size = 0;  // filled in from the data by the trainer
  // The layers of each stack the family has (ModelFamily::encoder_layers / decoder_layers); the count
  // of a stack it lacks is not used and with_arch_defaults() sets it to 0.
  int64_t num_encoder_layers = 2, num_decoder_layers = 2;
  std::optional<Activation> activation;  // unset: the family's (table above)
  std::optional<bool> norm_first;        // unset: the family's
  std::optional<Positional> positional;  // unset: the family's
  // Embeddings ·√D or not; unset: the family's choice (SEQ2SEQ scales, ENCODER does not: it
  // adds the positional table to the raw N(0, 1) embedding, whose entries are already O(1) like the
  // table's, while √D lifts Xavier-initialised embeddings, O(1/√D), to that scale; DECODER does not,
  // as GPT-2: its N(0, 0.02) embeddings and learned table start at the same scale).
  std::optional<bool> scale_embeddings;
  // generator.weight shares the target embedding (SEQ2SEQ: tgt_embedding.weight, DECODER:
  // embedding.weight); unset: the family's. ENCODER: never (source and target vocabularies differ).
  std::optional<bool> tie_embeddings;
  // SEQ2SEQ only: the encoder embeds the source with the target embedding (one table for a joint
  // vocabulary; src_embedding.weight is then absent). Needs src_vocab_size == tgt_vocab_size.
  bool share_embeddings = false;
  int64_t max_len = 512;         // positional table length, the longest sequence (any positional);
                                 // DECODER: the context length (block size)
  int32_t pad_id = 0, bos_id = 1, eos_id = 2;

  // The family this config builds (tfm/models/family.h): the data it takes, its target layout, its
  // defaults.
  const ModelFamily& family() const { return model_family(arch); }
  data::TargetLayout target_layout() const { return family().layout; }
  // The optional fields above resolved by the family's defaults.
  bool scales_embeddings() const { return scale_embeddings.value_or(family().defaults.scale_embeddings); }
  bool norm_first_value() const { return norm_first.value_or(family().defaults.norm_first); }
  Activation activation_value() const { return activation.value_or(family().defaults.activation); }
  Positional positional_value() const { return positional.value_or(family().defaults.positional); }
  bool ties_embeddings() const { return tie_embeddings.value_or(family().defaults.tie_embeddings); }
  // This config with every family-dependent optional field set to its resolved value, and the layer
  // count of a stack the family does not have set to 0.
  ModelConfig with_arch_defaults() const;
  // The options every layer of the model is built with (batch_first; the layer variants above).
  TransformerLayerOptions layer_options() const;

  template <typename Self, typename Visit>
  static void fields(Self& c, Visit&& visit) {
    visit("arch", c.arch);
    visit("src_vocab_size", c.src_vocab_size);
    visit("tgt_vocab_size", c.tgt_vocab_size);
    LayerOptions::fields(c, visit);
    visit("num_encoder_layers", c.num_encoder_layers);
    visit("num_decoder_layers", c.num_decoder_layers);
    visit("activation", c.activation);
    visit("norm_first", c.norm_first);
    visit("positional", c.positional);
    visit("scale_embeddings", c.scale_embeddings);
    visit("tie_embeddings", c.tie_embeddings);
    visit("share_embeddings", c.share_embeddings);
    visit("max_len", c.max_len);
    visit("pad_id", c.pad_id);
    visit("bos_id", c.bos_id);
    visit("eos_id", c.eos_id);
  }

  std::string to_json() const;  // pretty JSON object, every field
  // Missing keys keep their defaults; unknown keys and wrong types throw naming the key.
  // With `validate_sizes` false the vocabulary sizes may be 0 (a template the trainer fills in).
  // A DECODER config with num_encoder_layers ≥ 1 is read by the rule of the files written before its
  // stack was num_decoder_layers: that count sizes the stack (see DECODER above).
  static ModelConfig from_json(const std::string& text, bool validate_sizes = true);
  // Throws std::invalid_argument "model config: ..." naming the bad field.
  void validate(bool check_sizes = true) const;
};

}  // namespace tfm
