// tests/models/forward_test.cc — the module handle (include/tfm/models/forward.h):
// LoadedModule called repeatedly against run_forward, and load_module / read_forward_inputs.
//
// Method: one parity fixture per module kind (tests/fixtures/parity, PyTorch's weights and inputs;
// the parity suite checks the numbers against PyTorch). Here the reference is run_forward, which
// builds a fresh module per call: the handle runs the same operations on the same inputs, so every
// comparison is bitwise. "Not rebuilt" is observed directly: the parameters keep their storage
// across calls, and the packed-weight cache is filled by the first forward and only reused after.
// Error cases of the contract on files are in tests/cli/forward_cmd_test.cc.
#include "tfm/models/forward.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <stdexcept>
#include <utility>

#include "test_util.h"
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
  // Gradients on a bf16 handle are the bf16 training math (Autocast; its accuracy is the parity suite's
  // Parity/Bf16): those of a handle made in bf16, and not f32's; on an int8 handle the contract refuses them,
  // naming the inputs.
  NamedTensors with_grad = c.inputs;
  with_grad.insert("grad_output", tfm::testing::random_tensor(f32.shape(), 3));
  const NamedTensors g16 = run_forward(m, with_grad, "in.safetensors");
  const NamedTensors fresh = run_forward(c.config, c.weights, with_grad, "weights", Precision::BFLOAT16);
  m.set_precision(Precision::FLOAT32);
  const NamedTensors g32 = run_forward(m, with_grad, "in.safetensors");
  ASSERT_EQ(g16.names(), g32.names());
  for (const auto& [k, t] : g16) EXPECT_TRUE(tfm::testing::bitwise_equal(t, fresh.at(k), "bf16 " + k));
  EXPECT_GT(tfm::testing::rel_error(g16.at("output"), g32.at("output")), 0.0) << "bf16 must change the numbers";
  EXPECT_GT(tfm::testing::rel_error(g16.at("grad.linear2.weight"), g32.at("grad.linear2.weight")), 0.0);
  m.set_precision(Precision::INT8);
  try {
    run_forward(m, with_grad, "in.safetensors");
    ADD_FAILURE() << "int8 gradients were computed";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "in.safetensors: 'grad_output' asks for gradients, which int8 (inference only) "
                                     "does not compute; use f32 or bf16");
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

// Loading draws nothing from the process-wide generator (a user's manual_seed stream stays as it was, and
// two threads may load at once): the module is built for its weights, with its own generator.
TEST(LoadModule, DrawsNothingFromTheDefaultGenerator) {
  const Case c = load_case("transformer_pre_bf_masks");
  manual_seed(7);
  const Generator before = default_generator();
  LoadedModule a = load_module(c.dir + "/config.json", c.dir + "/weights.safetensors");
  const NamedTensors out = run_forward(c.config, c.weights, c.inputs);
  EXPECT_EQ(default_generator().seed, before.seed);
  EXPECT_EQ(default_generator().offset, before.offset);
  EXPECT_TRUE(tfm::testing::bitwise_equal(a.forward(c.inputs).at("output"), out.at("output"), "output"));
  // The module built for its weights is the module built and initialised, once the weights are in.
  LoadedModule b(parse_module_config(c.config));
  b.load_weights(c.weights);
  EXPECT_TRUE(tfm::testing::bitwise_equal(b.forward(c.inputs).at("output"), out.at("output"), "output"));
}

// int8 has no NaN or infinity: a weight holding one is refused by name (it would quantize to a finite value
// and give plausible numbers where float32, as PyTorch, gives NaN), once per set of weights.
TEST(LoadedModule, Int8RefusesANonFiniteWeightByName) {
  const Case c = load_case("enc_layer_masks_bool");
  NamedTensors w;
  for (const auto& [k, t] : c.weights) w.insert(k, k == "self_attn.out_proj.weight" ? t.clone() : t);
  w.at("self_attn.out_proj.weight").data()[5] = std::nanf("");
  LoadedModule m = LoadedModule::for_weights(parse_module_config(c.config), Precision::INT8);
  m.load_weights(w, "w.safetensors");
  try {
    m.forward(c.inputs);
    ADD_FAILURE() << "a NaN weight ran in int8";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "w.safetensors: tensor 'self_attn.out_proj.weight' holds NaN (element 5), which int8 cannot "
              "represent; run it in f32 or bf16");
  }
  m.set_precision(Precision::FLOAT32);  // float32 computes with it, as PyTorch does: NaN out
  const Tensor y = m.forward(c.inputs).at("output");
  EXPECT_TRUE(std::isnan(y.data()[0]));
  w.at("self_attn.out_proj.weight").data()[5] = 0.0f;  // finite again: int8 runs
  m.load_weights(w, "w.safetensors");
  m.set_precision(Precision::INT8);
  EXPECT_FALSE(std::isnan(m.forward(c.inputs).at("output").data()[0]));
}

