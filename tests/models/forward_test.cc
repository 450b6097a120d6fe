// tests/models/forward_test.cc — the module handle (include/tfm/models/forward.h): ModuleConfig parsing,
// LoadedModule called repeatedly against run_forward, and load_module / read_forward_inputs.
//
// Method: one parity fixture per module kind (tests/fixtures/parity, PyTorch's weights and inputs;
// the parity suite checks the numbers against PyTorch). Here the reference is run_forward, which
// builds a fresh module per call: the handle runs the same operations on the same inputs, so every
// comparison is bitwise. "Not rebuilt" is observed directly: the parameters keep their storage
// across calls, and the packed-weight cache is filled by the first forward and only reused after.
// Error cases of the contract on files are in tests/cli/forward_cmd_test.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <stdexcept>

#include "test_util.h"
#include "tfm/models/forward.h"
#include "tfm/io/safetensors.h"

namespace tfm {
namespace {

const std::string kFixtures = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/parity/";

struct Case {
  std::string dir, config;
  NamedTensors weights, inputs;  // inputs without grad_output
  Tensor grad_output;
};

Case load_case(const std::string& name) {
  Case c;
  c.dir = kFixtures + name;
  c.config = tfm::testing::slurp(c.dir + "/config.json");
  c.weights = io::load_safetensors(c.dir + "/weights.safetensors").tensors;
  for (const auto& [k, t] : io::load_safetensors(c.dir + "/inputs.safetensors").tensors) {
    if (k == "grad_output") c.grad_output = t;
    else c.inputs.insert(k, t);
  }
  return c;
}

// One fixture per ModuleKind, with masks and causal flags among the inputs where the kind has them.
const char* const kCases[] = {"mha_causal_kpm", "enc_layer_masks_bool", "encoder_norm_post",
                              "dec_layer_masks", "decoder_norm_pre",   "transformer_pre_bf_masks"};

std::map<std::string, const float*> parameter_storage(LoadedModule& m) {
  std::map<std::string, const float*> out;
  for (const auto& [k, p] : m.module().state_dict()) out[k] = p.data();
  return out;
}

class Handle : public ::testing::TestWithParam<const char*> {};

TEST_P(Handle, RepeatedForwardEqualsRunForwardWithoutRebuilding) {
  const Case c = load_case(GetParam());
  const Tensor want = run_forward(c.config, c.weights, c.inputs).at("output");

  LoadedModule m(parse_module_config(c.config));
  m.load_weights(c.weights);
  const auto storage = parameter_storage(m);
  EXPECT_EQ(m.packed_weights(), 0u);
  size_t packed = 0;
  for (int call = 0; call < 3; ++call) {
    const NamedTensors out = m.forward(c.inputs);
    EXPECT_EQ(out.names(), std::vector<std::string>{"output"});
    EXPECT_TRUE(tfm::testing::bitwise_equal(out.at("output"), want, std::string(GetParam()) + " call " +
                                                                        std::to_string(call)));
    if (call == 0) packed = m.packed_weights();
    EXPECT_EQ(m.packed_weights(), packed) << "call " << call << " packed weights again";
  }
  EXPECT_GT(packed, 0u) << "forward did not run on packed weights";
  EXPECT_EQ(parameter_storage(m), storage) << "the module was rebuilt";
  EXPECT_EQ(InferenceMode::cached_weights(), 0u) << "no scope may stay open after forward";
}

TEST_P(Handle, RepeatedForwardBackwardEqualsRunForward) {
  const Case c = load_case(GetParam());
  ASSERT_TRUE(c.grad_output.defined());
  NamedTensors with_grad = c.inputs;
  with_grad.insert("grad_output", c.grad_output);
  const NamedTensors want = run_forward(c.config, c.weights, with_grad);

  LoadedModule m(parse_module_config(c.config));
  m.load_weights(c.weights);
  for (int call = 0; call < 2; ++call) {  // the second call must not accumulate into the first's gradients
    const NamedTensors got = call == 0 ? m.forward_backward(c.inputs, c.grad_output) : run_forward(m, with_grad);
    ASSERT_EQ(got.names(), want.names());
    for (const auto& [k, t] : want)
      EXPECT_TRUE(tfm::testing::bitwise_equal(got.at(k), t, std::string(GetParam()) + " " + k));
  }
  for (const auto& [k, p] : m.module().named_parameters()) EXPECT_FALSE(p.grad().defined()) << k;
}

INSTANTIATE_TEST_SUITE_P(Kinds, Handle, ::testing::ValuesIn(kCases));

TEST(LoadedModule, PrecisionIsTheHandles) {
  const Case c = load_case("enc_layer_defaults");
  const Tensor want = run_forward(c.config, c.weights, c.inputs, "weights", Precision::BFLOAT16).at("output");
  LoadedModule m(parse_module_config(c.config));
  m.load_weights(c.weights);
  const Tensor f32 = m.forward(c.inputs).at("output");
  m.set_precision(Precision::BFLOAT16);
  EXPECT_EQ(m.packed_weights(), 0u) << "weights packed in f32 kept after switching to bf16";
  EXPECT_TRUE(tfm::testing::bitwise_equal(m.forward(c.inputs).at("output"), want, "bf16"));
  EXPECT_GT(tfm::testing::rel_error(want, f32), 0.0) << "bf16 must change the numbers";
  // Gradients are float32 only: the contract refuses them on a bf16 handle, naming the inputs.
  NamedTensors with_grad = c.inputs;
  with_grad.insert("grad_output", tfm::testing::random_tensor(f32.shape(), 3));
  try {
    run_forward(m, with_grad, "in.safetensors");
    ADD_FAILURE() << "bf16 gradients were computed";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "in.safetensors: 'grad_output' asks for gradients, which are computed in f32 only (got bf16)");
  }
}

TEST(LoadedModule, LoadWeightsReplacesThePackedCopies) {
  const Case c = load_case("enc_layer_defaults");
  LoadedModule m(parse_module_config(c.config));
  const Tensor init = m.forward(c.inputs).at("output");  // packs the initial weights
  m.load_weights(c.weights);
  const Tensor loaded = m.forward(c.inputs).at("output");
  EXPECT_TRUE(tfm::testing::bitwise_equal(loaded, run_forward(c.config, c.weights, c.inputs).at("output"), "loaded"));
  EXPECT_GT(tfm::testing::rel_error(loaded, init), 0.0);
}

TEST(LoadedModule, InputErrorsStartWithTheSource) {
  const Case c = load_case("enc_layer_defaults");
  LoadedModule m(parse_module_config(c.config));
  NamedTensors bad = c.inputs;
  bad.insert("tgt", Tensor::zeros({1}));
  try {
    m.forward(bad, "x.safetensors");
    ADD_FAILURE() << "a stray input was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("x.safetensors: unexpected tensor 'tgt'", 0), 0u) << e.what();
  }
  NamedTensors with_grad = c.inputs;  // grad_output belongs to the contract, not to forward()
  with_grad.insert("grad_output", tfm::testing::random_tensor({3, 2, 8}, 5));
  EXPECT_THROW(m.forward(with_grad), std::invalid_argument);
}

// call() is the bare forward: under autograd, gradients reach inputs that require them.
TEST(LoadedModule, CallRecordsTheTape) {
  const Case c = load_case("enc_layer_defaults");
  LoadedModule m(parse_module_config(c.config));
  m.load_weights(c.weights);
  Tensor src = c.inputs.at("src").clone();
  src.requires_grad_(true);
  Tensor y = m.call({{"src", src}});
  y.backward(tfm::testing::random_tensor(y.shape(), 4));
  EXPECT_TRUE(src.grad().defined());
  for (const auto& [k, p] : m.module().named_parameters()) EXPECT_TRUE(p.grad().defined()) << k;
  EXPECT_EQ(m.differentiable_inputs(), std::vector<std::string>{"src"});
}

// ---- ModuleConfig ---------------------------------------------------------------------------------
TEST(ModuleConfig, DefaultsComeFromTheOptionStructs) {
  const ModuleConfig t = parse_module_config(R"({"module": "Transformer"})");
  const TransformerLayerOptions o;
  EXPECT_EQ(t.kind, ModuleKind::TRANSFORMER);
  EXPECT_EQ(t.layer.d_model, o.d_model);
  EXPECT_EQ(t.layer.nhead, o.nhead);
  EXPECT_EQ(t.layer.dim_feedforward, o.dim_feedforward);
  EXPECT_EQ(t.layer.activation, o.activation);
  EXPECT_EQ(t.num_encoder_layers, 6);  // nn.Transformer's defaults
  EXPECT_EQ(t.num_decoder_layers, 6);

  const ModuleConfig e = parse_module_config(
      R"({"module": "TransformerEncoder", "d_model": 8, "nhead": 2, "num_layers": 3, "norm": true,
          "activation": "swiglu", "batch_first": true, "enable_nested_tensor": false})");
  EXPECT_EQ(e.kind, ModuleKind::TRANSFORMER_ENCODER);
  EXPECT_EQ(e.num_layers, 3);
  EXPECT_TRUE(e.norm);
  EXPECT_EQ(e.layer.activation, Activation::SWIGLU);
  EXPECT_TRUE(e.layer.batch_first);

