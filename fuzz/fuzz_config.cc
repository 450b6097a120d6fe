// fuzz/fuzz_config.cc — libFuzzer target for the JSON module config parser (tfm::build_module),
// the first thing `tfm forward --config` does with a user's file.
//
// Contract under test: any byte string either builds a module or throws std::invalid_argument
// (a one-line message naming the key); any other exception escaping, a crash or a sanitizer
// report is a bug. Inputs asking for large models are skipped (return -1, kept out of the
// corpus): a config with d_model 10^9 is a legitimate request that fails with std::bad_alloc,
// and building it would only measure the allocator and the weight initialiser. The size is
// estimated with PyTorch's defaults for absent keys (Transformer: d_model 512, 6 + 6 layers;
// every layer: dim_feedforward 2048), so a typo in a key cannot smuggle in a 44M-parameter model.
// Seeds: fuzz/corpus/config/ (written by fuzz/make_seeds.py).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "tfm/forward.h"

namespace {

// Largest accepted estimate of a config's parameter count: ~4 MB of floats, so one build stays
// well under a millisecond-scale budget even under ASan and thousands of inputs run per second.
constexpr double kMaxParams = 1e6;

// An integer-valued key of the top-level object, or `fallback` when absent or not an integer
// (a wrong type makes build_module fail fast, so its size does not matter).
double size_key(const nlohmann::json& j, const char* key, double fallback) {
  if (!j.contains(key)) return fallback;
  const nlohmann::json& v = j.at(key);
  if (v.is_number_unsigned()) return static_cast<double>(v.get<uint64_t>());
  if (v.is_number_integer()) return std::max(0.0, static_cast<double>(v.get<int64_t>()));
  return 0.0;
}

// Parameters ≈ L · (4·D² + 4·D·F): attention in/out projections, and linear1/linear2 with room
// for the gated activations' doubled linear1.
bool small_enough(const nlohmann::json& j) {
  if (!j.is_object()) return true;
  const bool transformer = j.contains("module") && j.at("module") == "Transformer";
  const double d = std::max(size_key(j, "d_model", transformer ? 512 : 0), size_key(j, "embed_dim", 0));
  const double f = size_key(j, "dim_feedforward", 2048);
  const double l = transformer ? size_key(j, "num_encoder_layers", 6) + size_key(j, "num_decoder_layers", 6)
                               : std::max(1.0, size_key(j, "num_layers", 1));
  return l * (4 * d * d + 4 * d * f) <= kMaxParams;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Pre-scan only to apply the size cap; invalid JSON goes through to build_module untouched.
  const nlohmann::json pre = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!pre.is_discarded() && !small_enough(pre)) return -1;
  try {
    const auto m = tfm::build_module(text);
    if (!m) {
      std::fprintf(stderr, "build_module returned null\n");
      std::abort();
    }
    (void)m->name();
    (void)m->differentiable_inputs();
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    if (msg.empty() || msg.find('\n') != std::string::npos) {
      std::fprintf(stderr, "error message is empty or not one line: %s\n", msg.c_str());
      std::abort();
    }
  }
  return 0;
}
