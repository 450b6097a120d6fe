// src/models/seq2seq.cc — ModelConfig (JSON, validation) and Seq2SeqModel's two architectures.
//
// Reference models: tools/torch_models.py holds the same two models in PyTorch with the same
// attribute names, hence the same state_dict keys; tests/models/seq2seq_test.cc checks logits and
// a training curve against them.
//
// To add an architecture: add its name to ModelConfig::validate, build its modules in the
// constructor (registering them under their PyTorch attribute names), give it a branch in forward,
// and mirror it in tools/torch_models.py.
#include "tfm/models/seq2seq.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "models/seq2seq_impl.h"
#include "tfm/ops/linear.h"
#include "tfm/ops/loss.h"
#include "quote.h"

namespace tfm {

using nlohmann::json;

// ---- ModelConfig ----------------------------------------------------------------------------------
std::string ModelConfig::to_json() const {
  json j;
  j["arch"] = arch;
  j["src_vocab_size"] = src_vocab_size;
  j["tgt_vocab_size"] = tgt_vocab_size;
  j["d_model"] = d_model;
  j["nhead"] = nhead;
  j["num_encoder_layers"] = num_encoder_layers;
  j["num_decoder_layers"] = num_decoder_layers;
  j["dim_feedforward"] = dim_feedforward;
  j["dropout"] = dropout;
  j["activation"] = activation;
  j["norm_first"] = norm_first;
  j["layer_norm_eps"] = layer_norm_eps;
  j["tie_embeddings"] = tie_embeddings;
  j["max_len"] = max_len;
  j["pad_id"] = pad_id;
  j["bos_id"] = bos_id;
  j["eos_id"] = eos_id;
  return j.dump(2);
}

namespace {

template <typename T>
void read_key(const json& j, const char* key, T& out) {
  auto it = j.find(key);
  if (it == j.end()) return;  // missing: keep the default
  bool ok;
  if constexpr (std::is_same_v<T, bool>)
    ok = it->is_boolean();
  else if constexpr (std::is_same_v<T, std::string>)
    ok = it->is_string();
  else if constexpr (std::is_floating_point_v<T>)
    ok = it->is_number();
  else
    ok = it->is_number_integer();
  if (!ok) throw std::invalid_argument("model config: key '" + std::string(key) + "' has the wrong type: " + it->dump());
  out = it->get<T>();
}

}  // namespace

// Missing keys keep their defaults (like PyTorch's default arguments); an unknown key or a value of
// the wrong type throws naming the key, so a typo never passes silently.
ModelConfig ModelConfig::from_json(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("model config: bad JSON: ") + e.what());
  }
  if (!j.is_object()) throw std::invalid_argument("model config: expected a JSON object, got " + j.dump());
  static const char* kKeys[] = {"arch",           "src_vocab_size", "tgt_vocab_size",     "d_model",
                                "nhead",          "num_encoder_layers", "num_decoder_layers", "dim_feedforward",
                                "dropout",        "activation",     "norm_first",         "layer_norm_eps",
                                "tie_embeddings", "max_len",        "pad_id",             "bos_id",
                                "eos_id"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* k : kKeys) known = known || it.key() == k;
    if (!known) throw std::invalid_argument("model config: unknown key " + quote_name(it.key()));
  }
  ModelConfig c;
  read_key(j, "arch", c.arch);
  read_key(j, "src_vocab_size", c.src_vocab_size);
  read_key(j, "tgt_vocab_size", c.tgt_vocab_size);
  read_key(j, "d_model", c.d_model);
  read_key(j, "nhead", c.nhead);
  read_key(j, "num_encoder_layers", c.num_encoder_layers);
  read_key(j, "num_decoder_layers", c.num_decoder_layers);
  read_key(j, "dim_feedforward", c.dim_feedforward);
  read_key(j, "dropout", c.dropout);
  read_key(j, "activation", c.activation);
  read_key(j, "norm_first", c.norm_first);
  read_key(j, "layer_norm_eps", c.layer_norm_eps);
  read_key(j, "tie_embeddings", c.tie_embeddings);
  read_key(j, "max_len", c.max_len);
  read_key(j, "pad_id", c.pad_id);
  read_key(j, "bos_id", c.bos_id);
  read_key(j, "eos_id", c.eos_id);
  c.validate();
  return c;
}