  const ModuleConfig a = parse_module_config(R"({"module": "MultiheadAttention", "embed_dim": 8, "num_heads": 4,
                                                 "kdim": 8, "bias": false})");
  EXPECT_EQ(a.kind, ModuleKind::MULTIHEAD_ATTENTION);
  EXPECT_EQ(a.attention.embed_dim, 8);
  EXPECT_EQ(a.attention.num_heads, 4);
  EXPECT_FALSE(a.attention.bias);
  EXPECT_EQ(a.attention.dropout, 0.0f);
}

TEST(ModuleConfig, EveryKindByItsPyTorchName) {
  const std::map<ModuleKind, std::string> sizes = {
      {ModuleKind::MULTIHEAD_ATTENTION, R"("embed_dim": 4, "num_heads": 2)"},
      {ModuleKind::TRANSFORMER_ENCODER_LAYER, R"("d_model": 4, "nhead": 2)"},
      {ModuleKind::TRANSFORMER_ENCODER, R"("d_model": 4, "nhead": 2, "num_layers": 1)"},
      {ModuleKind::TRANSFORMER_DECODER_LAYER, R"("d_model": 4, "nhead": 2)"},
      {ModuleKind::TRANSFORMER_DECODER, R"("d_model": 4, "nhead": 2, "num_layers": 1)"},
      {ModuleKind::TRANSFORMER, R"("d_model": 4, "nhead": 2)"}};
  for (const auto& [kind, args] : sizes) {
    const std::string json = std::string(R"({"module": ")") + std::string(enum_name(kind)) + R"(", )" + args + "}";
    EXPECT_EQ(parse_module_config(json).kind, kind) << json;
    EXPECT_EQ(LoadedModule(parse_module_config(json)).config().kind, kind) << json;
  }
}

TEST(ModuleConfig, ErrorsNameTheKey) {
  auto error_of = [](const std::string& json) -> std::string {
    try {
      parse_module_config(json);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "n_head": 2})"),
            "config: unknown key 'n_head'");
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoderLayer", "d_model": "8", "nhead": 2})"),
            "config: 'd_model' must be an integer, got \"8\"");
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoder", "d_model": 8, "nhead": 2})"),
            "config: missing required key 'num_layers'");
  EXPECT_EQ(error_of(R"({"module": "MultiheadAttention", "embed_dim": 8, "num_heads": 2, "vdim": 4})"),
            "config: 'vdim' different from embed_dim is not supported");
  // A wrong type is reported before an unknown key, whatever their order in the file.
  EXPECT_EQ(error_of(R"({"module": "TransformerEncoderLayer", "zz": 1, "d_model": 8, "nhead": 2, "bias": 1})"),
            "config: 'bias' must be a boolean, got 1");
}

