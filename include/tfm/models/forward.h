// tfm/models/forward.h — run a module exported from PyTorch: its typed description (ModuleConfig, parsed
// once from the JSON that tools/export_torch.py writes), a handle holding the module built from it
// with its weights (LoadedModule), and the `tfm forward` contract on top of the handle (run_forward).
//
//   tfm::LoadedModule enc = tfm::load_module("enc.json", "enc.safetensors");  // config + weights, once
//   tfm::NamedTensors out = enc.forward({{"src", x}});                        // as often as needed
//   const tfm::Tensor& y = out.at("output");
//
// Config JSON: {"module": NAME, ...}, NAME one of MultiheadAttention, TransformerEncoderLayer,
// TransformerEncoder, TransformerDecoderLayer, TransformerDecoder, Transformer, with the module's
// PyTorch constructor arguments by their PyTorch names (missing keys take PyTorch's defaults), plus
// num_layers / norm for the stacks and num_encoder_layers / num_decoder_layers for Transformer (whose
// config may also hold its encoder's enable_nested_tensor and mask_check), and
// the variants beyond torch.nn, each off by default: head_dim, v_head_dim, qkv_bias, out_bias,
// attn_scale (every module), ffn_bias, norm_bias, norm_type, drop_path (layers, stacks, Transformer),
// share_layers (stacks, Transformer) — TransformerLayerOptions and AttentionVariant say what each does.
// Unknown keys and wrong types are errors that name the key.
//
// Inputs carry the names of the arguments of PyTorch's forward:
//   MultiheadAttention        query, key, value, attn_mask, key_padding_mask, is_causal
//   TransformerEncoderLayer   src, src_mask, src_key_padding_mask, is_causal
//   TransformerEncoder        src, mask, src_key_padding_mask, is_causal
//   TransformerDecoderLayer,  tgt, memory, tgt_mask, memory_mask, tgt_key_padding_mask,
//   TransformerDecoder          memory_key_padding_mask, tgt_is_causal, memory_is_causal
//   Transformer               src, tgt, src_mask, tgt_mask, memory_mask, src_key_padding_mask,
//                               tgt_key_padding_mask, memory_key_padding_mask, src_is_causal,
//                               tgt_is_causal, memory_is_causal
// Sequences are Float32 (B, T, D) with batch_first, else (T, B, D) (the key defaults to the query and
// the value to the key: self-attention from one tensor; Python's call requires all three, as PyTorch's);
// masks are Bool (true = blocked) or Float32 (added); causal flags are 0-dim Bool tensors.
//
// To add a module kind: an enumerator in ModuleKind and its name in EnumNames<ModuleKind>, its keys in
// parse_module_config (src/models/module_config.cc), its inputs in src/models/forward.cc and
// its matmuls in bench_flop_count (src/models/bench.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tfm/inference.h"
#include "tfm/modules/module.h"
#include "tfm/modules/transformer.h"
#include "tfm/named_tensors.h"
#include "tfm/random.h"

namespace tfm {

enum class ModuleKind {
  MULTIHEAD_ATTENTION,
  TRANSFORMER_ENCODER_LAYER,
  TRANSFORMER_ENCODER,
  TRANSFORMER_DECODER_LAYER,
  TRANSFORMER_DECODER,
  TRANSFORMER,
};
template <>
struct EnumNames<ModuleKind> {  // PyTorch's class names, the config's "module"
  static constexpr const char* noun = "module";
  static constexpr std::array<std::pair<ModuleKind, std::string_view>, 6> names{
      {{ModuleKind::MULTIHEAD_ATTENTION, "MultiheadAttention"},
       {ModuleKind::TRANSFORMER_ENCODER_LAYER, "TransformerEncoderLayer"},
       {ModuleKind::TRANSFORMER_ENCODER, "TransformerEncoder"},
       {ModuleKind::TRANSFORMER_DECODER_LAYER, "TransformerDecoderLayer"},
       {ModuleKind::TRANSFORMER_DECODER, "TransformerDecoder"},
       {ModuleKind::TRANSFORMER, "Transformer"}}};
};

// nn.MultiheadAttention's constructor arguments, and tfm's attention variant.
struct AttentionOptions {
  int64_t embed_dim = 0;  // E; required
  int64_t num_heads = 0;  // H; required, E % H == 0 unless variant.head_dim is set
  float dropout = 0.0f;
  bool bias = true;
  bool add_bias_kv = false;  // keys bias_k, bias_v (tfm/modules/attention.h)
  bool add_zero_attn = false;
  bool batch_first = false;
  std::optional<int64_t> kdim, vdim;  // key's and value's widths; unset (PyTorch's None): embed_dim
  AttentionVariant variant;  // head_dim, v_head_dim, qkv_bias, out_bias, attn_scale (tfm/modules/attention.h)

