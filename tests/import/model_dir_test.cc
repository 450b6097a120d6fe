// tests/import/model_dir_test.cc — notebooks 4 and 5 as whole models, imported with
// tools/import_torch.py into `tfm train` model directories: tfm::load_model_dir + Model::forward
// against the PyTorch re-statement's logits (tests/import/gen_model_dirs.py writes both sides).
//
// The first 50 steps of training notebook 4's imported model (dropout 0) with Adam(5e-4) on the
// reverse task must follow the module's own curve from the same weights and batches, with the rule
// of tests/models/model_test.cc (expect_training_like_torch): within 20× PyTorch float32's drift
// from its float64 curve at every step, floored at 2e-5 relative to the loss. The trained weights
// then go back into the module (import_torch.py reverse), whose logits must match tfm's (same bound).
//
// Bound: the parity suite's. rel = max|tfm − ref| / max|ref| must be <= max(2e-5, 20·f32_err), the
// reference being the module in float64 on the same float32 weights and f32_err the module's own
// float32 error on the same batch. The generator also checks the reverse direction (the model
// directory back into the module's state_dict, bit for bit, and the refusal of a per-feature gain
// where the module holds one scalar); it exits non-zero when those fail.
//
// Notebook 4's imported directory is also fine-tuned with `tfm train --init-from` on a TSV of reversed
// sequences spelled in its vocabulary: the run's step-0 row must be the imported model's own figures on
// that validation file (teacher-forced loss through the library, token accuracy through `tfm eval`),
// and its validation loss must fall.
//
// Skipped only when /usr/bin/python3 cannot import torch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_util.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/model_dir.h"
#include "tfm/data/tsv.h"
#include "tfm/optim.h"
#include "tfm/train/evaluate.h"

using namespace tfm;

namespace {

const std::string kPython = "/usr/bin/python3";

// A fresh directory with one part of gen_model_dirs.py's output ("nb4", "nb5" or "nb4_train").
std::string generate(const std::string& part) {
  const std::string d = tfm::testing::temp_dir("import_model_dir");
  std::string out;
  const int rc = tfm::testing::run_command(kPython + " '" + TFM_SOURCE_DIR + "/tests/import/gen_model_dirs.py' --out '" +
                                               d + "' --only " + part + " 2>&1",
                                           &out);
  EXPECT_EQ(rc, 0) << "gen_model_dirs.py --only " << part << " failed:\n" << out;
  return d;
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
  const std::string root = generate(name);
  const TrainedModel m = load_model_dir(root + "/" + name);
  const io::SafeTensorsFile f = io::load_safetensors(root + "/" + name + ".batch.safetensors");
  data::TokenBatch b;
  const Tensor& src = f.at("src");
  b.B = src.size(0);
  b.S = src.size(1);
  b.src = ids(src);
  if (m.model->config().target_layout() == tfm::data::TargetLayout::SHIFTED) {
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
  std::filesystem::remove_all(root);
}

}  // namespace

TEST(ImportModelDir, Notebook4ReverseModelLogitsMatchModule) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy";
  check_logits("nb4");
}

TEST(ImportModelDir, Notebook4TrainsLikeItsModule) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy";
  const std::string root = generate("nb4_train");
  TrainedModel m = load_model_dir(root + "/nb4_train");
  const io::SafeTensorsFile f = io::load_safetensors(root + "/nb4_train.batches.safetensors");
  const Tensor& src = f.at("src");      // (steps, B, S)
  const Tensor& tgt = f.at("tgt_out");  // (steps, B, S)
  const int64_t steps = src.size(0), B = src.size(1), S = src.size(2);
  const float lr = std::stof(f.metadata.at("lr"));
  Model& model = *m.model;
  model.train();
  Adam opt(model.named_parameters(), lr);
  std::vector<double> ours;
  for (int64_t s = 0; s < steps; ++s) {
    data::TokenBatch b;
    b.B = B;
    b.S = S;
    for (int64_t i = 0; i < B * S; ++i) {
      b.src.push_back(static_cast<int32_t>(src.data()[s * B * S + i]));
      b.tgt_out.push_back(static_cast<int32_t>(tgt.data()[s * B * S + i]));
    }
    opt.zero_grad();
    Tensor loss = model.loss(b);
    loss.backward();
    opt.step();
    ours.push_back(loss.item());
  }
  std::ifstream in(root + "/nb4_train.losses.json");
  const nlohmann::json curves = nlohmann::json::parse(in);
  const auto t32 = curves.at("float32").get<std::vector<double>>();
  const auto t64 = curves.at("float64").get<std::vector<double>>();
  ASSERT_EQ(t64.size(), ours.size());
  double drift32 = 0, mag = 0, drift = 0;
  for (size_t i = 0; i < ours.size(); ++i) {
    drift32 = std::max(drift32, std::fabs(t32[i] - t64[i]));
    drift = std::max(drift, std::fabs(ours[i] - t64[i]));
    mag = std::max(mag, std::fabs(t64[i]));
  }
  const double bound = std::max(20 * drift32, 2e-5 * mag);
  std::printf("nb4 curve: loss %.6g -> %.6g (module float64 %.6g -> %.6g), max |tfm - module64| %.3g, "
              "max |module32 - module64| %.3g, bound %.3g\n",
              ours.front(), ours.back(), t64.front(), t64.back(), drift, drift32, bound);
  EXPECT_NEAR(ours[0], t64[0], 2e-5 * std::fabs(t64[0]));
  for (size_t i = 0; i < ours.size(); ++i)
    EXPECT_NEAR(ours[i], t64[i], bound) << "step " << i + 1 << ": tfm " << ours[i] << ", module float32 " << t32[i];
  EXPECT_LT(ours.back(), ours.front());  // and it learns

  // The trained model back into the module (import_torch.py reverse): same logits. The last batch's
  // logits in eval mode go to the checker with a copy of the directory holding the trained weights.
  namespace fs = std::filesystem;
  const std::string trained = root + "/trained";
  fs::create_directories(trained);
  for (const char* f : {"config.json", "src_vocab.txt", "tgt_vocab.txt"})
    fs::copy_file(root + "/nb4_train/" + f, trained + "/" + f);
  io::save_safetensors(trained + "/model.safetensors", model.named_parameters());
  model.eval();
  data::TokenBatch last;
  last.B = B;
  last.S = S;
  for (int64_t i = 0; i < B * S; ++i) last.src.push_back(static_cast<int32_t>(src.data()[(steps - 1) * B * S + i]));
  const Tensor logits = model.forward(last);  // (B, S, V)
  std::vector<float> src_ids(last.src.begin(), last.src.end());
  io::save_safetensors(root + "/trained.logits.safetensors",
                       {{"src", Tensor::from_vector({B, S}, src_ids)}, {"logits", logits}});
  std::string out;
  const int rc = tfm::testing::run_command(kPython + " '" + TFM_SOURCE_DIR + "/tests/import/gen_model_dirs.py' --out '" +
                                               root + "' --check-trained 2>&1",
                                           &out);
  EXPECT_EQ(rc, 0) << "the trained model reversed into the module gives other logits:\n" << out;
  std::printf("%s", out.c_str());
  fs::remove_all(root);
}

