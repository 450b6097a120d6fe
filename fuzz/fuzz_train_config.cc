// fuzz/fuzz_train_config.cc — libFuzzer target for the training configuration reader
// (tfm::train::TrainConfig::from_json, with a "model" object read by tfm::ModelConfig::from_json), which
// reads the "train" and "model" sections of the config.json in every run directory a resume, `tfm eval`
// or the Python package opens.
//
// Contract under test: any byte string either parses or throws std::invalid_argument whose message is
// one line; a parsed configuration either validates or throws the same way; and a valid one survives
// the trip a run makes through its directory: to_json, then from_json, gives back the same JSON (a run
// must be able to read the config.json it wrote; the directory keeps "model" beside "train", read here
// inline, by the same readers). Any other exception escaping, a crash or a sanitizer
// report is a bug.
// Seeds: fuzz/corpus/train_config/ (written by fuzz/make_seeds.py).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "tfm/train/config.h"

namespace {

void check(bool ok, const char* what, const std::string& detail = "") {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s %s\n", what, detail.c_str());
    std::abort();
  }
}

void check_one_line(const std::invalid_argument& e) {
  const std::string msg = e.what();
  check(!msg.empty() && msg.find('\n') == std::string::npos, "error message is empty or not one line:", msg);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tfm::train::TrainConfig;
  const std::string text(reinterpret_cast<const char*>(data), size);
  TrainConfig c;
  try {
    c = TrainConfig::from_json(text);
  } catch (const std::invalid_argument& e) {
    check_one_line(e);
    return 0;
  }
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    check_one_line(e);
    return 0;
  }
  const std::string saved = c.to_json();
  TrainConfig back;
  try {
    back = TrainConfig::from_json(saved);
  } catch (const std::invalid_argument& e) {
    check(false, "a valid config's own JSON does not parse:", std::string(e.what()) + "\n" + saved);
  }
  check(back.to_json() == saved, "a valid config's JSON changes on a round trip:", saved);
  return 0;
}