void ModelConfig::validate() const {
  auto fail = [](const std::string& m) { throw std::invalid_argument("model config: " + m); };
  if (arch != "encoder" && arch != "seq2seq") fail("arch must be \"encoder\" or \"seq2seq\", got \"" + arch + "\"");
  if (src_vocab_size <= 0 || tgt_vocab_size <= 0)
    fail("src_vocab_size and tgt_vocab_size must be positive (got " + std::to_string(src_vocab_size) + ", " +
         std::to_string(tgt_vocab_size) + ")");
  if (num_encoder_layers < 1) fail("num_encoder_layers must be at least 1, got " + std::to_string(num_encoder_layers));
  if (arch == "seq2seq" && num_decoder_layers < 1)
    fail("num_decoder_layers must be at least 1, got " + std::to_string(num_decoder_layers));
  if (max_len < 1) fail("max_len must be positive, got " + std::to_string(max_len));
  if (!(dropout >= 0.0f && dropout < 1.0f)) fail("dropout must be in [0, 1), got " + std::to_string(dropout));
  if (tie_embeddings && arch != "seq2seq") fail("tie_embeddings needs arch \"seq2seq\"");
  auto in_vocab = [&](int32_t id, int64_t v, const char* name, const char* vocab) {
    if (id < 0 || id >= v)
      fail(std::string(name) + " " + std::to_string(id) + " is outside the " + vocab + " vocabulary [0, " +
           std::to_string(v) + ")");
  };
  in_vocab(pad_id, src_vocab_size, "pad_id", "source");
  in_vocab(pad_id, tgt_vocab_size, "pad_id", "target");
  if (arch == "seq2seq") {
    in_vocab(bos_id, tgt_vocab_size, "bos_id", "target");
    in_vocab(eos_id, tgt_vocab_size, "eos_id", "target");
    if (bos_id == pad_id || eos_id == pad_id) fail("bos_id and eos_id must differ from pad_id");
  }
  TransformerLayerOptions o;
  o.d_model = d_model;
  o.nhead = nhead;
  o.dim_feedforward = dim_feedforward;
  o.dropout = dropout;
  o.activation = activation;
  o.layer_norm_eps = layer_norm_eps;
  try {
    o.validate();
  } catch (const std::exception& e) {
    fail(e.what());
  }
}

// ---- modules --------------------------------------------------------------------------------------
OutputProjection::OutputProjection(int64_t d_model, int64_t vocab, const Tensor* tied, Generator& gen) {
  // nn.Linear's initialisation, U(±1/√D) for weight and bias, drawn in that order.
  const float bound = 1.0f / std::sqrt(static_cast<float>(d_model));
  if (tied) {
    weight = *tied;
  } else {
    weight = Tensor::empty({vocab, d_model});
    init_uniform(weight, -bound, bound, gen);
    register_parameter("weight", weight);
  }
  bias = Tensor::empty({vocab});
  init_uniform(bias, -bound, bound, gen);
  register_parameter("bias", bias);
}

Tensor OutputProjection::forward(const Tensor& x) const { return ops::linear(x, weight, bias); }

Tensor padding_mask(const std::vector<int32_t>& ids, int64_t B, int64_t T, int32_t pad_id) {
  std::vector<uint8_t> m(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) m[i] = ids[i] == pad_id ? 1 : 0;
  return Tensor::from_bool({B, T}, m);
}