// ---- the contract on files ------------------------------------------------------------------------
TEST(LoadModule, FilesGiveTheSameModuleAsMemory) {
  const Case c = load_case("encoder_norm_post");
  LoadedModule m = load_module(c.dir + "/config.json", c.dir + "/weights.safetensors");
  EXPECT_EQ(m.config().kind, ModuleKind::TRANSFORMER_ENCODER);
  const NamedTensors inputs = read_forward_inputs(c.dir + "/inputs.safetensors");
  EXPECT_TRUE(inputs.contains("grad_output"));
  const NamedTensors got = run_forward(m, inputs);
  NamedTensors with_grad = c.inputs;
  with_grad.insert("grad_output", c.grad_output);
  const NamedTensors want = run_forward(c.config, c.weights, with_grad);
  ASSERT_EQ(got.names(), want.names());
  for (const auto& [k, t] : want) EXPECT_TRUE(tfm::testing::bitwise_equal(got.at(k), t, k));
}

TEST(LoadModule, ConfigErrorsStartWithThePath) {
  const std::string dir = tfm::testing::temp_dir("load_module");
  tfm::testing::spit(dir + "/c.json", R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 3})");
  try {
    load_module(dir + "/c.json", kFixtures + "enc_layer_defaults/weights.safetensors");
    ADD_FAILURE() << "a bad config was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), dir + "/c.json: d_model 8 is not divisible by nhead 3");
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tfm
