// tests/models/quantize_test.cc — src/models/quantize.cc: int8-quantized state_dicts and model
// directories (tfm/models/quantize.h).
//
// Method: the quantization rule is checked on a hand-made state_dict (matrices become I8 with per-row
// scales, everything else stays, and the stored scales are the fixed point the int8 packing finds
// again); a directory written by a tiny training run is quantized, read back and run; broken files are
// written by hand and every error is checked by its message, which must name the file and the key.
// The quantized directory's int8 run is compared with the original's: the integers are identical and
// the scales differ by at most a few float32 ulps (the fixed point), so the outputs agree to float32
// rounding (close_rel 1e-5), while both differ from f32 by the quantization (> 1e-4).
#include "tfm/models/quantize.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "io/file_util.h"
#include "kernels/kernels.h"
#include "tensor_impl.h"
#include "test_util.h"
#include "tfm/data/tasks.h"
#include "tfm/inference.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/model_dir.h"
#include "tfm/train/trainer.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;
using testing::random_tensor;
using testing::temp_dir;

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no exception)";
}

train::TrainConfig tiny_config(const std::string& out) {
  train::TrainConfig c;
  c.task = data::Task::REVERSE;
  c.task_train_size = 64;
  c.task_valid_size = 16;
  c.model.arch = Arch::SEQ2SEQ;
  c.model.d_model = 16;
  c.model.nhead = 2;
  c.model.num_encoder_layers = 1;
  c.model.num_decoder_layers = 1;
  c.model.dim_feedforward = 32;
  c.max_steps = 2;
  c.eval_every = 2;
  c.batch.batch_size = 32;
  c.seed = 5;
  c.out_dir = out;
  return c;
}

const std::string& trained_dir() {  // 2 steps of a tiny seq2seq run on the reverse task
  static const std::string dir = [] {
    const train::TrainConfig c = tiny_config(temp_dir("q_run") + "/run");
    train::run_training(c);
    return c.out_dir;
  }();
  return dir;
}

const std::string& quantized_dir() {
  static const std::string dir = [] {
    const std::string d = temp_dir("q_out") + "/int8";
    quantize_model_dir(trained_dir(), d);
    return d;
  }();
  return dir;
}

TEST(QuantizeStateDict, MatricesBecomeInt8RowsAtTheFixedPoint) {
  NamedTensors state;
  state.insert("lin.weight", random_tensor({7, 19}, 3));
  state.insert("lin.bias", random_tensor({7}, 4));
  Tensor z = Tensor::zeros({2, 3});  // a row of zeros: scale 0
  state.insert("zeros.weight", z);
  const QuantizedStateDict q = quantize_state_dict(state);
  ASSERT_EQ(q.int8.size(), 2u);
  EXPECT_TRUE(q.f32.contains("lin.bias")) << "vectors stay float32";
  EXPECT_FALSE(q.f32.contains("lin.weight"));
  const io::Int8Tensor& w = q.int8.at("lin.weight");
  const Tensor& s = q.f32.at("lin.weight.scale");
  ASSERT_EQ(w.shape, (Shape{7, 19}));
  ASSERT_EQ(s.shape(), (Shape{7}));
  const float* wp = state.at("lin.weight").data();
  std::vector<float> back(7 * 19);
  for (int64_t r = 0; r < 7; ++r) {
    int amax = 0;
    for (int64_t c = 0; c < 19; ++c) {
      const int v = w.data[r * 19 + c];
      amax = std::max(amax, std::abs(v));
      back[r * 19 + c] = float(v) * s.data()[r];
      // Half a step from the weight (the fixed point moves the scale by ulps only).
      EXPECT_LE(std::fabs(back[r * 19 + c] - wp[r * 19 + c]), s.data()[r] * (0.5 + 1e-5)) << r << "," << c;
    }
    EXPECT_EQ(amax, 127) << "row " << r << " spans the full range";
  }
  // Quantizing the dequantized weight (what Precision::INT8 does when it packs it) gives back the
  // stored integers and scales, bit for bit.
  std::vector<int8_t> q2(7 * 19);
  std::vector<float> s2(7);
  kernels::quantize_rows_s8(back.data(), 7, 19, 19, q2.data(), s2.data());
  EXPECT_EQ(q2, w.data);
  EXPECT_TRUE(testing::bitwise_equal(s2, std::vector<float>(s.data(), s.data() + 7), "scales"));
  EXPECT_EQ(q.f32.at("zeros.weight.scale").data()[0], 0.0f);
}

