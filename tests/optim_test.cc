// tests/optim_test.cc — SGD, Adam, AdamW (betas, weight decay on every parameter or on the matrices
// only) and clip_grad_norm against PyTorch.
//
// Golden values: tests/fixtures/optim/optim.json, written by tests/gen/gen_optim.py with
// torch.optim (1.13) from the same initial parameters and per-step gradients (one parameter gets
// no gradient on the first two steps, so lazy state and torch's per-parameter step count matter).
//
// Tolerance. tfm and torch perform the same float32 operations in the same order, but ATen may
// fuse a multiply-add (FMA, one rounding) where tfm rounds twice, and divides by a scalar through
// its reciprocal; each such difference is ≤ 1 ulp of an intermediate. Per step, the new parameter
// p + Δ therefore differs by ≤ ~2 ulp(|p|) (rounding of the sum) plus a few ulp of |Δ| ≤ |p|-scale,
// and the difference carries into later steps through p, m, v. So after t steps we allow
// |actual − expected| ≤ 4·t·ε·max(1, |expected|), ε = 2⁻²³. (Measured: within 1·t·ε.)
// State round trip and determinism are checked bitwise: same operations, same inputs.
#include "tfm/optim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "test_util.h"

using nlohmann::json;
using namespace tfm;

namespace {

json load_fixture() {
  const std::string path = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/optim/optim.json";
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  json doc = json::parse(f);
  if (doc.at("magic") != "tfm-optim-fixture" || doc.at("version") != 1)
    throw std::runtime_error(path + ": wrong magic or version");
  return doc;
}

Tensor from_json(const json& shape, const json& values) {
  return Tensor::from_vector(shape.get<Shape>(), values.get<std::vector<float>>());
}

// The parameters of the fixture, in file order, as fresh leaves.
NamedTensors make_params(const json& doc) {
  NamedTensors params;
  for (auto& [k, v] : doc.at("params").items()) {
    Tensor t = from_json(v.at("shape"), v.at("values"));
    t.requires_grad_(true);
    params.insert(k, t);
  }
  return params;
}

void set_grads(const json& doc, NamedTensors& params, size_t step) {
  const json& g = doc.at("grads").at(step);
  for (auto& [k, p] : params) {
    p.zero_grad();
    if (!g.at(k).is_null()) p.mutable_grad() = Tensor::from_vector(p.shape(), g.at(k).get<std::vector<float>>());
  }
}

std::unique_ptr<Optimizer> make_optimizer(const json& c, const NamedTensors& params) {
  const std::string kind = c.at("optimizer");
  if (kind == "sgd")
    return std::make_unique<SGD>(params, c.at("lr").get<float>(), c.at("momentum").get<float>(),
                                 c.at("weight_decay").get<float>());
  std::vector<bool> decayed;  // decay_params "matrices": only parameters of two or more dimensions
  if (c.value("decay_params", "all") == "matrices")
    for (const auto& [k, p] : params) decayed.push_back(p.dim() >= 2);
  return std::make_unique<Adam>(params, c.at("lr").get<float>(), c.at("beta1").get<float>(),
                                c.at("beta2").get<float>(), c.at("eps").get<float>(),
                                c.at("weight_decay").get<float>(), kind == "adamw", decayed);
}

// |a_i − e_i| ≤ tol_factor·max(1, |e_i|) for every i.
::testing::AssertionResult close_abs_rel(const Tensor& a, const std::vector<float>& e, double tol_factor,
                                         const std::string& what) {
  return tfm::testing::close_abs(
      tfm::testing::values(a), e,
      [&](int64_t i) { return tol_factor * std::max(1.0, std::fabs(double(e[static_cast<size_t>(i)]))); },
      what + " vs torch", a.shape());
}

constexpr double kEps = 1.1920928955078125e-07;  // 2^-23

TEST(Optim, MatchesTorchStepByStep) {
  const json doc = load_fixture();
  const size_t steps = doc.at("grads").size();
  ASSERT_GT(doc.at("cases").size(), 0u);
  for (const json& c : doc.at("cases")) {
    auto params = make_params(doc);
    auto opt = make_optimizer(c, params);
    for (size_t s = 0; s < steps; ++s) {
      set_grads(doc, params, s);
      opt->step();
      for (auto& [k, p] : params)
        ASSERT_TRUE(close_abs_rel(p, c.at("expected").at(s).at(k).get<std::vector<float>>(),
                                  4.0 * static_cast<double>(s + 1) * kEps,
                                  c.at("name").get<std::string>() + " step " + std::to_string(s + 1) + " " + k));
    }
    // Adam's per-parameter step count: every step for "a.weight", which always has a gradient.
    if (c.at("optimizer") != "sgd") {
      EXPECT_EQ(opt->state_dict().at("a.weight.step").item(), static_cast<float>(steps));
    }
  }
}

// Interrupt after k steps, save state and parameters, rebuild everything from copies, continue:
// the result is bitwise the uninterrupted run.
TEST(Optim, StateRoundTripContinuesIdentically) {
  const json doc = load_fixture();
  const size_t steps = doc.at("grads").size();
  for (const json& c : doc.at("cases")) {
    auto ref_params = make_params(doc);
    auto ref = make_optimizer(c, ref_params);
    for (size_t s = 0; s < steps; ++s) {
      set_grads(doc, ref_params, s);
      ref->step();
    }
    for (size_t k : {size_t{1}, size_t{3}}) {
      auto params = make_params(doc);
      auto opt = make_optimizer(c, params);
      for (size_t s = 0; s < k; ++s) {
        set_grads(doc, params, s);
        opt->step();
      }
      const NamedTensors saved = opt->state_dict();
      NamedTensors params2;
      for (auto& [name, p] : params) {
        Tensor q = p.clone();
        q.requires_grad_(true);
        params2.insert(name, q);
      }
      opt.reset();
      auto opt2 = make_optimizer(c, params2);
      opt2->load_state_dict(saved);
      const NamedTensors loaded = opt2->state_dict();
      ASSERT_EQ(loaded.names(), saved.names());
      for (const auto& [name, t] : loaded)
        EXPECT_TRUE(tfm::testing::bitwise_equal(t, saved.at(name), "reloaded state " + name));
      for (size_t s = k; s < steps; ++s) {
        set_grads(doc, params2, s);
        opt2->step();
      }
      ASSERT_EQ(params2.names(), ref_params.names());
      for (const auto& [name, p] : params2)
        EXPECT_TRUE(tfm::testing::bitwise_equal(p, ref_params.at(name),
                                           c.at("name").get<std::string>() + " resumed after " + std::to_string(k) +
                                               ": " + name));
    }
  }
}

TEST(Optim, StateKeysFollowTorch) {
  const json doc = load_fixture();
  auto params = make_params(doc);
  Adam adam(params, 1e-3f);
  set_grads(doc, params, 0);  // "late" has no grad on step 1: no state for it yet
  adam.step();
  const NamedTensors s = adam.state_dict();
  EXPECT_EQ(s.size(), 6u);
  EXPECT_TRUE(s.contains("a.weight.exp_avg") && s.contains("a.weight.exp_avg_sq") && s.contains("a.weight.step"));
  EXPECT_FALSE(s.contains("late.exp_avg"));
  EXPECT_EQ(s.at("a.bias.step").item(), 1.0f);

  auto sgd_params = make_params(doc);
  SGD sgd(sgd_params, 0.1f, 0.9f);
  set_grads(doc, sgd_params, 0);
  sgd.step();
  EXPECT_TRUE(sgd.state_dict().contains("a.weight.momentum_buffer"));
  EXPECT_EQ(sgd.state_dict().size(), 2u);
}

TEST(Optim, LoadStateRejectsBadKeys) {
  const json doc = load_fixture();
  auto params = make_params(doc);
  Adam adam(params, 1e-3f);
  set_grads(doc, params, 0);
  adam.step();
  NamedTensors s = adam.state_dict();
  NamedTensors extra = s;
  extra.insert("nope.exp_avg", Tensor::zeros({1}));
  EXPECT_THROW(adam.load_state_dict(extra), std::invalid_argument);
  NamedTensors bad_shape = s;
  bad_shape.at("a.weight.exp_avg") = Tensor::zeros({4, 3});
  EXPECT_THROW(adam.load_state_dict(bad_shape), std::invalid_argument);
  NamedTensors no_step = s;
  no_step.erase("a.bias.step");
  EXPECT_THROW(adam.load_state_dict(no_step), std::invalid_argument);
  EXPECT_NO_THROW(adam.load_state_dict(s));
  EXPECT_THROW(Adam(params, 1e-3f, 1.0f), std::invalid_argument);
  EXPECT_THROW(Adam(params, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, true, {true}), std::invalid_argument);  // 1 flag, 3 params
  EXPECT_THROW(SGD(params, -1.0f), std::invalid_argument);
}

TEST(Optim, ZeroGradDropsGradients) {
  const json doc = load_fixture();
  auto params = make_params(doc);
  SGD sgd(params, 0.1f);
  set_grads(doc, params, 3);
  sgd.zero_grad();
  for (auto& [k, p] : params) EXPECT_FALSE(p.grad().defined()) << k;
  // With no gradients, step changes nothing.
  const Tensor before = params.begin()->second.clone();
  sgd.step();
  EXPECT_TRUE(tfm::testing::bitwise_equal(params.begin()->second, before, "no-grad step"));
}

// Norms are accumulated in double and rounded once per parameter, torch's float32 norm kernels
// accumulate in float with a different order: ≤ a few ulp of the total, i.e. relative 4ε. The
// scaled grads inherit that relative error plus one rounding.
TEST(Optim, ClipGradNormMatchesTorch) {
  const json doc = load_fixture();
  for (const json& c : doc.at("clip")) {
    auto params = make_params(doc);
    set_grads(doc, params, 2);
    std::vector<Tensor> ps;
    for (auto& [k, p] : params) ps.push_back(p);
    const float total = clip_grad_norm(ps, c.at("max_norm").get<float>());
    const double expected_total = c.at("total_norm").get<double>();
    EXPECT_NEAR(total, expected_total, 4 * kEps * expected_total);
    for (auto& [k, p] : params) {
      const auto e = c.at("grads").at(k).get<std::vector<float>>();
      ASSERT_TRUE(tfm::testing::close_abs(
          tfm::testing::values(p.grad()), e,
          [&](int64_t i) { return 6 * kEps * std::fabs(e[static_cast<size_t>(i)]) + 1e-30; }, k, p.shape()));
    }
  }
}

// The clip factor alone: a one-element gradient g has the norm |g| exactly (in double and in torch's
// float32), so the clipped value is g times the factor, which must have torch's bits: 1.13 computes
// max_norm / (total + 1e-6) as Tensor.__rtruediv__, i.e. reciprocal() then a multiply, two
// roundings (a single division differs by an ulp in 8 of the 32 cases).
TEST(Optim, ClipFactorIsTorchsReciprocalTimesMaxNorm) {
  const json doc = load_fixture();
  ASSERT_GT(doc.at("clip_coef").size(), 0u);
  for (const json& c : doc.at("clip_coef")) {
    const float g = c.at("grad").get<float>(), max_norm = c.at("max_norm").get<float>();
    Tensor p = Tensor::zeros({1}).requires_grad_(true);
    p.mutable_grad() = Tensor::from_vector({1}, {g});
    EXPECT_EQ(clip_grad_norm({p}, max_norm), std::fabs(g));
    EXPECT_TRUE(tfm::testing::bitwise_equal(tfm::testing::values(p.grad()), std::vector<float>{c.at("clipped").get<float>()},
                                            "g " + std::to_string(g) + ", max_norm " + std::to_string(max_norm)));
  }
}

// Non-finite gradients, as torch.nn.utils.clip_grad_norm_ (1.13) treats them: it always multiplies by
// clamp(max_norm / (total + 1e-6), max=1). A NaN element makes the total NaN, the factor NaN, and
// every gradient NaN; an infinite element makes the total inf and the factor 0, so the other
// elements become 0 and the infinite one NaN (inf·0).
TEST(Optim, ClipGradNormOfNonFiniteGradientsFollowsTorch) {
  const float inf = INFINITY, nan = NAN;
  for (const float bad : {nan, inf, -inf}) {
    Tensor a = Tensor::zeros({3}).requires_grad_(true), b = Tensor::zeros({2}).requires_grad_(true);
    a.mutable_grad() = Tensor::from_vector({3}, {1, bad, 2});
    b.mutable_grad() = Tensor::from_vector({2}, {3, 4});
    const float total = clip_grad_norm({a, b}, 1.0f);
    const std::string what = "gradient holding " + std::to_string(bad);
    if (std::isnan(bad)) {
      EXPECT_TRUE(std::isnan(total)) << total;
      for (const Tensor& p : {a, b})
        for (const float x : tfm::testing::values(p.grad())) EXPECT_TRUE(std::isnan(x)) << what << ": " << x;
    } else {
      EXPECT_EQ(total, inf);
      const auto ga = tfm::testing::values(a.grad()), gb = tfm::testing::values(b.grad());
      EXPECT_EQ(ga[0], 0.0f) << what;
      EXPECT_TRUE(std::isnan(ga[1])) << what;
      EXPECT_EQ(ga[2], 0.0f) << what;
      EXPECT_EQ(gb[0], 0.0f) << what;
      EXPECT_EQ(gb[1], 0.0f) << what;
    }
  }
}

}  // namespace