Tensor Seq2SeqModel::Impl::embed(const Embedding& emb, const std::vector<int32_t>& ids, int64_t B, int64_t T) const {
  Tensor x = emb.forward(ids, {B, T});  // (B, T, D)
  if (embed_scale != 1.0f) x = ops::mul_scalar(x, embed_scale);
  return dropout.forward(pe.forward(x, /*batch_first=*/true));
}

static TransformerLayerOptions layer_options(const ModelConfig& c) {
  TransformerLayerOptions o;
  o.d_model = c.d_model;
  o.nhead = c.nhead;
  o.dim_feedforward = c.dim_feedforward;
  o.dropout = c.dropout;
  o.activation = c.activation;
  o.layer_norm_eps = c.layer_norm_eps;
  o.batch_first = true;
  o.norm_first = c.norm_first;
  return o;
}

static const ModelConfig& validated(const ModelConfig& c) {
  c.validate();
  return c;
}

// Construction order = the PyTorch reference's attribute order, so that both draw their
// initialisation in a comparable order (the weights are compared through checkpoints anyway).
//
// "encoder" — the reverse-a-sequence notebook's model: nn.Embedding → PositionalEncoding (with
//   dropout) → nn.TransformerEncoder → nn.Linear, PyTorch's default initialisation for each.
//   No √D scaling of the embedding: that notebook adds the positional table to the raw N(0, 1)
//   embedding, whose entries are already O(1) like the table's (√D scaling exists to lift
//   xavier-initialised embeddings, O(1/√D), to the table's scale — the seq2seq case). The stack has
//   a final LayerNorm (key encoder.norm.*) only with norm_first, where the residual stream is
//   otherwise never normalised; post-norm layers end normalised already (nn.TransformerEncoder's
//   default norm=None).
// "seq2seq" — the build_transformer notebook's model: embeddings ·√D, one PositionalEncoding
//   (shared, with dropout), nn.Transformer, generator nn.Linear; then xavier_uniform_ on every
//   parameter with more than one dimension (embeddings and generator included), as the notebook
//   does over model.parameters().
Seq2SeqModel::Seq2SeqModel(const ModelConfig& config, Generator& gen)
    : config_(validated(config)), impl_(std::make_unique<Impl>(config_, gen)) {
  const ModelConfig& c = config_;
  Impl& m = *impl_;
  const TransformerLayerOptions o = layer_options(c);
  if (c.arch == "encoder") {
    m.embedding = std::make_unique<Embedding>(c.src_vocab_size, c.d_model, -1, gen);
    m.encoder = std::make_unique<TransformerEncoder>(o, c.num_encoder_layers, c.norm_first, gen);
    m.generator = std::make_unique<OutputProjection>(c.d_model, c.tgt_vocab_size, nullptr, gen);
    m.embed_scale = 1.0f;
    register_module("embedding", *m.embedding);
    register_module("encoder", *m.encoder);
  } else {
    m.transformer = std::make_unique<Transformer>(o, c.num_encoder_layers, c.num_decoder_layers, gen);
    m.src_embedding = std::make_unique<Embedding>(c.src_vocab_size, c.d_model, -1, gen);
    m.tgt_embedding = std::make_unique<Embedding>(c.tgt_vocab_size, c.d_model, -1, gen);
    m.generator = std::make_unique<OutputProjection>(c.d_model, c.tgt_vocab_size,
                                                     c.tie_embeddings ? &m.tgt_embedding->weight : nullptr, gen);
    // √D as PyTorch computes `x * math.sqrt(D)`: the double rounded to float once.
    m.embed_scale = static_cast<float>(std::sqrt(static_cast<double>(c.d_model)));
    register_module("src_embedding", *m.src_embedding);
    register_module("tgt_embedding", *m.tgt_embedding);
    register_module("transformer", *m.transformer);
  }
  register_module("generator", *m.generator);
  register_module("positional_encoding", m.pe);  // no parameters: only for train()/eval()
  register_module("dropout", m.dropout);
  if (c.arch == "seq2seq")
    visit_parameters([&](const std::string&, Tensor& t) {
      if (t.dim() > 1) init_xavier_uniform(t, gen);
    });
}