TEST(QuantizeModelDir, WritesAQuantizedCopyThatRunsInInt8) {
  const std::string in = trained_dir(), out = quantized_dir();
  for (const char* f : {"config.json", "model.safetensors"}) EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  EXPECT_TRUE(fs::exists(model_dir::src_vocab_path(out)));
  EXPECT_FALSE(fs::exists(out + "/trainer_state.safetensors")) << "the training run's files stay behind";
  const io::SafeTensorsFile f = io::load_safetensors(out + "/model.safetensors", io::LoadOptions{.keep_int8 = true});
  EXPECT_TRUE(is_quantized(f));
  EXPECT_FALSE(f.int8.empty());
  for (const auto& [k, q] : f.int8) {
    EXPECT_EQ(q.shape.size(), 2u) << k;
    EXPECT_EQ(f.dtypes.at(k + ".scale"), "F32") << k;
  }
  EXPECT_TRUE(is_quantized_model_dir(out));
  EXPECT_FALSE(is_quantized_model_dir(in));

  const TrainedModel a = load_model_dir(in), b = load_model_dir(out);
  EXPECT_FALSE(a.quantized);
  EXPECT_TRUE(b.quantized);
  EXPECT_EQ(a.model->config().d_model, b.model->config().d_model);
  // The encoder's output: the quantized directory in int8 against the original in int8 and in f32.
  const std::vector<int32_t> src = {4, 5, 6, 7, 8, 9, 4, 5};
  const auto encode = [&](const TrainedModel& m, Precision p) {
    InferenceMode scope(p);
    return m.model->encode(src, 2, 4);
  };
  const Tensor a8 = encode(a, Precision::INT8), b8 = encode(b, Precision::INT8), a32 = encode(a, Precision::FLOAT32),
               b32 = encode(b, Precision::FLOAT32);
  // The embeddings are looked up, not multiplied: the quantized directory's are its dequantized
  // rows. Given those, the original in int8 computes what the quantized directory does (the same
  // integers, scales within ulps).
  TrainedModel c = load_model_dir(in);
  NamedTensors cp = c.model->named_parameters();
  const NamedTensors bp = b.model->named_parameters();
  int embeddings = 0;
  for (auto& [k, t] : cp)
    if (k.find("embedding") != std::string::npos) {
      std::memcpy(t.data(), bp.at(k).data(), sizeof(float) * t.numel());
      ++embeddings;
    }
  EXPECT_GT(embeddings, 0);
  EXPECT_TRUE(testing::close_rel(b8, encode(c, Precision::INT8), 1e-5, "quantized dir int8 vs original int8"));
  EXPECT_GT(testing::rel_error(b8, a8), 0.0) << "the quantized embeddings are used";
  EXPECT_GT(testing::rel_error(a8, a32), 1e-4) << "int8 really ran";
  EXPECT_GT(testing::rel_error(b32, a32), 1e-4) << "--dtype f32 on a quantized directory runs its dequantized weights";
  EXPECT_LT(fs::file_size(out + "/model.safetensors"), fs::file_size(in + "/model.safetensors") / 2);
}

// A read-only load (WeightsLoad::MAP_READ_ONLY) of a quantized directory: each matrix's float32 values are
// computed only when read, int8 inference packs the stored integers instead and looks up an embedding's
// rows from them (computing no matrix), and every output and value is bitwise the copying load's.
TEST(QuantizeModelDir, ReadOnlyLoadPacksTheIntegersAndComputesFloatsOnlyWhenRead) {
  const std::string out = quantized_dir();
  const TrainedModel copy = load_model_dir(out), lazy = load_model_dir(out, WeightsLoad::MAP_READ_ONLY);
  ASSERT_TRUE(lazy.quantized);
  const NamedTensors lp = lazy.model->named_parameters(), cp = copy.model->named_parameters();
  int matrices = 0;
  for (const auto& [k, t] : lp)
    if (t.dim() == 2) {
      EXPECT_FALSE(materialized(t)) << k;
      ++matrices;
    }
  EXPECT_GT(matrices, 2);
  const std::vector<int32_t> src = {4, 5, 6, 7, 8, 9, 4, 5};
  const auto encode = [&](const TrainedModel& m, Precision p) {
    InferenceMode scope(p);
    return m.model->encode(src, 2, 4);
  };
  EXPECT_TRUE(testing::bitwise_equal(encode(lazy, Precision::INT8), encode(copy, Precision::INT8), "int8"));
  // No matrix was computed: the Linear layers packed their integers, the embedding computed the rows it
  // looked up.
  for (const auto& [k, t] : lp) {
    if (t.dim() == 2) {
      EXPECT_FALSE(materialized(t)) << k;
    }
  }
  EXPECT_TRUE(testing::bitwise_equal(encode(lazy, Precision::FLOAT32), encode(copy, Precision::FLOAT32), "f32"));
  EXPECT_TRUE(testing::bitwise_equal(encode(lazy, Precision::BFLOAT16), encode(copy, Precision::BFLOAT16), "bf16"));
  // f32 and bf16 packed the values q·scale computed into a buffer of the packing's own: the matrices stay
  // uncomputed, so the run holds the packed copies and not the float32 matrices beside them too.
  for (const auto& [k, t] : lp) {
    if (t.dim() == 2) {
      EXPECT_FALSE(materialized(t)) << k;
    }
  }
  for (const auto& [k, t] : lp) EXPECT_TRUE(testing::bitwise_equal(t, cp.at(k), k));  // (computed when read)
}

