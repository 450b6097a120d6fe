// fuzz/fuzz_config.cc — libFuzzer target for the JSON module config parser
// (tfm::parse_module_config) and the module built from it (tfm::LoadedModule), the first things
// `tfm forward --config` does with a user's file.
//
// Contract under test: any byte string either parses into a ModuleConfig from which a module
// builds, or throws std::invalid_argument (a one-line message naming the key); any other exception
// escaping, a crash or a sanitizer report is a bug. Configs asking for large models are skipped
// after parsing (return -1, kept out of the corpus): a config with d_model 10^9 is a legitimate
// request that fails with std::bad_alloc, and building it would only measure the allocator and
// the weight initialiser. The size is estimated from the parsed config, whose absent keys already
// hold PyTorch's defaults, so a typo in a key cannot smuggle in a 44M-parameter model.
// Seeds: fuzz/corpus/config/ (written by fuzz/make_seeds.py).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "tfm/models/forward.h"

namespace {

// Largest accepted estimate of a config's parameter count: ~4 MB of floats, so one build stays
// well under a millisecond-scale budget even under ASan and thousands of inputs run per second.
constexpr double kMaxParams = 1e6;

// Parameters ≈ L · (4·D² + 4·D·F): attention in/out projections, and linear1/linear2 with room
// for the gated activations' doubled linear1.
bool small_enough(const tfm::ModuleConfig& c) {
  if (c.kind == tfm::ModuleKind::MULTIHEAD_ATTENTION) {
    const double d = static_cast<double>(c.attention.embed_dim);
    return 4 * d * d <= kMaxParams;
  }
  const double d = static_cast<double>(c.layer.d_model), f = static_cast<double>(c.layer.dim_feedforward);
  double l = 1;
  if (c.kind == tfm::ModuleKind::TRANSFORMER_ENCODER || c.kind == tfm::ModuleKind::TRANSFORMER_DECODER)
    l = std::max(1.0, static_cast<double>(c.num_layers));
  if (c.kind == tfm::ModuleKind::TRANSFORMER)
    l = std::max(0.0, static_cast<double>(c.num_encoder_layers)) + std::max(0.0, static_cast<double>(c.num_decoder_layers));
  return l * (4 * d * d + 4 * d * f) <= kMaxParams;
}

void check_one_line(const std::exception& e) {
  const std::string msg = e.what();
  if (msg.empty() || msg.find('\n') != std::string::npos) {
    std::fprintf(stderr, "error message is empty or not one line: %s\n", msg.c_str());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tfm::ModuleConfig config;
  try {
    config = tfm::parse_module_config(text);
  } catch (const std::invalid_argument& e) {
    check_one_line(e);
    return 0;
  }
  if (!small_enough(config)) return -1;
  try {
    const tfm::LoadedModule m(config);
    if (m.config().kind != config.kind || m.differentiable_inputs().empty()) {
      std::fprintf(stderr, "the built module does not match its config\n");
      std::abort();
    }
  } catch (const std::invalid_argument& e) {
    check_one_line(e);
  }
  return 0;
}
