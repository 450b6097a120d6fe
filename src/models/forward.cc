// src/models/forward.cc — LoadedModule (include/tfm/models/forward.h): a ModuleConfig built into its
// module, called on named inputs; and the `tfm forward` contract on top (load_module,
// read_forward_inputs, run_forward).
//
// Each module kind has a ModuleCall (the module and the call of its forward) that maps the named inputs
// onto its forward's arguments after checking names, dtypes and shapes (every error names the tensor and
// starts with the inputs' source). To add a kind: its arguments in arguments_of, a ModuleCall below and its case in
// make_call and differentiable_inputs_of.
#include "tfm/models/forward.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <stdexcept>

#include "quote.h"
#include "tfm/autocast.h"
#include "tfm/autograd.h"
#include "tfm/inference.h"
#include "tfm/io/safetensors.h"
#include "tfm/modules/transformer.h"

namespace tfm {
namespace {

// The arguments of a module kind's forward, by the names PyTorch's forward gives them (forward.h's table), the
// required ones first: what its call checks the inputs against, and (all kinds together) the names
// read_forward_inputs knows.
struct Arguments {
  std::vector<const char*> names;
  size_t required;  // names[0, required) must be given

  bool takes(const std::string& name) const {
    return std::any_of(names.begin(), names.end(), [&](const char* a) { return name == a; });
  }
};

const Arguments& arguments_of(ModuleKind kind) {
  static const Arguments mha{{"query", "key", "value", "attn_mask", "key_padding_mask", "is_causal"}, 1};
  static const Arguments enc_layer{{"src", "src_mask", "src_key_padding_mask", "is_causal"}, 1};
  static const Arguments enc{{"src", "mask", "src_key_padding_mask", "is_causal"}, 1};
  static const Arguments dec{{"tgt", "memory", "tgt_mask", "memory_mask", "tgt_key_padding_mask",
                              "memory_key_padding_mask", "tgt_is_causal", "memory_is_causal"},
                             2};
  static const Arguments transformer{
      {"src", "tgt", "src_mask", "tgt_mask", "memory_mask", "src_key_padding_mask", "tgt_key_padding_mask",
       "memory_key_padding_mask", "src_is_causal", "tgt_is_causal", "memory_is_causal"},
      2};
  switch (kind) {
    case ModuleKind::MULTIHEAD_ATTENTION:
      return mha;
    case ModuleKind::TRANSFORMER_ENCODER_LAYER:
      return enc_layer;
    case ModuleKind::TRANSFORMER_ENCODER:
      return enc;
    case ModuleKind::TRANSFORMER_DECODER_LAYER:
    case ModuleKind::TRANSFORMER_DECODER:
      return dec;
    case ModuleKind::TRANSFORMER:
      return transformer;
  }
  throw std::invalid_argument("arguments_of: not a ModuleKind");
}

// Named inputs and the name of where they came from (a file path, or "inputs"), for messages.
struct Inputs {
  const NamedTensors& in;
  const std::string& source;
  TorchCall as = TorchCall::NO_GRAD;  // forward()'s; call() and forward_backward() decide by grad_enabled()

  bool has(const char* name) const { return in.contains(name); }
  const Tensor& opt(const char* name) const {
    static const Tensor none;
    auto it = in.find(name);
    return it == in.end() ? none : it->second;
  }
  const Tensor& req(const char* name) const {
    auto it = in.find(name);
    if (it == in.end() || !it->second.defined())
      throw std::invalid_argument(source + ": missing tensor '" + name + "'");
    return it->second;
  }
  bool flag(const char* name) const {
    auto it = in.find(name);
    if (it == in.end()) return false;
    const Tensor& t = it->second;
    if (t.dtype() != DType::BOOL || t.dim() != 0)
      throw std::invalid_argument(source + ": '" + name + "' must be a 0-dimensional BOOL tensor, got " + describe(t));
    return t.data_bool()[0] != 0;
  }
  // Every name among `args`, and the required ones present; a missing argument is reported before a stray one.
  void check_names(const Arguments& args) const {
    for (size_t i = 0; i < args.required; ++i) req(args.names[i]);
    for (auto& [k, v] : in) {
      if (args.takes(k)) continue;
      std::string list;
      for (const char* a : args.names) list += std::string(list.empty() ? "" : ", ") + a;
      throw std::invalid_argument(source + ": unexpected tensor " + quote_name(k) + " (expected some of: " + list +
                                  ")");
    }
  }
};

// Shape checks of the forward arguments, each naming the argument: a sequence is (B, T, E) when
// batch_first, else (T, B, E); masks follow nn.MultiheadAttention's rules.
struct ShapeChecker {
  const Inputs& in;
  int64_t E, H;
  bool batch_first;
  int64_t B = -1;