// A file whose int8 rows are not quantize's fixed point (another tool's: here one row halved, its largest
// |q| 63, not 127): the read-only load packs the quantized values, as the copying load does, not the
// stored integers — the same outputs bit for bit.
TEST(QuantizeModelDir, ReadOnlyLoadOfRowsOffTheFixedPointRunsAsTheCopy) {
  const std::string d = temp_dir("q_offpoint") + "/int8";
  fs::copy(quantized_dir(), d, fs::copy_options::recursive);
  io::SafeTensorsFile f = io::load_safetensors(d + "/model.safetensors", io::LoadOptions{.keep_int8 = true});
  int changed = 0;
  for (auto& [k, q] : f.int8)
    if (k.find("encoder.layers.0.linear1.weight") != std::string::npos) {
      for (int64_t c = 0; c < q.shape[1]; ++c) q.data[c] = static_cast<int8_t>(q.data[c] / 2);
      ++changed;
    }
  ASSERT_EQ(changed, 1);
  io::save_safetensors(d + "/model.safetensors", f.tensors, f.metadata, f.int8);
  const TrainedModel copy = load_model_dir(d), lazy = load_model_dir(d, WeightsLoad::MAP_READ_ONLY);
  const std::vector<int32_t> src = {4, 5, 6, 7, 8, 9, 4, 5};
  const auto encode = [&](const TrainedModel& m) {
    InferenceMode scope(Precision::INT8);
    return m.model->encode(src, 2, 4);
  };
  EXPECT_TRUE(testing::bitwise_equal(encode(lazy), encode(copy), "int8"));
  const TrainedModel original = load_model_dir(quantized_dir());
  EXPECT_GT(testing::rel_error(encode(copy), encode(original)), 0.0) << "the changed row is used";
}