  int64_t key_width() const { return kdim.value_or(embed_dim); }
  int64_t value_width() const { return vdim.value_or(embed_dim); }
  // PyTorch's separate q/k/v projections (MultiheadAttention::separate_projections()).
  bool separate_projections() const { return key_width() != embed_dim || value_width() != embed_dim; }
};

// One module's description. Fields that do not belong to `kind` keep their defaults.
struct ModuleConfig {
  ModuleKind kind = ModuleKind::TRANSFORMER;
  AttentionOptions attention;      // MULTIHEAD_ATTENTION
  TransformerLayerOptions layer;   // every other kind: the arguments of each layer
  int64_t num_layers = 0;          // TRANSFORMER_ENCODER, TRANSFORMER_DECODER (required there)
  bool norm = false;               // TRANSFORMER_ENCODER, TRANSFORMER_DECODER: a final norm (layer.norm_type)
  int64_t num_encoder_layers = 6;  // TRANSFORMER
  int64_t num_decoder_layers = 6;  // TRANSFORMER
  // TRANSFORMER_ENCODER, and TRANSFORMER's encoder: nn.TransformerEncoder's enable_nested_tensor and
  // mask_check (PyTorch's defaults, true). With enable_nested_tensor, forward() takes PyTorch's
  // nested-tensor fast path where PyTorch takes it (its conditions in src/models/forward.cc): given only a
  // src_key_padding_mask, in eval mode without gradients, the encoder's output is 0 at the padded
  // positions before its final norm, as PyTorch's torch.no_grad() / inference_mode() call computes it, and
  // what src holds at those positions (a NaN included) reaches no other.
  bool enable_nested_tensor = true;
  bool mask_check = true;
};

// Which of PyTorch's calls LoadedModule::forward reproduces where the two compute differently — only
// nn.TransformerEncoder's nested-tensor fast path (enable_nested_tensor above), which PyTorch takes when autograd
// records nothing: NO_GRAD, its torch.no_grad() / inference_mode() call, or a module whose parameters require no
// gradient; AUTOGRAD, its call with grad mode on and parameters (or src) requiring gradients: the regular path.
enum class TorchCall { NO_GRAD, AUTOGRAD };

// Parses and validates a config's JSON text. Throws std::invalid_argument naming the offending
// key ("config: unknown key 'n_heads'" beside every required key present, "config: missing required key 'nhead'",
// "config: 'd_model' must be an integer, got \"8\"", ...).
ModuleConfig parse_module_config(const std::string& config_json);
// Reads and parses a config file; errors start with the path ("enc.json: config: ...").
ModuleConfig read_module_config(const std::string& path);

// A module built from its config, holding its weights, called on named inputs as often as needed.
// forward() runs in inference mode (an InferenceMode scope: no autograd tape) and packs each Linear
// weight once, into a cache the handle keeps for its lifetime (in `precision`; see tfm/inference.h
// for float32 against bfloat16). forward_backward() runs the training math (float32, or bfloat16
// matmuls as tfm/autocast.h has them) and returns gradients. The module is in eval mode (dropout off) unless module().train() is called. One call
// at a time: a handle is not safe to call from two threads at once.
class LoadedModule {
 public:
  // Builds the module with PyTorch's initialisers drawing from `gen` (which the module keeps for
  // its dropout, so it must outlive the handle), in eval mode. Throws std::invalid_argument when
  // the module's constructor refuses the options (a config from parse_module_config is valid).
  explicit LoadedModule(const ModuleConfig& config, Precision precision = Precision::FLOAT32,
                        Generator& gen = default_generator());
  // A module whose weights are loaded right after (load_weights; load_module and run_forward build
  // theirs so): no initialiser runs (torch's skip_init), and the handle owns its generator (its
  // dropout's, from (dropout_seed, 0)), so building it draws nothing from default_generator() and
  // two threads may build modules at once. Its parameters hold no values until load_weights: forward,
  // forward_backward and call throw std::invalid_argument before it (or before module(), whose caller sets them).
  static LoadedModule for_weights(const ModuleConfig& config, Precision precision = Precision::FLOAT32,
                                  uint64_t dropout_seed = 0);
  ~LoadedModule();
  // A handle moved from holds no module: every call on it but assignment and destruction throws
  // std::invalid_argument "LoadedModule: holds no module (moved from): ...".
  LoadedModule(LoadedModule&&) noexcept;
  LoadedModule& operator=(LoadedModule&&) noexcept;