  int64_t sequence(const char* name, int64_t width = -1) {  // returns T; width: the last dimension (-1: E)
    const Tensor& t = in.req(name);
    const std::string layout = batch_first ? "(B, T, " : "(T, B, ";
    if (width < 0) width = E;
    if (t.dtype() != DType::FLOAT32)
      throw std::invalid_argument(in.source + ": tensor '" + name + "' must be Float32, got " + describe(t));
    if (t.dim() != 3 || t.size(2) != width)
      throw std::invalid_argument(in.source + ": tensor '" + name + "' has shape " + shape_str(t.shape()) +
                                  ", expected " + layout + std::to_string(width) + ")");
    const int64_t b = batch_first ? t.size(0) : t.size(1);
    if (B >= 0 && b != B)
      throw std::invalid_argument(in.source + ": tensor '" + name + "' has batch size " + std::to_string(b) +
                                  ", expected " + std::to_string(B) + " (shape " + shape_str(t.shape()) + ")");
    B = b;
    return batch_first ? t.size(1) : t.size(0);
  }
  void attn_mask(const char* name, int64_t L, int64_t S) {
    if (!in.has(name)) return;
    const Shape& s = in.opt(name).shape();
    if (s == Shape{L, S} || s == Shape{B * H, L, S}) return;
    throw std::invalid_argument(in.source + ": tensor '" + name + "' has shape " + shape_str(s) + ", expected " +
                                shape_str({L, S}) + " or " + shape_str({B * H, L, S}));
  }
  void padding_mask(const char* name, int64_t S) {
    if (!in.has(name)) return;
    const Shape& s = in.opt(name).shape();
    if (s == Shape{B, S}) return;
    throw std::invalid_argument(in.source + ": tensor '" + name + "' has shape " + shape_str(s) + ", expected " +
                                shape_str({B, S}));
  }
};

// ---- nn.TransformerEncoder's nested-tensor fast path ----------------------------------------------
// PyTorch's TransformerEncoder.forward, with enable_nested_tensor, runs a batch given only a src_key_padding_mask
// as a nested tensor of each row's unpadded positions, and pads the stack's output with 0 before its final norm
// (which then gives its bias there); the other positions are what the regular path computes, and nothing src holds
// at a padded position reaches them (not even a NaN). It does so when all of PyTorch's conditions hold: the first
// layer in eval mode, post-norm, batch_first, ReLU or GELU, norm eps equal (tfm's one eps), an even head count; a
// 3-D src, no mask (nor is_causal), no autocast; gradients disabled or nothing requiring one (forward() is told
// which by its TorchCall; call() and forward_backward() read grad_enabled() and what requires one: src, the first
// layer's parameters); and with mask_check, a left-aligned mask (each row's padding at its end). Without mask_check
// a row with n unpadded positions is its first n, as torch._nested_tensor_from_mask takes them. A float mask pads
// where it is not 0 (PyTorch converts it with logical_not). tfm takes the path on a layer torch.nn builds (no tfm
// variant), and keeps the input's shape: PyTorch 1.13 also drops the positions padded in every row from its output,
// PyTorch 2 keeps them as here. One difference stays: PyTorch's fast path runs nn.GELU(approximate="tanh") as the
// exact GELU (its flag says only "GELU"); tfm runs the module's tanh form there too (about 1e-4 apart).

// The config's two switches (ModuleConfig::enable_nested_tensor, mask_check), all the path reads of it.
struct NestedSwitches {
  bool enable = true, mask_check = true;
  explicit NestedSwitches(const ModuleConfig& c) : enable(c.enable_nested_tensor), mask_check(c.mask_check) {}
};

// Returns each row's sequence length (its first positions) when the path is taken, else nothing.
std::vector<int64_t> nested_lengths(NestedSwitches c, TorchCall as, const TransformerEncoder& enc, const Tensor& src,
                                    const Tensor& mask, const Tensor& kpm, bool is_causal) {
  if (!c.enable || as == TorchCall::AUTOGRAD || !kpm.defined() || mask.defined() || is_causal || enc.num_layers() == 0)
    return {};
  const TransformerLayerOptions& o = enc.layer(0).options;
  const AttentionVariant& v = o.attention;
  const bool torch_layer = !v.head_dim && !v.v_head_dim && v.qkv_bias.value_or(o.bias) == o.bias &&
                           v.out_bias.value_or(o.bias) == o.bias && !v.attn_scale && o.has_ffn_bias() == o.bias &&
                           o.has_norm_bias() == o.bias && o.norm_type == NormType::LAYER_NORM && !o.share_layers;
  const bool relu_or_gelu =
      o.activation == Activation::RELU || o.activation == Activation::GELU || o.activation == Activation::GELU_TANH;
  if (!torch_layer || !relu_or_gelu || o.norm_first || !o.batch_first || o.nhead % 2 != 0 ||
      enc.layer(0).is_training() || src.dim() != 3 || Autocast::current_precision() != Precision::FLOAT32)
    return {};
  if (grad_enabled()) {
    bool wants_grad = src.requires_grad();
    const_cast<TransformerEncoderLayer&>(enc.layer(0)).visit_parameters(
        [&](const std::string&, Tensor& p) { wants_grad = wants_grad || p.requires_grad(); });
    if (wants_grad) return {};
  }
  const int64_t B = kpm.size(0), S = kpm.size(1);
  std::vector<int64_t> lengths(static_cast<size_t>(B), 0);
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = 0;
    bool padded_before = false, left_aligned = true;
    for (int64_t s = 0; s < S; ++s) {
      const bool pad = kpm.dtype() == DType::BOOL ? kpm.data_bool()[b * S + s] != 0 : !(kpm.data()[b * S + s] == 0.0f);
      if (!pad) {
        ++n;
        left_aligned = left_aligned && !padded_before;
      }
      padded_before = padded_before || pad;
    }
    if (c.mask_check && !left_aligned) return {};  // PyTorch's regular path
    lengths[static_cast<size_t>(b)] = n;
  }
  return lengths;
}

// nn.TransformerEncoder's forward as PyTorch runs it: the nested-tensor path where it applies, else enc.forward.
Tensor encoder_forward(NestedSwitches c, TorchCall as, const TransformerEncoder& enc, const Tensor& src,
                       const Tensor& mask, const Tensor& kpm, bool is_causal) {
  const std::vector<int64_t> lengths = nested_lengths(c, as, enc, src, mask, kpm, is_causal);
  if (lengths.empty()) return enc.forward(src, mask, kpm, is_causal);
  const int64_t B = src.size(0), S = src.size(1), D = src.size(2);
  std::vector<uint8_t> pad(static_cast<size_t>(B * S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) pad[static_cast<size_t>(b * S + s)] = s >= lengths[static_cast<size_t>(b)];
  const Tensor prefix = Tensor::from_bool({B, S}, pad);  // each row's sequence: its first lengths[b] positions
  // The padded positions enter the layers as 0. The nested tensor never holds them, so no value there reaches
  // PyTorch's output; here they are masked keys, whose attention weight is exactly 0, but a NaN, an infinity or
  // a value whose score overflows (an uninitialised padding buffer may hold any) would still make NaN of every
  // kept position's sum. Where their products stay finite the kept positions come out the same bits either way
  // (each such term is 0·v = 0).
  Tensor x = src;
  if (std::any_of(lengths.begin(), lengths.end(), [S](int64_t n) { return n < S; })) {
    x = Tensor::empty(src.shape());  // a new tensor: src is the caller's
    for (int64_t b = 0; b < B; ++b) {
      const int64_t kept = lengths[static_cast<size_t>(b)] * D;
      std::copy_n(src.data() + b * S * D, kept, x.data() + b * S * D);
      std::fill(x.data() + b * S * D + kept, x.data() + (b + 1) * S * D, 0.0f);
    }
  }
  for (int64_t l = 0; l < enc.num_layers(); ++l) x = enc.layer(l).forward(x, {}, prefix, false);
  Tensor y = Tensor::zeros(x.shape());  // the nested output padded with 0 (a new tensor: x may be shared)
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(x.data() + b * S * D, lengths[static_cast<size_t>(b)] * D, y.data() + b * S * D);
  return enc.norm ? enc.norm->forward(y) : y;
}

// One module kind behind a uniform call.
struct ModuleCall {
  virtual ~ModuleCall() = default;
  virtual Module& module() = 0;
  virtual Tensor forward(const Inputs& in) const = 0;
};

template <typename M>
struct CallOf : ModuleCall {
  std::unique_ptr<M> m;
  explicit CallOf(std::unique_ptr<M> module) : m(std::move(module)) {}
  Module& module() override { return *m; }
};

struct MhaCall : CallOf<MultiheadAttention> {
  using CallOf::CallOf;
  Tensor forward(const Inputs& in) const override {
    in.check_names(arguments_of(ModuleKind::MULTIHEAD_ATTENTION));
    ShapeChecker c{in, m->embed_dim, m->num_heads, m->batch_first};
    if (m->separate_projections())  // key and value default to the query, whose width is embed_dim
      for (const char* name : {"key", "value"})
        if (!in.has(name))
          throw std::invalid_argument(in.source + ": tensor '" + name + "' is required (kdim " +
                                      std::to_string(m->kdim) + ", vdim " + std::to_string(m->vdim) + ", embed_dim " +
                                      std::to_string(m->embed_dim) + ")");
    const int64_t L = c.sequence("query");
    const int64_t S = in.has("key") ? c.sequence("key", m->kdim) : L;
    if (in.has("value") && c.sequence("value", m->vdim) != S)
      throw std::invalid_argument(in.source + ": tensors 'key' and 'value' have different lengths (" +
                                  std::to_string(S) + " and " + std::to_string(c.sequence("value", m->vdim)) + ")");
    c.attn_mask("attn_mask", L, S);
    c.padding_mask("key_padding_mask", S);
    const Tensor& q = in.req("query");
    const Tensor& k = in.has("key") ? in.req("key") : q;
    const Tensor& v = in.has("value") ? in.req("value") : k;
    ops::AttentionMasks masks;
    masks.attn_mask = in.opt("attn_mask");
    masks.key_padding_mask = in.opt("key_padding_mask");
    masks.is_causal = in.flag("is_causal");
    return m->forward(q, k, v, masks);
  }
};

struct EncLayerCall : CallOf<TransformerEncoderLayer> {
  using CallOf::CallOf;
  Tensor forward(const Inputs& in) const override {
    in.check_names(arguments_of(ModuleKind::TRANSFORMER_ENCODER_LAYER));
    const auto& o = m->options;
    ShapeChecker c{in, o.d_model, o.nhead, o.batch_first};
    const int64_t S = c.sequence("src");
    c.attn_mask("src_mask", S, S);
    c.padding_mask("src_key_padding_mask", S);
    return m->forward(in.req("src"), in.opt("src_mask"), in.opt("src_key_padding_mask"), in.flag("is_causal"));
  }
};

struct EncCall : CallOf<TransformerEncoder> {
  EncCall(std::unique_ptr<TransformerEncoder> module, const ModuleConfig& config)
      : CallOf(std::move(module)), nested(config) {}
  NestedSwitches nested;
  Tensor forward(const Inputs& in) const override {
    in.check_names(arguments_of(ModuleKind::TRANSFORMER_ENCODER));
    if (!m->layers.empty()) {
      const auto& o = m->layers[0]->options;
      ShapeChecker c{in, o.d_model, o.nhead, o.batch_first};
      const int64_t S = c.sequence("src");
      c.attn_mask("mask", S, S);
      c.padding_mask("src_key_padding_mask", S);
    }
    return encoder_forward(nested, in.as, *m, in.req("src"), in.opt("mask"), in.opt("src_key_padding_mask"),
                           in.flag("is_causal"));
  }
};

// TransformerDecoderLayer and TransformerDecoder take the same arguments.
template <typename M>
struct DecCall : CallOf<M> {
  using CallOf<M>::CallOf;
  const TransformerLayerOptions* options() const {
    if constexpr (std::is_same_v<M, TransformerDecoderLayer>) {
      return &this->m->options;
    } else {
      return this->m->layers.empty() ? nullptr : &this->m->layers[0]->options;
    }
  }
  Tensor forward(const Inputs& in) const override {
    in.check_names(arguments_of(ModuleKind::TRANSFORMER_DECODER));
    if (const TransformerLayerOptions* o = options()) {
      ShapeChecker c{in, o->d_model, o->nhead, o->batch_first};
      const int64_t T = c.sequence("tgt");
      const int64_t S = c.sequence("memory");
      c.attn_mask("tgt_mask", T, T);
      c.attn_mask("memory_mask", T, S);
      c.padding_mask("tgt_key_padding_mask", T);
      c.padding_mask("memory_key_padding_mask", S);
    }
    return this->m->forward(in.req("tgt"), in.req("memory"), in.opt("tgt_mask"), in.opt("memory_mask"),
                            in.opt("tgt_key_padding_mask"), in.opt("memory_key_padding_mask"),
                            in.flag("tgt_is_causal"), in.flag("memory_is_causal"));
  }
};

struct TransformerCall : CallOf<Transformer> {
  TransformerCall(std::unique_ptr<Transformer> module, const ModuleConfig& config)
      : CallOf(std::move(module)), nested(config) {}
  NestedSwitches nested;
  Tensor forward(const Inputs& in) const override {
    in.check_names(arguments_of(ModuleKind::TRANSFORMER));
    const auto& o = m->encoder.layers.empty() ? m->decoder.layers.at(0)->options : m->encoder.layers[0]->options;
    ShapeChecker c{in, o.d_model, o.nhead, o.batch_first};
    const int64_t S = c.sequence("src");
    const int64_t T = c.sequence("tgt");
    c.attn_mask("src_mask", S, S);
    c.attn_mask("tgt_mask", T, T);
    c.attn_mask("memory_mask", T, S);
    c.padding_mask("src_key_padding_mask", S);
    c.padding_mask("tgt_key_padding_mask", T);
    c.padding_mask("memory_key_padding_mask", S);
    // nn.Transformer.forward: memory = encoder(src, mask=src_mask, src_key_padding_mask=...), then the decoder.
    const Tensor memory = encoder_forward(nested, in.as, m->encoder, in.req("src"), in.opt("src_mask"),
                                          in.opt("src_key_padding_mask"), in.flag("src_is_causal"));
    return m->decoder.forward(in.req("tgt"), memory, in.opt("tgt_mask"), in.opt("memory_mask"),
                              in.opt("tgt_key_padding_mask"), in.opt("memory_key_padding_mask"),
                              in.flag("tgt_is_causal"), in.flag("memory_is_causal"));
  }
};

std::unique_ptr<ModuleCall> make_call(const ModuleConfig& c, Generator& gen) {
  switch (c.kind) {
    case ModuleKind::MULTIHEAD_ATTENTION: {
      const AttentionOptions& a = c.attention;
      return std::make_unique<MhaCall>(std::make_unique<MultiheadAttention>(a.embed_dim, a.num_heads, a.dropout, a.bias,
                                                                            a.batch_first, a.variant, a.kdim, a.vdim,
                                                                            a.add_bias_kv, a.add_zero_attn, gen));
    }
    case ModuleKind::TRANSFORMER_ENCODER_LAYER:
      return std::make_unique<EncLayerCall>(std::make_unique<TransformerEncoderLayer>(c.layer, gen));
    case ModuleKind::TRANSFORMER_ENCODER:
      return std::make_unique<EncCall>(std::make_unique<TransformerEncoder>(c.layer, c.num_layers, c.norm, gen), c);
    case ModuleKind::TRANSFORMER_DECODER_LAYER:
      return std::make_unique<DecCall<TransformerDecoderLayer>>(std::make_unique<TransformerDecoderLayer>(c.layer, gen));
    case ModuleKind::TRANSFORMER_DECODER:
      return std::make_unique<DecCall<TransformerDecoder>>(
          std::make_unique<TransformerDecoder>(c.layer, c.num_layers, c.norm, gen));
    case ModuleKind::TRANSFORMER:
      return std::make_unique<TransformerCall>(
          std::make_unique<Transformer>(c.layer, c.num_encoder_layers, c.num_decoder_layers, gen), c);
  }
  throw std::invalid_argument("LoadedModule: not a ModuleKind");
}

std::vector<std::string> differentiable_inputs_of(ModuleKind kind) {
  switch (kind) {
    case ModuleKind::MULTIHEAD_ATTENTION: return {"query", "key", "value"};
    case ModuleKind::TRANSFORMER_ENCODER_LAYER:
    case ModuleKind::TRANSFORMER_ENCODER: return {"src"};
    case ModuleKind::TRANSFORMER_DECODER_LAYER:
    case ModuleKind::TRANSFORMER_DECODER: return {"tgt", "memory"};
    case ModuleKind::TRANSFORMER: return {"src", "tgt"};
  }
  return {};
}

bool is_floating(const std::string& dtype) {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64";
}

}  // namespace

// ---- LoadedModule ---------------------------------------------------------------------------------
struct LoadedModule::Impl {
  Generator own;  // for_weights: the module's generator (a stable address: Impl lives on the heap)
  ModuleConfig config;
  Precision precision;
  std::unique_ptr<ModuleCall> call;
  std::vector<std::string> differentiable_inputs;
  PackedWeightCache packed;  // forward()'s packed Linear weights, kept across calls
  std::string weights_source = "weights";  // load_weights' source, for messages
  bool finite_checked = false;             // int8: the weights were found finite since they last changed
  bool unset = false;  // for_weights: no values yet, until load_weights (or module(), whose caller sets them)