TEST(QuantizeModelDir, RefusesAnExistingOutUnlessForcedAndQuantizedInput) {
  const std::string in = trained_dir();
  const std::string out = temp_dir("q_force") + "/int8";
  fs::create_directories(out);
  std::ofstream(out + "/stale.txt") << "x";
  EXPECT_NE(error_of<std::invalid_argument>([&] { quantize_model_dir(in, out); }).find("exists (give --force"),
            std::string::npos);
  EXPECT_TRUE(fs::exists(out + "/stale.txt")) << "a refused run leaves --out alone";
  // --force replaces a model directory (a training run's files and a killed writer's leftovers included), and
  // refuses one holding anything else, which replacing it would delete.
  EXPECT_EQ(error_of<std::invalid_argument>([&] { quantize_model_dir(in, out, /*force=*/true); }),
            "quantize: " + out +
                " holds 'stale.txt', which is not a model directory's file: --force replaces a model "
                "directory and deletes nothing else (choose another --out, or move it away)");
  EXPECT_TRUE(fs::exists(out + "/stale.txt")) << "a refused run leaves --out alone";
  fs::remove(out + "/stale.txt");
  for (const char* f : {"config.json", "model.safetensors", "trainer_state.safetensors", "metrics.csv",
                        ".model.safetensors.tmp.123.0.45"})
    std::ofstream(out + "/" + f) << "x";
  fs::create_directories(out + "/best");
  quantize_model_dir(in, out, /*force=*/true);
  EXPECT_FALSE(fs::exists(out + "/metrics.csv")) << "--force replaces the directory whole";
  EXPECT_FALSE(fs::exists(out + "/best"));
  EXPECT_TRUE(is_quantized_model_dir(out));
  for (const auto& e : fs::directory_iterator(fs::path(out).parent_path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "left behind: " << e.path();
  const std::string again = temp_dir("q_again") + "/int8";
  EXPECT_NE(error_of<std::invalid_argument>([&] { quantize_model_dir(out, again); }).find("quantized already"),
            std::string::npos);
  // --force never deletes the model it reads: --out the model directory, or a directory holding it.
  EXPECT_NE(error_of<std::runtime_error>([&] { quantize_model_dir(in, in, true); }).find("output directory is " + in),
            std::string::npos);
  const std::string parent = fs::path(in).parent_path().string();
  EXPECT_NE(error_of<std::runtime_error>([&] { quantize_model_dir(in, parent + "/", true); }).find("holds " + in),
            std::string::npos);
  EXPECT_TRUE(fs::exists(in + "/model.safetensors"));
}

// Staging directories of --out ('.<name>.tmp.<pid>', io::StagedDirectory's) that killed runs left are deleted by
// the next run into it; one whose writer lives (it holds the directory's flock, here this test's) is left alone.
// A stop asked for after the files are written (the last moment, SIGINT in `tfm quantize`) writes nothing and
// deletes its own staging directory.
TEST(QuantizeModelDir, AStopWritesNothingAndKilledRunsLeftoversGo) {
  const std::string in = trained_dir(), parent = temp_dir("q_stop"), out = parent + "/int8";
  const auto staging = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(parent))
      if (e.path().filename().string().rfind(".int8.tmp.", 0) == 0) names.push_back(e.path().filename().string());
    return names;
  };
  int asked = 0;
  bool written = false;  // whether the last ask saw the staging directory's weights
  EXPECT_FALSE(quantize_model_dir(in, out, false, [&] {
    ++asked;
    written = false;
    for (const std::string& name : staging())  // ours: ".int8.tmp.<pid>.<n>.<clock>"
      written |= name.rfind(".int8.tmp." + std::to_string(::getpid()) + ".", 0) == 0 &&
                 fs::exists(parent + "/" + name + "/model.safetensors");
    return written;  // stop once the files are written
  }));
  EXPECT_TRUE(written);
  EXPECT_GT(asked, 2) << "asked before each matrix too";
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(staging().empty()) << "the stopped run's staging directory is gone";
  EXPECT_FALSE(quantize_model_dir(in, out, false, [] { return true; })) << "a stop before the first matrix";
  EXPECT_TRUE(staging().empty());

  for (const char* killed : {".int8.tmp.999999", ".int8.tmp.999998", ".int8.tmp.999998.old"}) {
    fs::create_directories(parent + "/" + killed);
    std::ofstream(parent + "/" + killed + "/model.safetensors") << "partial";
  }
  fs::create_directories(parent + "/.int8.tmp.999997");  // a live writer's: its flock held
  const int fd = ::open((parent + "/.int8.tmp.999997").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_TRUE(quantize_model_dir(in, out));
  EXPECT_EQ(staging(), std::vector<std::string>{".int8.tmp.999997"});
  ::close(fd);
  EXPECT_TRUE(is_quantized_model_dir(out));
  EXPECT_TRUE(quantize_model_dir(in, out, /*force=*/true));  // its writer gone (the lock closed): deleted
  EXPECT_TRUE(staging().empty());
  fs::remove_all(parent);
}

// --force never replaces a directory a training run holds the lock of (its next checkpoint would land beside the
// new model's files): refused, naming why, with nothing written; once the lock is released it goes ahead.
TEST(QuantizeModelDir, ForceRefusesARunningTrainingRunsDirectory) {
  const std::string in = trained_dir(), out = temp_dir("q_locked") + "/run";
  fs::copy(in, out, fs::copy_options::recursive);
  {
    io::DirectoryLock run(out, "locked by the test");
    try {
      quantize_model_dir(in, out, /*force=*/true);
      ADD_FAILURE() << "replaced a locked run directory";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(out + ": a tfm train is running in this directory"), std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(is_quantized_model_dir(out));
  }
  EXPECT_TRUE(quantize_model_dir(in, out, /*force=*/true));
  EXPECT_TRUE(is_quantized_model_dir(out));
  fs::remove_all(fs::path(out).parent_path());
}

// A config.json that no longer fits the weights: the error names the dtype the file stores a matrix in (I8),
// not its dequantized float32 view, for the read-only load and the copying one.
TEST(QuantizeModelDir, ShapeErrorsNameTheStoredInt8) {
  const std::string d = temp_dir("q_cfg") + "/int8";
  fs::copy(quantized_dir(), d, fs::copy_options::recursive);
  std::string config = io::read_file(d + "/config.json");
  const std::string width = "\"d_model\": 16";
  const size_t at = config.find(width);
  ASSERT_NE(at, std::string::npos) << config;
  config.replace(at, width.size(), "\"d_model\": 32");
  io::write_file_atomic(d + "/config.json", config);
  // The first parameter load_state_dict visits (a matrix), as stored and as the edited config.json wants it.
  const TrainedModel edited = load_model_dir(d, WeightsLoad::NONE);
  const NamedTensors params = edited.model->named_parameters();
  const auto& [first_matrix, wanted] = *params.begin();
  const io::SafeTensorsFile stored = io::load_safetensors(d + "/model.safetensors", io::LoadOptions{.keep_int8 = true});
  ASSERT_TRUE(stored.int8.contains(first_matrix)) << first_matrix;
  const Shape shape = stored.int8.at(first_matrix).shape;
  ASSERT_NE(shape, wanted.shape());
  for (WeightsLoad how : {WeightsLoad::MAP_READ_ONLY, WeightsLoad::COPY}) {
    const std::string e = error_of<std::invalid_argument>([&] { load_model_dir(d, how); });
    EXPECT_EQ(e, d + "/model.safetensors: key '" + first_matrix + "' has I8" + shape_str(shape) +
                     " (a quantized matrix), expected " + describe(wanted));
  }
  // A matrix no parameter takes (here: the parameters' first one renamed).
  const std::string e2 = temp_dir("q_extra") + "/int8";
  fs::copy(quantized_dir(), e2, fs::copy_options::recursive);
  io::SafeTensorsFile f = io::load_safetensors(e2 + "/model.safetensors", io::LoadOptions{.keep_int8 = true});
  NamedTensors f32 = f.tensors;
  std::map<std::string, io::Int8Tensor> int8 = f.int8;
  int8.emplace("extra.weight", int8.at(first_matrix));
  f32.insert("extra.weight.scale", f32.at(first_matrix + ".scale"));
  io::save_safetensors(e2 + "/model.safetensors", f32, f.metadata, int8);
  EXPECT_EQ(error_of<std::invalid_argument>([&] { load_model_dir(e2); }),
            e2 + "/model.safetensors: unexpected key 'extra.weight' (I8" + shape_str(shape) + ", a quantized matrix)");
}

TEST(QuantizeModelDir, TrainingFromItIsRefusedByName) {
  train::TrainConfig c = tiny_config(temp_dir("q_init") + "/run");
  c.init_from = quantized_dir();
  const std::string e = error_of<std::invalid_argument>([&] { train::run_training(c); });
  EXPECT_NE(e.find("int8-quantized"), std::string::npos) << e;
  EXPECT_NE(e.find(quantized_dir()), std::string::npos) << e;
}

// ---- validation of a quantized file ---------------------------------------------------------------------

io::Int8Tensor i8(Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  io::Int8Tensor t;
  t.shape = shape;
  t.data.assign(static_cast<size_t>(n), 3);
  return t;
}

std::string dequantize_error(const NamedTensors& f32, const std::map<std::string, io::Int8Tensor>& int8) {
  const std::string path = temp_dir("q_bad") + "/model.safetensors";
  io::save_safetensors(path, f32, {{QUANTIZATION_METADATA_KEY, QUANTIZATION_INT8}}, int8);
  const io::SafeTensorsFile f = io::load_safetensors(path, io::LoadOptions{.keep_int8 = true});
  return error_of<io::SafeTensorsError>([&] { dequantize_state_dict(f); });
}

TEST(DequantizeStateDict, DequantizesAndNamesTheKeyOfEveryBadTensor) {
  {  // a good file: q·scale per row
    const std::string path = temp_dir("q_good") + "/model.safetensors";
    NamedTensors f32;
    f32.insert("w.scale", Tensor::from_vector({2}, {0.5f, 2.0f}));
    f32.insert("b", Tensor::from_vector({2}, {1.f, 2.f}));
    io::save_safetensors(path, f32, {{QUANTIZATION_METADATA_KEY, QUANTIZATION_INT8}}, {{"w", i8({2, 3})}});
    const NamedTensors s = dequantize_state_dict(io::load_safetensors(path, io::LoadOptions{.keep_int8 = true}));
    ASSERT_TRUE(s.contains("w"));
    EXPECT_FALSE(s.contains("w.scale"));
    EXPECT_EQ(s.at("w").shape(), (Shape{2, 3}));
    EXPECT_EQ(s.at("w").data()[0], 1.5f);  // 3 × 0.5
    EXPECT_EQ(s.at("w").data()[5], 6.0f);  // 3 × 2
  }
  {  // into a model's tensors: a matrix of the same key and shape is written there (loading it copies
     // nothing, and no second float copy exists); another shape or an absent key gets a tensor of its own
    const std::string path = temp_dir("q_into") + "/model.safetensors";
    NamedTensors f32;
    f32.insert("w.scale", Tensor::from_vector({2}, {0.5f, 2.0f}));
    f32.insert("u.scale", Tensor::from_vector({2}, {1.0f, 1.0f}));
    f32.insert("x.scale", Tensor::from_vector({1}, {4.0f}));
    io::save_safetensors(path, f32, {{QUANTIZATION_METADATA_KEY, QUANTIZATION_INT8}},
                         {{"w", i8({2, 3})}, {"u", i8({2, 2})}, {"x", i8({1, 2})}});
    NamedTensors params;
    params.insert("w", Tensor::zeros({2, 3}));
    params.insert("u", Tensor::zeros({2, 5}));  // another shape: left alone
    const io::SafeTensorsFile f = io::load_safetensors(path, io::LoadOptions{.keep_int8 = true});
    const NamedTensors s = dequantize_state_dict(f, &params);
    EXPECT_EQ(s.at("w").data(), params.at("w").data()) << "written into the model's tensor";
    EXPECT_EQ(params.at("w").data()[0], 1.5f);
    EXPECT_EQ(params.at("w").data()[5], 6.0f);
    EXPECT_NE(s.at("u").data(), params.at("u").data());
    EXPECT_EQ(params.at("u").data()[0], 0.0f);
    EXPECT_EQ(s.at("x").data()[1], 12.0f);  // 3 × 4, a key params lacks
    const NamedTensors plain = dequantize_state_dict(f);
    for (const char* k : {"w", "u", "x"}) EXPECT_TRUE(testing::bitwise_equal(s.at(k), plain.at(k), k));
  }
  NamedTensors ok;
  ok.insert("w.scale", Tensor::from_vector({2}, {0.5f, 2.0f}));
  std::string e = dequantize_error({}, {{"w", i8({2, 3})}});
  EXPECT_NE(e.find("'w': I8 matrix without its per-row scales 'w.scale'"), std::string::npos) << e;
  NamedTensors wrong_shape;
  wrong_shape.insert("w.scale", Tensor::from_vector({3}, {1.f, 1.f, 1.f}));
  e = dequantize_error(wrong_shape, {{"w", i8({2, 3})}});
  EXPECT_NE(e.find("'w.scale': shape (3,), expected (2,)"), std::string::npos) << e;
  e = dequantize_error({}, {{"w", i8({2, 3})}, {"w.scale", i8({2})}});
  EXPECT_NE(e.find("'w.scale': dtype I8, expected F32"), std::string::npos) << e;
  e = dequantize_error(ok, {{"w", i8({2, 3})}, {"b", i8({2})}});
  EXPECT_NE(e.find("'b': I8 of shape (2,) where F32 is required"), std::string::npos) << e;
  NamedTensors orphan;
  orphan.insert("v.scale", Tensor::from_vector({2}, {1.f, 1.f}));
  e = dequantize_error(orphan, {});
  EXPECT_NE(e.find("'v.scale': a scale without its I8 matrix 'v'"), std::string::npos) << e;
  NamedTensors negative;
  negative.insert("w.scale", Tensor::from_vector({2}, {0.5f, -1.f}));
  e = dequantize_error(negative, {{"w", i8({2, 3})}});
  EXPECT_NE(e.find("'w.scale': element 1 is -1, expected"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << "one line";
  NamedTensors huge;  // finite, but 128·scale is not: the values q·scale (q down to −128) could be infinite
  huge.insert("w.scale", Tensor::from_vector({2}, {3e38f, 0.5f}));
  e = dequantize_error(huge, {{"w", i8({2, 3})}});
  EXPECT_NE(e.find("'w.scale': element 0 is 3e+38, expected"), std::string::npos) << e;
  EXPECT_NE(e.find("expected a finite scale ≥ 0 (at most FLT_MAX / 128)"), std::string::npos) << e;
}

}  // namespace
}  // namespace tfm
