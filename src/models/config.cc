// src/models/config.cc — ModelConfig: architecture defaults, JSON through fields(), validation.
#include "tfm/models/config.h"

#include <unistd.h>

#include <cstdio>
#include <stdexcept>

#include "json_fields.h"
#include "models/model_size.h"
#include "tfm/modules/transformer.h"

namespace tfm {

std::string ModelConfig::to_json() const {
  // The layer count of a stack the family does not have is written 0 (it is not used), so that a
  // language model's file is never read by the rule of the files written before (from_json).
  ModelConfig c = *this;
  if (!family().encoder_layers) c.num_encoder_layers = 0;
  if (!family().decoder_layers) c.num_decoder_layers = 0;
  JsonWriter w;
  fields(c, w);
  return w.j.dump(2);
}

ModelConfig ModelConfig::from_json(const std::string& text, bool validate_sizes) {
  const ordered_json j = parse_json(text, "model config");
  ModelConfig c;
  JsonReader r(j, "model config");
  fields(c, r);
  r.finish();
  // The rule of the files written before a language model's stack was num_decoder_layers: its
  // num_encoder_layers (≥ 1 there, 0 in files written since) sized the stack.
  if (c.arch == Arch::DECODER && c.num_encoder_layers > 0) {
    c.num_decoder_layers = c.num_encoder_layers;
    c.num_encoder_layers = 0;
  }
  c.validate(validate_sizes);
  return c;
}

std::string head_widths(const AttentionVariant& a) {
  return (a.head_dim ? ", head_dim " + std::to_string(*a.head_dim) : std::string()) +
         (a.v_head_dim ? ", v_head_dim " + std::to_string(*a.v_head_dim) : std::string());
}

void check_model_fits(const LayerOptions& o, long double layers, long double extra, const std::string& sizes) {
  // A layer's FFN matrices (2·D·F) and one attention's projections (D·H·(2·Dh + 2·Dv): q, k, v in, out).
  const long double D = static_cast<long double>(o.d_model), H = static_cast<long double>(o.nhead);
  const long double Dh = o.attention.head_dim ? static_cast<long double>(*o.attention.head_dim) : D / H;
  const long double Dv = o.attention.v_head_dim ? static_cast<long double>(*o.attention.v_head_dim) : Dh;
  const long double params = (o.share_layers ? 1.0L : layers) *
                                 (2.0L * D * static_cast<long double>(o.dim_feedforward) + D * H * 2.0L * (Dh + Dv)) +
                             extra;
  const long double pages = static_cast<long double>(sysconf(_SC_PHYS_PAGES));
  const long double memory = pages * static_cast<long double>(sysconf(_SC_PAGE_SIZE));
  if (pages <= 0 || 4.0L * params <= memory) return;
  char text[160];
  std::snprintf(text, sizeof text, "at least %.3Lg parameters (%.3Lg GB as float32), more than this machine's %.3Lg GB",
                params, 4.0L * params / 1e9L, memory / 1e9L);
  throw std::invalid_argument(sizes + " make a model of " + text);
}

void ModelConfig::validate(bool check_sizes) const {
  auto fail = [](const std::string& m) { throw std::invalid_argument("model config: " + m); };
  const ModelFamily& f = family();  // a value outside the enum throws
  const bool text = f.data == DataKind::TEXT;
  if (check_sizes && text && tgt_vocab_size <= 0)
    fail("tgt_vocab_size (the language model's vocabulary) must be positive, got " + std::to_string(tgt_vocab_size));
  if (check_sizes && !text && (src_vocab_size <= 0 || tgt_vocab_size <= 0))
    fail("src_vocab_size and tgt_vocab_size must be positive (got " + std::to_string(src_vocab_size) + ", " +
         std::to_string(tgt_vocab_size) + ")");
  if (f.encoder_layers && num_encoder_layers < 1)
    fail("num_encoder_layers must be at least 1, got " + std::to_string(num_encoder_layers));
  if (f.decoder_layers && num_decoder_layers < 1)
    fail("num_decoder_layers must be at least 1, got " + std::to_string(num_decoder_layers));
  if (max_len < 1)
    fail("max_len must be positive" +
         std::string(positional_value() == Positional::LEARNED ? " (the rows of the learned position table)" : "") +
         ", got " + std::to_string(max_len));
  if (!f.can_tie_embeddings && ties_embeddings())
    fail("tie_embeddings does not apply to arch " + std::string(enum_name(arch)) + " (it has no target embedding)");
  // Sharing needs two embedding tables to share: a source and a target side.
  if (share_embeddings && !(f.encoder_layers && f.decoder_layers))
    fail("share_embeddings needs an encoder–decoder (arch seq2seq: the encoder reads the decoder's embedding table)");
  if (check_sizes && share_embeddings && src_vocab_size != tgt_vocab_size)
    fail("share_embeddings needs one vocabulary: src_vocab_size " + std::to_string(src_vocab_size) +
         " differs from tgt_vocab_size " + std::to_string(tgt_vocab_size));
  if (check_sizes) {
    auto in_vocab = [&](int32_t id, int64_t v, const char* name, const char* vocab) {
      if (id < 0 || id >= v)
        fail(std::string(name) + " " + std::to_string(id) + " is outside the " + vocab + " vocabulary [0, " +
             std::to_string(v) + ")");
    };
    // A language model's windows never pad: its vocabulary may lack <pad> (pad_id -1, as GPT-2's).
    if (pad_id == -1 && !text)
      fail("pad_id -1 (no <pad> token): arch " + std::string(enum_name(arch)) +
           " pads its batches of sentences to one length and needs a <pad> token in its vocabularies (only a "
           "language model, arch decoder, can do without one)");
    if (pad_id != -1 || !text) {
      if (!text) in_vocab(pad_id, src_vocab_size, "pad_id", "source");
      in_vocab(pad_id, tgt_vocab_size, "pad_id", "target");
    }
    // Every target vocabulary has its specials (an encoder's predictions use none but pad).
    in_vocab(bos_id, tgt_vocab_size, "bos_id", "target");
    in_vocab(eos_id, tgt_vocab_size, "eos_id", "target");
    if (bos_id == pad_id || eos_id == pad_id) fail("bos_id and eos_id must differ from pad_id");
  }
  if (positional) enum_name(*positional);
  // The layer's own checks name the option (sizes, divisibility, head widths, scale, norm_bias with
  // rms_norm, drop_path), prefixed with ours.
  try {
    layer_options().validate();
  } catch (const std::exception& e) {
    fail(e.what());
  }
  const int64_t enc = f.encoder_layers ? num_encoder_layers : 0, dec = f.decoder_layers ? num_decoder_layers : 0;
  const long double tables = static_cast<long double>(d_model) *
                             (static_cast<long double>(text || share_embeddings ? 0 : src_vocab_size) +  // shared: one
                              static_cast<long double>(tgt_vocab_size) +
                              (positional_value() != Positional::NONE ? static_cast<long double>(max_len) : 0.0L));
  try {
    check_model_fits(layer_options(), static_cast<long double>(enc) + static_cast<long double>(dec), tables,
                     "num_encoder_layers " + std::to_string(enc) + ", num_decoder_layers " + std::to_string(dec) +
                         ", d_model " + std::to_string(d_model) + ", dim_feedforward " +
                         std::to_string(dim_feedforward) + head_widths(attention) +
                         (tables > 0 ? " and the embedding and position tables" : ""));
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  }
}

ModelConfig ModelConfig::with_arch_defaults() const {
  ModelConfig c = *this;
  c.activation = activation_value();
  c.norm_first = norm_first_value();
  c.positional = positional_value();
  c.scale_embeddings = scales_embeddings();
  c.tie_embeddings = ties_embeddings();
  if (!family().encoder_layers) c.num_encoder_layers = 0;
  if (!family().decoder_layers) c.num_decoder_layers = 0;
  return c;
}

TransformerLayerOptions ModelConfig::layer_options() const {
  TransformerLayerOptions o;
  static_cast<LayerOptions&>(o) = *this;  // every shared option, as it is
  o.activation = activation_value();
  o.norm_first = norm_first_value();
  o.batch_first = true;
  return o;
}

}  // namespace tfm