  void require_weights() const {
    if (unset)
      throw std::invalid_argument(
          "LoadedModule: built by for_weights, its parameters hold no values yet: call "
          "load_weights (or set them through module()) before computing");
  }

  // The module of `config` built with initialisers drawing from `gen`, in eval mode.
  void build(const ModuleConfig& c, Precision p, Generator& gen) {
    config = c;
    precision = p;
    call = make_call(c, gen);
    differentiable_inputs = differentiable_inputs_of(c.kind);
    call->module().eval();
  }
};

LoadedModule::LoadedModule(const ModuleConfig& config, Precision precision, Generator& gen)
    : impl_(std::make_unique<Impl>()) {
  impl_->build(config, precision, gen);
}
LoadedModule::LoadedModule(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

LoadedModule LoadedModule::for_weights(const ModuleConfig& config, Precision precision, uint64_t dropout_seed) {
  auto impl = std::make_unique<Impl>();
  impl->own = Generator{dropout_seed, 0, /*no_draws=*/true};  // the initialisers leave the values unset
  impl->build(config, precision, impl->own);
  impl->own.no_draws = false;  // dropout draws, from (dropout_seed, 0)
  impl->unset = true;
  return LoadedModule(std::move(impl));
}

LoadedModule::~LoadedModule() = default;
LoadedModule::LoadedModule(LoadedModule&&) noexcept = default;
LoadedModule& LoadedModule::operator=(LoadedModule&&) noexcept = default;

LoadedModule::Impl& LoadedModule::impl() const {
  if (!impl_)
    throw std::invalid_argument(
        "LoadedModule: holds no module (moved from): call the handle it was moved to, or load one with load_module");
  return *impl_;
}

const ModuleConfig& LoadedModule::config() const { return impl().config; }
Precision LoadedModule::precision() const { return impl().precision; }
void LoadedModule::set_precision(Precision precision) {
  Impl& d = impl();
  d.precision = precision;
  d.packed.clear();
}
Module& LoadedModule::module() {
  Impl& d = impl();
  d.unset = false;  // the caller may set the parameters through it
  return d.call->module();
}
void LoadedModule::clear_packed_weights() {
  Impl& d = impl();
  d.packed.clear();
  d.finite_checked = false;  // the parameters may have changed
}
size_t LoadedModule::packed_weights() const { return impl().packed.size(); }
const std::vector<std::string>& LoadedModule::differentiable_inputs() const { return impl().differentiable_inputs; }

void LoadedModule::load_weights(const NamedTensors& weights, const std::string& source) {
  Impl& d = impl();
  d.packed.clear();  // the packed copies would be of the old values
  d.finite_checked = false;
  d.weights_source = source;
  d.call->module().load_state_dict(weights, source);  // strict: every parameter, or it throws
  d.unset = false;
}

Tensor LoadedModule::call(const NamedTensors& inputs, const std::string& source) const {
  const Impl& d = impl();
  d.require_weights();
  return d.call->forward(Inputs{inputs, source});
}

NamedTensors LoadedModule::forward(const NamedTensors& inputs, const std::string& source, TorchCall as) {
  Impl& d = impl();
  d.require_weights();
  // int8 has no NaN or infinity: a weight holding one would quantize to a finite value and give plausible
  // numbers where float32 (and PyTorch) give NaN, so it is refused, once per set of weights.
  if (d.precision == Precision::INT8 && !d.finite_checked) {
    for (const auto& [key, t] : d.call->module().named_parameters()) {
      const float* p = t.data();
      for (int64_t i = 0, n = t.numel(); i < n; ++i)
        if (!std::isfinite(p[i]))
          throw std::invalid_argument(d.weights_source + ": tensor '" + key + "' holds " +
                                      (std::isnan(p[i]) ? "NaN" : "an infinity") + " (element " + std::to_string(i) +
                                      "), which int8 cannot represent; run it in f32 or bf16");
    }
    d.finite_checked = true;
  }
  InferenceMode scope(d.precision, d.packed);  // no tape; each Linear weight packed once
  NamedTensors out;
  out.insert("output", d.call->forward(Inputs{inputs, source, as}));
  return out;
}

NamedTensors LoadedModule::forward_backward(const NamedTensors& inputs, const Tensor& grad_output,
                                            const std::string& source) {
  Impl& d = impl();
  if (d.precision == Precision::INT8)
    throw std::invalid_argument(source + ": 'grad_output' asks for gradients, which int8 (inference only) does not "
                                "compute; use f32 or bf16");
  d.require_weights();
  Module& m = d.call->module();
  m.zero_grad();
  NamedTensors in;
  for (const auto& [k, v] : inputs) in.insert(k, v.dtype() == DType::FLOAT32 ? v.detach() : v);  // fresh leaves
  for (const auto& n : d.differentiable_inputs) {
    auto it = in.find(n);
    if (it != in.end() && it->second.dtype() == DType::FLOAT32) it->second.requires_grad_(true);
  }
  Autocast autocast(d.precision);  // bf16: the matmuls forward and backward (tfm/autocast.h)
  Tensor y = call(in, source);
  if (!grad_output.defined() || grad_output.dtype() != DType::FLOAT32 || grad_output.shape() != y.shape())
    throw std::invalid_argument(source + ": 'grad_output' is " + describe(grad_output) + ", expected Float32" +
                                shape_str(y.shape()) + " (the output's shape)");
  y.backward(grad_output);
  NamedTensors out;
  out.insert("output", y.detach());
  m.visit_parameters([&](const std::string& k, Tensor& p) {
    Tensor g = p.grad();
    out.insert("grad." + k, g.defined() ? g : Tensor::zeros(p.shape()));
  });
  for (const auto& n : d.differentiable_inputs) {
    auto it = in.find(n);
    if (it == in.end() || !it->second.requires_grad()) continue;
    Tensor g = it->second.grad();
    out.insert("grad." + n, g.defined() ? g : Tensor::zeros(it->second.shape()));
  }
  m.zero_grad();  // the returned gradients stay valid: zero_grad drops the module's handles to them
  return out;
}

// ---- the `tfm forward` contract -------------------------------------------------------------------
namespace {
// Loads the weights file into m strictly: every tensor stored floating point (F32, F16, BF16, F64).
void load_weights_file(LoadedModule& m, const std::string& weights_path) {
  // Zero-copy: load_state_dict copies the weights into the module's parameters straight from the
  // mapping, skipping an intermediate owned copy of the whole file; the mapping is released when
  // `weights` goes out of scope (see io::LoadOptions for the hazard, which ends there).
  const io::SafeTensorsFile weights = io::load_safetensors(weights_path, io::LoadOptions{.zero_copy = true});
  for (const auto& [name, dtype] : weights.dtypes)
    if (!is_floating(dtype))
      throw std::invalid_argument(weights_path + ": tensor " + quote_name(name) + " must be floating point, got " +
                                  dtype);
  m.load_weights(weights.tensors, weights_path);
}
}  // namespace

LoadedModule load_module(const std::string& config_path, const std::string& weights_path, Precision precision) {
  const ModuleConfig config = read_module_config(config_path);
  LoadedModule m = [&] {  // a module the config asks for but that cannot be built is the config's error
    try {
      return LoadedModule::for_weights(config, precision);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(config_path + ": " + e.what());
    } catch (const std::bad_alloc&) {
      throw std::runtime_error(config_path + ": out of memory building the module's weights (a smaller d_model, "
                               "dim_feedforward or layer count)");
    } catch (const std::exception& e) {
      throw std::runtime_error(config_path + ": " + e.what());
    }
  }();
  load_weights_file(m, weights_path);
  return m;
}

LoadedModule load_module(const ModuleConfig& config, const std::string& weights_path, Precision precision) {
  LoadedModule m = LoadedModule::for_weights(config, precision);
  load_weights_file(m, weights_path);
  return m;
}

NamedTensors read_forward_inputs(const std::string& path) {
  io::SafeTensorsFile f = io::load_safetensors(path);
  for (const auto& [name, dtype] : f.dtypes) {
    // A name no module's forward takes is left to the module's name check, which refuses it as an unexpected
    // tensor naming what the module takes: its dtype is beside the point (PyTorch's need_weights, a BOOL flag,
    // is no input of tfm's).
    const auto& kinds = EnumNames<ModuleKind>::names;
    const std::string& tensor = name;  // (clang 14 cannot capture a structured binding in a lambda)
    const bool argument = tensor == "grad_output" || std::any_of(kinds.begin(), kinds.end(), [&](const auto& k) {
                            return arguments_of(k.first).takes(tensor);
                          });
    if (!argument) continue;
    const bool mask = name.find("mask") != std::string::npos;
    const bool causal = name.find("is_causal") != std::string::npos;
    if (causal && dtype != "BOOL")
      throw std::invalid_argument(path + ": tensor " + quote_name(name) + " must be BOOL, got " + dtype);
    if (mask && dtype != "BOOL" && dtype != "F32")
      throw std::invalid_argument(path + ": tensor " + quote_name(name) + " must be BOOL or F32, got " + dtype);
    if (!mask && !causal && dtype != "F32")
      throw std::invalid_argument(path + ": tensor " + quote_name(name) + " must be F32, got " + dtype);
  }
  return std::move(f.tensors);
}

NamedTensors run_forward(LoadedModule& module, const NamedTensors& inputs, const std::string& source) {
  auto go = inputs.find("grad_output");
  if (go == inputs.end()) return module.forward(inputs, source);
  NamedTensors rest;
  for (const auto& [k, v] : inputs)
    if (k != "grad_output") rest.insert(k, v);
  return module.forward_backward(rest, go->second, source);
}

NamedTensors run_forward(const std::string& config_json, const NamedTensors& weights, const NamedTensors& inputs,
                         const std::string& weights_source, Precision precision) {
  LoadedModule m = LoadedModule::for_weights(parse_module_config(config_json), precision);
  m.load_weights(weights, weights_source);
  return run_forward(m, inputs);
}

}  // namespace tfm