TEST(ImportModelDir, Notebook5BuildTransformerLogitsMatchModule) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy";
  check_logits("nb5");
}

// Reversal pairs over notebook 4's tokens ("1" .. "19", space-separated), lengths 3..10.
void write_reverse_tsv(const std::string& path, int n, uint64_t seed) {
  tfm::testing::Rng g(seed);
  std::ofstream f(path);
  for (int i = 0; i < n; ++i) {
    std::vector<int> w(static_cast<size_t>(g.uniform_int(3, 10)));
    for (int& t : w) t = g.uniform_int(1, 19);
    for (size_t k = 0; k < w.size(); ++k) f << (k ? " " : "") << w[k];
    f << '\t';
    for (size_t k = 0; k < w.size(); ++k) f << (k ? " " : "") << w[w.size() - 1 - k];
    f << '\n';
  }
}

TEST(ImportModelDir, Notebook4FineTunesWithInitFrom) {
  if (!have_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch and numpy";
  const std::string root = generate("nb4");
  const std::string dir = root + "/nb4", run = root + "/tuned";
  write_reverse_tsv(root + "/t.tsv", 256, 1);
  write_reverse_tsv(root + "/v.tsv", 64, 2);
  std::string out;
  ASSERT_EQ(tfm::testing::run_command(std::string(TFM_CLI_PATH) + " train --init-from " + dir + " --train " + root +
                                          "/t.tsv --valid " + root + "/v.tsv --max-steps 20 --eval-every 10 --lr 1e-3 "
                                          "--warmup 2 --batch-size 32 --dropout 0 --threads 1 --out " + run,
                                      &out),
            0)
      << out;
  // metrics.csv: the rows at steps 0, 10, 20 (step, epoch, lr, train_loss, valid_loss, token acc, ...).
  std::ifstream csv(run + "/metrics.csv");
  std::string line;
  std::getline(csv, line);
  std::vector<std::vector<double>> rows;
  while (std::getline(csv, line)) {
    std::vector<double> r;
    std::stringstream ss(line);
    for (std::string v; std::getline(ss, v, ',');) r.push_back(std::stod(v));
    rows.push_back(r);
  }
  ASSERT_EQ(rows.size(), 3u) << out;
  EXPECT_EQ(rows[0][0], 0);

  // The imported model's own teacher-forced loss on v.tsv, as metrics.csv prints it (%.6f).
  const TrainedModel m = load_model_dir(dir);
  data::TsvOptions o;
  o.src_tokens = o.tgt_tokens = data::Tokenization::SPACE;
  o.equal_lengths = true;
  std::vector<data::Example> valid;
  for (const auto& p : data::read_tsv(root + "/v.tsv", o).pairs)
    valid.push_back({m.src_vocab.encode(p.src), m.tgt_vocab.encode(p.tgt)});
  const train::TeacherForced tf = train::evaluate_teacher_forced(*m.model, valid, 256);
  char want[32];
  std::snprintf(want, sizeof want, "%.6f", tf.loss);
  EXPECT_EQ(rows[0][4], std::stod(want)) << "step-0 validation loss " << rows[0][4] << ", imported model " << tf.loss;
  // and its token accuracy as `tfm eval` decodes it (an encoder predicts one token per position).
  std::string eval_cmd = TFM_CLI_PATH;
  eval_cmd += " eval --model " + dir + " --data " + root + "/v.tsv --json --threads 1 2>/dev/null";
  ASSERT_EQ(tfm::testing::run_command(eval_cmd, &out), 0) << out;
  const double eval_acc = nlohmann::json::parse(out).at("token_accuracy").get<double>();
  EXPECT_NEAR(rows[0][5], eval_acc, 5e-7) << "step-0 token accuracy vs tfm eval";
  std::printf("nb4 fine-tune: valid loss %.6f -> %.6f -> %.6f (imported model %.6f), token acc %.4f -> %.4f\n",
              rows[0][4], rows[1][4], rows[2][4], tf.loss, rows[0][5], rows[2][5]);
  EXPECT_LT(rows[2][4], rows[0][4]) << "fine-tuning did not lower the validation loss";
  std::filesystem::remove_all(root);
}
