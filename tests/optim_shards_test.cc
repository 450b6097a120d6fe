// tests/optim_shards_test.cc — what processes that each own a part of the elements need from the
// optimizers (detail::OptimizerShards: the step on owned elements, the state slots) and the blockwise
// clip norm (src/optim_shards.h), checked bitwise against the whole step and against the definition
// written out here; and the fused clip-and-step (grad_norm, step_scaled, step with a grad scale)
// bitwise against clip_grad_norm followed by step(), at one and at two threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>

#include <omp.h>

#include "optim_shards.h"
#include "test_util.h"
#include "tfm/optim.h"

using namespace tfm;

namespace {

// Three parameters: a matrix of 60,000 elements (four norm blocks, the last of 10,848), a vector of
// 40,000 and one of 7.
NamedTensors make_params(uint64_t seed) {
  NamedTensors p;
  p.insert("w", tfm::testing::random_tensor({3, 20000}, seed));
  p.insert("v", tfm::testing::random_tensor({40000}, seed + 1));
  p.insert("b", tfm::testing::random_tensor({7}, seed + 2));
  return p;
}

void set_grads(NamedTensors& p, uint64_t seed) {
  uint64_t s = seed;
  for (auto& [key, t] : p) t.mutable_grad() = tfm::testing::random_tensor(t.shape(), s++, -0.5f, 0.5f);
}

std::vector<float> flat(const Tensor& t) { return std::vector<float>(t.data(), t.data() + t.numel()); }

using MakeOpt = std::function<std::unique_ptr<Optimizer>(const NamedTensors&)>;

// Three steps of `make`'s optimizer: one with step() on every grad, one with the owned step on the
// elements `owned` lists (taken from the same grads). Owned elements, the step counts (Adam's "step"
// entries of the state dict) and the state of owned elements must equal the whole step's, bit for
// bit; other elements must not move.
void check_owned_step(const MakeOpt& make, const std::vector<std::array<int64_t, 3>>& owned_spec) {
  NamedTensors whole = make_params(1), part = make_params(1);
  std::vector<std::vector<float>> start;
  for (const auto& [key, t] : part) start.push_back(flat(t));
  auto a = make(whole), b = make(part);
  std::vector<std::vector<bool>> owned_mask;
  for (const auto& [key, t] : part) owned_mask.emplace_back(static_cast<size_t>(t.numel()), false);
  for (const auto& [i, begin, end] : owned_spec)
    for (int64_t k = begin; k < end; ++k) owned_mask[static_cast<size_t>(i)][static_cast<size_t>(k)] = true;
  for (uint64_t step = 0; step < 3; ++step) {
    set_grads(whole, 10 * step + 5);
    set_grads(part, 10 * step + 5);
    a->step();
    std::vector<ParamRange> owned;
    std::vector<Tensor> params;
    for (const auto& [key, t] : part) params.push_back(t);
    for (const auto& [i, begin, end] : owned_spec)
      owned.push_back(ParamRange{static_cast<size_t>(i), begin, end, params[static_cast<size_t>(i)].grad().data() + begin});
    detail::OptimizerShards::step(*b, owned);
    a->zero_grad();
    b->zero_grad();
  }
  size_t i = 0;
  const NamedTensors sa = a->state_dict(), sb = b->state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (const auto& [key, t] : part) {
    const std::vector<float> pw = flat(whole.at(key)), pp = flat(t);
    for (size_t k = 0; k < pp.size(); ++k) {
      const float expected = owned_mask[i][k] ? pw[k] : start[i][k];
      ASSERT_EQ(std::memcmp(&pp[k], &expected, sizeof(float)), 0) << key << "[" << k << "]";
    }
    for (const auto& [skey, st] : sa) {
      if (skey.rfind(key + ".", 0) != 0) continue;
      const std::vector<float> xa = flat(st), xb = flat(sb.at(skey));
      ASSERT_EQ(xa.size(), xb.size()) << skey;
      for (size_t k = 0; k < xa.size(); ++k) {
        if (xa.size() == 1 || owned_mask[i][k]) {
          ASSERT_EQ(std::memcmp(&xa[k], &xb[k], sizeof(float)), 0) << skey << "[" << k << "]";
        }
      }
    }
    ++i;
  }
}

// Owned ranges: the whole of "v", a piece of "w" cut at an arbitrary element, nothing of "b" (its
// state and step count advance all the same).
const std::vector<std::array<int64_t, 3>> kSomeOwned = {{0, 12345, 60000}, {1, 0, 40000}};
const std::vector<std::array<int64_t, 3>> kAllOwned = {{0, 0, 12345}, {0, 12345, 60000}, {1, 0, 40000}, {2, 0, 3}, {2, 3, 7}};

TEST(OptimOwnedStep, AdamEqualsTheWholeStep) {
  const MakeOpt adam = [](const NamedTensors& p) { return std::make_unique<Adam>(p, 1e-2f); };
  check_owned_step(adam, kAllOwned);
  check_owned_step(adam, kSomeOwned);
}

TEST(OptimOwnedStep, AdamL2AndAdamWWithDecayOnSomeParametersEqualTheWholeStep) {
  const MakeOpt l2 = [](const NamedTensors& p) {
    return std::make_unique<Adam>(p, 1e-2f, 0.8f, 0.99f, 1e-8f, 0.1f, false, std::vector<bool>{true, false, true});
  };
  const MakeOpt adamw = [](const NamedTensors& p) {
    return std::make_unique<Adam>(p, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, true, std::vector<bool>{true, true, false});
  };
  for (const MakeOpt& m : {l2, adamw}) {
    check_owned_step(m, kAllOwned);
    check_owned_step(m, kSomeOwned);
  }
}

TEST(OptimOwnedStep, SgdWithMomentumEqualsTheWholeStep) {
  const MakeOpt sgd = [](const NamedTensors& p) { return std::make_unique<SGD>(p, 0.1f, 0.9f, 0.01f); };
  check_owned_step(sgd, kAllOwned);
  check_owned_step(sgd, kSomeOwned);
}

// state_slots shares the optimizer's storage: what is written into it is what state_dict() saves.
TEST(OptimOwnedStep, StateSlotsAreTheOptimizersState) {
  NamedTensors p = make_params(3);
  Adam adam(p, 1e-3f);
  EXPECT_FALSE(detail::OptimizerShards::state_slots(adam).at(0).at(0).defined());  // no state before the first step
  set_grads(p, 4);
  adam.step();
  std::vector<std::vector<Tensor>> slots = detail::OptimizerShards::state_slots(adam);
  ASSERT_EQ(slots.size(), 2u);
  ASSERT_EQ(slots[0].size(), 3u);
  slots[0][1].data()[5] = 42.0f;
  slots[1][2].data()[0] = 7.0f;
  const NamedTensors s = adam.state_dict();
  EXPECT_EQ(s.at("v.exp_avg").data()[5], 42.0f);
  EXPECT_EQ(s.at("b.exp_avg_sq").data()[0], 7.0f);
  SGD plain(p, 0.1f);
  EXPECT_TRUE(detail::OptimizerShards::state_slots(plain).empty());  // no momentum, no state
  SGD momentum(p, 0.1f, 0.9f);
  EXPECT_EQ(detail::OptimizerShards::state_slots(momentum).size(), 1u);
}

// An optimizer written outside tfm implements only the public interface: it cannot step on owned
// elements, and says so instead of stepping whole tensors.
TEST(OptimOwnedStep, AnotherOptimizerIsRefused) {
  struct Plain : Optimizer {
    explicit Plain(const NamedTensors& p) : Optimizer(p, 0.1f) {}
    void step() override {}
    NamedTensors state_dict() const override { return {}; }
    void load_state_dict(const NamedTensors&) override {}
  };
  NamedTensors p = make_params(7);
  Plain plain(p);
  EXPECT_THROW(detail::OptimizerShards::step(plain, {}), std::invalid_argument);
  EXPECT_THROW(detail::OptimizerShards::state_slots(plain), std::invalid_argument);
}

// The clip norm, written out: block partials (sequential sums in double of 16,384 elements), their
// left fold per tensor, the per-tensor float norms, then the total.
TEST(ClipGradNormBlocks, IsTheFoldOfBlockPartials) {
  NamedTensors p = make_params(5);
  set_grads(p, 6);
  // Make the blocks' sums differ in scale, so that summing in another order would round differently.
  for (auto& [key, t] : p) {
    float* g = t.mutable_grad().data();
    for (int64_t k = 0; k < t.numel(); ++k) g[k] *= 1.0f + static_cast<float>(k % 977) * 0.37f;
  }
  double sq_total = 0;
  std::vector<Tensor> params;
  for (const auto& [key, t] : p) {
    params.push_back(t);
    const float* g = t.grad().data();
    const int64_t n = t.numel();
    std::vector<double> partials(static_cast<size_t>((n + kNormBlock - 1) / kNormBlock));
    norm_block_partials(g, n, partials.data());
    double sq = 0;
    for (int64_t b = 0, k = 0; b < n; b += kNormBlock, ++k) {
      double block = 0;
      for (int64_t j = b; j < std::min(n, b + kNormBlock); ++j) block += static_cast<double>(g[j]) * g[j];
      EXPECT_EQ(partials[static_cast<size_t>(k)], block) << key << " block " << k;
      sq += block;
    }
    const double norm = static_cast<float>(std::sqrt(sq));
    sq_total += norm * norm;
  }
  const float expected = static_cast<float>(std::sqrt(sq_total));
  const float total = clip_grad_norm(params, 1e9f);  // large: nothing clipped
  EXPECT_EQ(total, expected);
  const float coef = clip_coefficient(total, 0.5f);
  EXPECT_EQ(coef, 0.5f / (total + 1e-6f));
  EXPECT_THROW(clip_coefficient(total, 0.0f), std::invalid_argument);
}

// clip_grad_norm then step() (the definition), against grad_norm, clip_coefficient and one fused
// step_scaled (the training step's path), and against step() on owned ranges with the factor: params
// and optimizer state bit for bit, three steps, at 1 and 2 threads (the fused pass and the norm run
// in parallel regions; every element's update and every block's partial are computed alike).
void check_clip_then_step(const MakeOpt& make, float max_norm, int threads) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  NamedTensors ref = make_params(11), fused = make_params(11), owned_p = make_params(11);
  auto a = make(ref), b = make(fused), c = make(owned_p);
  for (uint64_t step = 0; step < 3; ++step) {
    for (NamedTensors* p : {&ref, &fused, &owned_p}) set_grads(*p, 7 * step + 3);
    std::vector<Tensor> pa, pb, pc;
    for (const auto& [key, t] : ref) pa.push_back(t);
    for (const auto& [key, t] : fused) pb.push_back(t);
    for (const auto& [key, t] : owned_p) pc.push_back(t);
    const float total = clip_grad_norm(pa, max_norm);
    a->step();
    const float norm = grad_norm(pb);
    ASSERT_EQ(std::memcmp(&norm, &total, sizeof(float)), 0) << "step " << step;
    const float scale = std::min(clip_coefficient(norm, max_norm), 1.0f);
    detail::OptimizerShards::step_scaled(*b, scale);
    std::vector<ParamRange> owned;
    for (size_t i = 0; i < pc.size(); ++i) owned.push_back(ParamRange{i, 0, pc[i].numel(), pc[i].grad().data()});
    detail::OptimizerShards::step(*c, owned, scale);
    for (auto* o : {a.get(), b.get(), c.get()}) o->zero_grad();
  }
  omp_set_num_threads(saved);
  const NamedTensors sa = a->state_dict(), sb = b->state_dict(), sc = c->state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  ASSERT_EQ(sa.size(), sc.size());
  for (const auto& [key, t] : ref) {
    const std::vector<float> x = flat(t), y = flat(fused.at(key)), z = flat(owned_p.at(key));
    for (size_t k = 0; k < x.size(); ++k) {
      ASSERT_EQ(std::memcmp(&x[k], &y[k], sizeof(float)), 0) << key << "[" << k << "]: " << x[k] << " vs " << y[k];
      ASSERT_EQ(std::memcmp(&x[k], &z[k], sizeof(float)), 0) << key << "[" << k << "]: " << x[k] << " vs " << z[k];
    }
  }
  for (const auto& [key, t] : sa) {
    const std::vector<float> x = flat(t), y = flat(sb.at(key)), z = flat(sc.at(key));
    for (size_t k = 0; k < x.size(); ++k) {
      ASSERT_EQ(std::memcmp(&x[k], &y[k], sizeof(float)), 0) << key << "[" << k << "]";
      ASSERT_EQ(std::memcmp(&x[k], &z[k], sizeof(float)), 0) << key << "[" << k << "]";
    }
  }
}