  const ModuleConfig& config() const;
  Precision precision() const;
  void set_precision(Precision precision);  // for later forward() calls; drops packed weights

  // Strict load (Module::load_state_dict): every parameter key present with its shape, no key
  // left over; `source` names the weights in messages. Drops packed weights.
  void load_weights(const NamedTensors& weights, const std::string& source = "weights");

  // Inference: {"output": the module's output}, the numbers of PyTorch's `as` call (TorchCall). Inputs are checked
  // by name, dtype and shape first; errors start with `source` ("inputs: missing tensor 'src'"), so a caller reading
  // them from a file passes its path.
  NamedTensors forward(const NamedTensors& inputs, const std::string& source = "inputs",
                       TorchCall as = TorchCall::NO_GRAD);

  // Training math in precision(): float32, or bfloat16 matmuls forward and backward (an
  // Autocast scope, tfm/autocast.h: the Linear layers' and, with AVX512-BF16, attention's; int8 throws std::invalid_argument), with dropout as the module's mode has it
  // (off after construction): runs forward with autograd and the backward of
  // sum(output ⊙ grad_output), grad_output of the output's shape, and returns "output",
  // "grad.<param key>" for every parameter and "grad.<name>" for every differentiable input given
  // (zeros where no gradient reached). Parameter gradients are cleared before and after.
  NamedTensors forward_backward(const NamedTensors& inputs, const Tensor& grad_output,
                                const std::string& source = "inputs");

  // The module's forward on named inputs and nothing around it: no scope opened, inputs used as
  // given (gradients flow into those that require them), the module's own train/eval mode. For
  // callers that arrange modes themselves, e.g. a training step: module().train(), an optimizer
  // over module().named_parameters(), then call() under autograd.
  Tensor call(const NamedTensors& inputs, const std::string& source = "inputs") const;

  // The Float32 inputs forward_backward differentiates, in order: query, key, value; src; tgt,
  // memory; or src, tgt.
  const std::vector<std::string>& differentiable_inputs() const;

  // The module itself: parameters (state_dict, named_parameters), train()/eval(). After changing
  // parameters through it, call clear_packed_weights() before the next forward().
  Module& module();
  void clear_packed_weights();
  size_t packed_weights() const;  // Linear weights packed so far (diagnostics and tests)

 private:
  struct Impl;
  explicit LoadedModule(std::unique_ptr<Impl> impl);
  Impl& impl() const;  // *impl_, or the moved-from handle's error: every member goes through it
  std::unique_ptr<Impl> impl_;
};

// Reads the config (read_module_config), builds the module (LoadedModule::for_weights), and loads the
// weights file strictly:
// every tensor must be stored as a floating-point dtype (F32, F16, BF16, F64). Errors start with
// the file they are about. The file is read zero-copy and released before returning.
LoadedModule load_module(const std::string& config_path, const std::string& weights_path,
                         Precision precision = Precision::FLOAT32);
// The same for a config already read (parse_module_config of a JSON text): what building it throws is said as
// for_weights says it, without a file name.
LoadedModule load_module(const ModuleConfig& config, const std::string& weights_path,
                         Precision precision = Precision::FLOAT32);

// Reads a `tfm forward` inputs file: masks ("*mask*") BOOL or F32, causal flags ("*is_causal*")
// BOOL, every other argument F32 (grad_output included). A name no module's forward takes (the table
// above) is returned as stored, whatever its dtype, for the module to refuse by name (forward():
// "unexpected tensor", listing what it takes). Errors start with the path.
NamedTensors read_forward_inputs(const std::string& path);

// The `tfm forward` contract on a loaded module: without "grad_output" among the inputs,
// module.forward(inputs); with it, module.forward_backward(the other inputs, grad_output), which
// needs precision() f32 or bf16 (int8 is inference only: std::invalid_argument).
NamedTensors run_forward(LoadedModule& module, const NamedTensors& inputs, const std::string& source = "inputs");

// The same contract from a config's JSON text and weights in memory, building a fresh module:
// LoadedModule(parse_module_config(config_json), precision), load_weights(weights,
// weights_source), run_forward(module, inputs).
NamedTensors run_forward(const std::string& config_json, const NamedTensors& weights, const NamedTensors& inputs,
                         const std::string& weights_source = "weights", Precision precision = Precision::FLOAT32);

}  // namespace tfm