// A module built for its weights computes nothing until they are in: its parameters hold no values.
TEST(LoadedModule, ForWeightsRefusesToComputeBeforeLoadWeights) {
  const Case c = load_case("enc_layer_masks_bool");
  LoadedModule m = LoadedModule::for_weights(parse_module_config(c.config));
  const std::string said =
      "LoadedModule: built by for_weights, its parameters hold no values yet: call load_weights (or set them through "
      "module()) before computing";
  for (const auto& run :
       std::vector<std::function<void()>>{[&] { m.forward(c.inputs); }, [&] { m.call(c.inputs); },
                                          [&] { m.forward_backward(c.inputs, Tensor::zeros({1})); }}) {
    try {
      run();
      ADD_FAILURE() << "computed on unset parameters";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), said);
    }
  }
  NamedTensors partial = c.weights;  // a failed load leaves it unset
  partial.erase("norm1.weight");
  EXPECT_THROW(m.load_weights(partial), std::invalid_argument);
  EXPECT_THROW(m.forward(c.inputs), std::invalid_argument);
  m.load_weights(c.weights);
  EXPECT_NO_THROW(m.forward(c.inputs));
}

// A handle moved from (by construction or assignment) holds no module: every member throws, saying so, instead of
// dereferencing the moved-away state (forward segfaulted); the handle it moved to runs as before, and a handle
// assigned to again is whole.
TEST(LoadedModule, MovedFromHandleThrowsSayingItHoldsNoModule) {
  const Case c = load_case("enc_layer_masks_bool");
  LoadedModule a = LoadedModule::for_weights(parse_module_config(c.config));
  a.load_weights(c.weights);
  const Tensor want = a.forward(c.inputs).at("output");
  LoadedModule b(std::move(a));
  LoadedModule d = LoadedModule::for_weights(parse_module_config(c.config));
  d = std::move(b);
  const std::string said =
      "LoadedModule: holds no module (moved from): call the handle it was moved to, or load one with load_module";
  for (LoadedModule* m : {&a, &b}) {
    for (const auto& run : std::vector<std::function<void()>>{
             [&] { m->forward(c.inputs); }, [&] { m->call(c.inputs); },
             [&] { m->forward_backward(c.inputs, Tensor::zeros({1})); }, [&] { run_forward(*m, c.inputs); },
             [&] { m->load_weights(c.weights); }, [&] { m->config(); }, [&] { m->precision(); },
             [&] { m->set_precision(Precision::BFLOAT16); }, [&] { m->module(); }, [&] { m->clear_packed_weights(); },
             [&] { m->packed_weights(); }, [&] { m->differentiable_inputs(); }}) {
      try {
        run();
        ADD_FAILURE() << "a moved-from handle ran";
      } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()), said);
      }
    }
  }
  EXPECT_TRUE(testing::bitwise_equal(d.forward(c.inputs).at("output"), want, "output"));
  a = std::move(d);  // assigned again: whole
  EXPECT_TRUE(testing::bitwise_equal(a.forward(c.inputs).at("output"), want, "output"));
}

TEST(LoadModule, ConfigErrorsStartWithThePath) {
  const std::string dir = tfm::testing::temp_dir("load_module");
  tfm::testing::spit(dir + "/c.json", R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 3})");
  try {
    load_module(dir + "/c.json", kFixtures + "enc_layer_defaults/weights.safetensors");
    ADD_FAILURE() << "a bad config was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), dir + "/c.json: config: d_model 8 is not divisible by nhead 3 (or set head_dim)");
  }
  std::filesystem::remove_all(dir);
}