Seq2SeqModel::~Seq2SeqModel() = default;

static void check_batch(const TokenBatch& b, const ModelConfig& c) {
  auto fail = [](const std::string& m) { throw std::invalid_argument("TokenBatch: " + m); };
  if (b.B <= 0 || b.S <= 0) fail("B and S must be positive (got " + std::to_string(b.B) + ", " + std::to_string(b.S) + ")");
  if (static_cast<int64_t>(b.src.size()) != b.B * b.S)
    fail("src has " + std::to_string(b.src.size()) + " ids, expected B·S = " + std::to_string(b.B * b.S));
  if (b.S > c.max_len) fail("source length " + std::to_string(b.S) + " exceeds max_len " + std::to_string(c.max_len));
  if (c.arch == "encoder") {
    if (!b.tgt_out.empty() && static_cast<int64_t>(b.tgt_out.size()) != b.B * b.S)
      fail("encoder arch: tgt_out has " + std::to_string(b.tgt_out.size()) + " ids, expected B·S = " +
           std::to_string(b.B * b.S) + " (one target per source position)");
    return;
  }
  if (b.T <= 0) fail("T must be positive for arch seq2seq");
  if (b.T > c.max_len) fail("target length " + std::to_string(b.T) + " exceeds max_len " + std::to_string(c.max_len));
  if (static_cast<int64_t>(b.tgt_in.size()) != b.B * b.T)
    fail("tgt_in has " + std::to_string(b.tgt_in.size()) + " ids, expected B·T = " + std::to_string(b.B * b.T));
  if (!b.tgt_out.empty() && static_cast<int64_t>(b.tgt_out.size()) != b.B * b.T)
    fail("tgt_out has " + std::to_string(b.tgt_out.size()) + " ids, expected B·T = " + std::to_string(b.B * b.T));
}

Tensor Seq2SeqModel::forward(const TokenBatch& b) const {
  check_batch(b, config_);
  const Impl& m = *impl_;
  const int32_t pad = config_.pad_id;
  const Tensor src_kpm = padding_mask(b.src, b.B, b.S, pad);  // (B, S)
  if (config_.arch == "encoder") {
    const Tensor x = m.embed(*m.embedding, b.src, b.B, b.S);                  // (B, S, D)
    const Tensor h = m.encoder->forward(x, Tensor(), src_kpm, false);        // (B, S, D)
    return m.generator->forward(h);                                          // (B, S, V)
  }
  const Tensor src = m.embed(*m.src_embedding, b.src, b.B, b.S);     // (B, S, D)
  const Tensor tgt = m.embed(*m.tgt_embedding, b.tgt_in, b.B, b.T);  // (B, T, D)
  const Tensor tgt_kpm = padding_mask(b.tgt_in, b.B, b.T, pad);      // (B, T)
  const Tensor h = m.transformer->forward(src, tgt, Tensor(), Tensor(), Tensor(), src_kpm, tgt_kpm, src_kpm,
                                          /*src_is_causal=*/false, /*tgt_is_causal=*/true);  // (B, T, D)
  return m.generator->forward(h);  // (B, T, V)
}

Tensor Seq2SeqModel::loss(const TokenBatch& b, float label_smoothing) const {
  const Tensor logits = forward(b);  // (B, T|S, V)
  const int64_t rows = logits.size(0) * logits.size(1);
  if (static_cast<int64_t>(b.tgt_out.size()) != rows)
    throw std::invalid_argument("TokenBatch: tgt_out has " + std::to_string(b.tgt_out.size()) + " ids, expected " +
                                std::to_string(rows));
  return ops::cross_entropy(logits.reshape({rows, config_.tgt_vocab_size}), b.tgt_out, config_.pad_id,
                            label_smoothing);
}

}  // namespace tfm
