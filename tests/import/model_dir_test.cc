// tests/import/model_dir_test.cc — notebooks 4 and 5 as whole models, imported with
// tools/import_torch.py into `tfm train` model directories: tfm::load_model_dir + Model::forward
// against the PyTorch re-statement's logits (tests/import/gen_model_dirs.py writes both sides).
//
// Bound: the parity suite's. rel = max|tfm − ref| / max|ref| must be <= max(2e-5, 20·f32_err), the
// reference being the module in float64 on the same float32 weights and f32_err the module's own
// float32 error on the same batch. The generator also checks the reverse direction (the model
// directory back into the module's state_dict, bit for bit, and the refusal of a per-feature gain
// where the module holds one scalar); it exits non-zero when those fail.
//
// Skipped only when /usr/bin/python3 cannot import torch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "test_util.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/model_dir.h"

using namespace tfm;

namespace {

const std::string kPython = "/usr/bin/python3";

// The generated directory, once per test binary run.
const std::string& fixtures() {
  static const std::string dir = [] {
    const std::string d = tfm::testing::temp_dir("import_model_dir");
    std::string out;
    const int rc = tfm::testing::run_command(kPython + " '" + TFM_SOURCE_DIR + "/tests/import/gen_model_dirs.py' --out '" +
                                                 d + "' 2>&1",
                                             &out);
    if (rc != 0) ADD_FAILURE() << "gen_model_dirs.py failed (" << rc << "):\n" << out;
    return d;
  }();
  return dir;
}

bool have_torch() {
  static const bool ok = tfm::testing::run_command(kPython + " -c 'import torch, numpy'") == 0;
  return ok;
}

std::vector<int32_t> ids(const Tensor& t) {
  std::vector<int32_t> out(static_cast<size_t>(t.numel()));
  const float* p = t.data();
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(p[i]);
  return out;
}

// Logits of the model directory `name` on its batch, checked against the module's.
void check_logits(const std::string& name) {
  const std::string dir = fixtures() + "/" + name;
  const TrainedModel m = load_model_dir(dir);
  const io::SafeTensorsFile f = io::load_safetensors(fixtures() + "/" + name + ".batch.safetensors");
  data::TokenBatch b;
  const Tensor& src = f.at("src");
  b.B = src.size(0);
  b.S = src.size(1);
  b.src = ids(src);
  if (m.model->has_decoder()) {
    const Tensor& tgt_in = f.at("tgt_in");
    b.T = tgt_in.size(1);
    b.tgt_in = ids(tgt_in);
  }
  const Tensor logits = m.model->forward(b);
  const Tensor& ref = f.at("expected");
  ASSERT_EQ(logits.shape(), ref.shape());
  const float* y = logits.data();
  const float* r = ref.data();
  double err = 0.0, mag = 0.0;
  int64_t worst = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double d = std::abs(static_cast<double>(y[i]) - r[i]);
    if (d > err) err = d, worst = i;
    mag = std::max(mag, std::abs(static_cast<double>(r[i])));
  }
  const double rel = err / (mag > 0 ? mag : 1.0);
  const double bound = std::max(2e-5, 20.0 * std::stod(f.metadata.at("f32_err")));
  EXPECT_LE(rel, bound) << name << ": logits rel " << rel << " at flat index " << worst << " (tfm " << y[worst]
                        << ", module " << r[worst] << ")";
  std::printf("%s: logits rel %.3g, bound %.3g\n", name.c_str(), rel, bound);
}

}  // namespace

TEST(ImportModelDir, Notebook4ReverseModelLogitsMatchModule) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy";
  check_logits("nb4");
}

TEST(ImportModelDir, Notebook5BuildTransformerLogitsMatchModule) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy";
  check_logits("nb5");
}
