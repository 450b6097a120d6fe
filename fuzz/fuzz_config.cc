// fuzz/fuzz_config.cc — libFuzzer target for the JSON module config parser (tfm::build_module),
// the first thing `tfm forward --config` does with a user's file.
//
// Contract under test: any byte string either builds a module or throws std::invalid_argument
// (a one-line message naming the key); any other exception escaping, a crash or a sanitizer
// report is a bug. Inputs asking for large models are skipped (return -1, kept out of the
// corpus): a config with d_model 10^9 is a legitimate request that fails with std::bad_alloc,
// and building it would only measure the allocator. Every integer in the input is therefore
// capped at kMaxInt before build_module sees it.
// Seeds: fuzz/corpus/config/ (written by fuzz/make_seeds.py).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "tfm/forward.h"

namespace {

// Largest integer accepted anywhere in a config: d_model, nhead, dim_feedforward, num_layers up to
// 48 build at most ~48 layers × (4·48² + 2·48·96) floats ≈ 4 MB, fast enough for thousands of
// executions per second.
constexpr int64_t kMaxInt = 48;

bool small_enough(const nlohmann::json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>() <= static_cast<uint64_t>(kMaxInt);
  if (j.is_number_integer()) return j.get<int64_t>() <= kMaxInt;  // negatives are bad input, kept
  if (j.is_structured())
    for (const auto& v : j)
      if (!small_enough(v)) return false;
  return true;
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