TEST(ClipAndStepInOnePass, EqualsClippingThenStepping) {
  const MakeOpt adam = [](const NamedTensors& p) { return std::make_unique<Adam>(p, 1e-2f); };
  const MakeOpt adamw = [](const NamedTensors& p) {
    return std::make_unique<Adam>(p, 1e-2f, 0.9f, 0.99f, 1e-8f, 0.1f, true, std::vector<bool>{true, false, true});
  };
  const MakeOpt l2 = [](const NamedTensors& p) {
    return std::make_unique<Adam>(p, 1e-2f, 0.8f, 0.99f, 1e-8f, 0.1f, false, std::vector<bool>{false, true, true});
  };
  const MakeOpt sgd = [](const NamedTensors& p) { return std::make_unique<SGD>(p, 0.1f, 0.9f, 0.01f); };
  // The grads of make_params have a norm near 0.29·√100,007 ≈ 91: max_norm 1 clips, 1e9 does not.
  for (const MakeOpt& m : {adam, adamw, l2, sgd})
    for (const float max_norm : {1.0f, 1e9f})
      for (const int threads : {1, 2}) {
        SCOPED_TRACE("max_norm " + std::to_string(max_norm) + ", threads " + std::to_string(threads));
        check_clip_then_step(m, max_norm, threads);
      }
}

// The grad norm is a norm: with max_norm 1 the factor is below 1 (the case the fused pass scales).
TEST(ClipAndStepInOnePass, TheTestGradsAreClipped) {
  NamedTensors p = make_params(11);
  set_grads(p, 3);
  std::vector<Tensor> params;
  for (const auto& [key, t] : p) params.push_back(t);
  EXPECT_GT(grad_norm(params), 10.0f);
  EXPECT_LT(clip_coefficient(grad_norm(params), 1.0f), 0.1f);
}

TEST(ClipGradNormBlocks, TotalFromTensorSums) {
  const std::vector<double> sq = {4.0, 9.0, 0.0};
  EXPECT_EQ(total_grad_norm(sq), static_cast<float>(std::sqrt(13.0)));
  // A non-finite sum makes the total non-finite.
  EXPECT_FALSE(std::isfinite(total_grad_norm({1.0, std::nan("")})));
  EXPECT_FALSE(std::isfinite(total_grad_norm({1.0, INFINITY})));
}

}  // namespace