// int8 is inference only: run_forward refuses gradients asked for in int8, and computes them in f32 and bf16.
TEST(RunForward, RejectsInt8Gradients) {
  const std::string config = R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2,
                                 "dim_feedforward": 16, "batch_first": true})";
  LoadedModule m(parse_module_config(config));
  const NamedTensors weights = m.module().state_dict();
  NamedTensors inputs{{"src", tfm::testing::random_tensor({1, 3, 8}, 1)}};
  EXPECT_NO_THROW(run_forward(config, weights, inputs, "w", Precision::INT8));
  inputs.insert("grad_output", tfm::testing::random_tensor({1, 3, 8}, 2));
  EXPECT_THROW(run_forward(config, weights, inputs, "w", Precision::INT8), std::invalid_argument);
  EXPECT_NO_THROW(run_forward(config, weights, inputs, "w", Precision::BFLOAT16));
  EXPECT_NO_THROW(run_forward(config, weights, inputs, "w", Precision::FLOAT32));
}

// nn.TransformerEncoder's nested-tensor path (src/models/forward.cc, encoder_forward): PyTorch's nested tensor
// never holds the padded positions, so nothing stored there reaches its output. A NaN or an infinity in a padded
// slot of src (an uninitialised padding buffer) gives the same bits as finite padding, in every precision, for
// the encoder and for a Transformer's; the regular path (enable_nested_tensor false) lets it through, as PyTorch's
// does (0 attention weight times NaN is NaN there too).
TEST(LoadedModule, NestedPathIgnoresWhatThePaddedPositionsHold) {
  const std::string layer = R"("d_model": 8, "nhead": 2, "dim_feedforward": 16, "dropout": 0.0, "batch_first": true)";
  const std::string encoder = R"({"module": "TransformerEncoder", "num_layers": 2, "norm": true, )" + layer + "}";
  const std::string transformer =
      R"({"module": "Transformer", "num_encoder_layers": 1, "num_decoder_layers": 1, )" + layer + "}";
  const Tensor src = tfm::testing::random_tensor({2, 6, 8}, 21);  // (B, S, D)
  const Tensor tgt = tfm::testing::random_tensor({2, 3, 8}, 22);  // (B, T, D)
  std::vector<uint8_t> pad(12, 0);
  pad[4] = pad[5] = 1;  // sequence 0: 4 positions, then 2 of padding
  const Tensor kpm = Tensor::from_bool({2, 6}, pad);
  auto inputs = [&](const std::string& config, const Tensor& x) {
    NamedTensors in{{"src", x}, {"src_key_padding_mask", kpm}};
    if (config == transformer) in.insert("tgt", tgt);
    return in;
  };
  manual_seed(5);
  for (const auto& [name, config] : {std::pair{"TransformerEncoder", encoder}, {"Transformer", transformer}}) {
    LoadedModule m(parse_module_config(config));
    for (const Precision p : {Precision::FLOAT32, Precision::BFLOAT16, Precision::INT8}) {
      m.set_precision(p);
      const Tensor want = m.forward(inputs(config, src)).at("output");
      for (const float junk : {std::nanf(""), INFINITY, -INFINITY, 1e30f}) {
        Tensor x = src.clone();
        std::fill_n(x.data() + (0 * 6 + 4) * 8, 8, junk);  // src[0, 4, :], a padded row
        x.data()[(0 * 6 + 5) * 8 + 3] = junk;              // src[0, 5, 3], in the other
        const std::string what = std::string(name) + " " + std::string(enum_name(p)) + " " + std::to_string(junk);
        EXPECT_TRUE(tfm::testing::bitwise_equal(m.forward(inputs(config, x)).at("output"), want, what));
      }
    }
  }
  NamedTensors regular = inputs(encoder, src.clone());
  regular.at("src").data()[(0 * 6 + 5) * 8 + 3] = std::nanf("");
  LoadedModule m(parse_module_config(R"({"module": "TransformerEncoder", "num_layers": 2, "norm": true,
                                          "enable_nested_tensor": false, )" +
                                     layer + "}"));
  EXPECT_TRUE(std::isnan(m.forward(regular).at("output").data()[0])) << "the regular path dropped the NaN";
}

}  // namespace
}  // namespace tfm
