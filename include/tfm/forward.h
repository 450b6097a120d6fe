// tfm/forward.h — the `tfm forward` conformance contract as a library call, and the builder of
// modules from their PyTorch constructor arguments in JSON.
//
// Config: {"module": NAME, ...}, NAME one of MultiheadAttention, TransformerEncoderLayer,
// TransformerEncoder, TransformerDecoderLayer, TransformerDecoder, Transformer, with the module's
// PyTorch constructor arguments by their PyTorch names (missing keys take PyTorch's defaults), plus
// num_layers / norm for the stacks and num_encoder_layers / num_decoder_layers for Transformer.
// Unknown keys and wrong types are errors that name the key.
#pragma once

#include <memory>
#include <string>

#include "tfm/inference.h"
#include "tfm/modules/module.h"

namespace tfm {

// A built module with a uniform call: inputs by PyTorch forward-argument names.
class ConformanceModule {
 public:
  virtual ~ConformanceModule() = default;
  virtual Module& module() = 0;
  virtual std::string name() const = 0;
  // Inputs (names as in PyTorch's forward; causal flags as 0-dim Bool tensors) → output.
  virtual Tensor forward(const NamedTensors& inputs) const = 0;
  // The float inputs that receive gradients ("query", "src", ...).
  virtual std::vector<std::string> differentiable_inputs() const = 0;
};

// Throws std::invalid_argument naming the offending key on a bad config.
std::unique_ptr<ConformanceModule> build_module(const std::string& config_json);

// Builds the module, loads `weights` strictly, runs forward in eval mode (dropout off) and returns
// {"output"}; if inputs holds "grad_output" (output's shape), also runs the backward of
// sum(output ⊙ grad_output) and adds "grad.<param key>" for every parameter and "grad.<name>" for
// every float input among query, key, value, src, tgt, memory.
// `weights_source` names the weights file in error messages. Without "grad_output" the forward
// runs in an InferenceMode scope of `precision` (weights packed once; BFloat16 rounds the Linear
// layers' matmul inputs, see docs/bf16.md); with it, `precision` must be Float32 (training math
// is float32 only) or std::invalid_argument is thrown.
NamedTensors run_forward(const std::string& config_json, const NamedTensors& weights, const NamedTensors& inputs,
                         const std::string& weights_source = "weights", Precision precision = Precision::Float32);

}  // namespace tfm
