// tests/train/ema_test.cc — the weights' exponential moving average (src/train/ema.h) against its
// PyTorch twin, bit for bit: tests/fixtures/ema/ema.json, written by tests/gen/gen_ema.py (50 Adam steps
// of torch.optim on a quadratic; the average avg.mul_(float32(d)).add_(w·float32(1 − d)) after each,
// d = min(decay, (1 + t)/(10 + t))). Both sides round each product and the sum to float32 and use
// the same two float factors, so every element agrees exactly at every step: the tolerance is zero.
// Then the pieces the trainer relies on: the warm-up rule by hand, an update on ranges (a rank's
// owned elements) equal to the whole update, the thread count not changing the bits, and swap_with.
#include "train/ema.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <fstream>
#include <nlohmann/json.hpp>

namespace tfm::train {
namespace {

using nlohmann::json;

json load_fixture() {
  const std::string path = std::string(TFM_SOURCE_DIR) + "/tests/fixtures/ema/ema.json";
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open " + path);
  json doc = json::parse(f);
  if (doc.at("magic") != "tfm-ema-fixture" || doc.at("version") != 1) throw std::runtime_error(path + ": wrong magic or version");
  return doc;
}

// d at t = 1: 2/11; t = 8: 9/18 = 0.5; capped by the decay once (1 + t)/(10 + t) exceeds it.
TEST(WeightAverage, WarmUpRuleByHand) {
  EXPECT_DOUBLE_EQ(WeightAverage::decay_at(0.999f, 1), 2.0 / 11.0);
  EXPECT_DOUBLE_EQ(WeightAverage::decay_at(0.999f, 8), 0.5);
  EXPECT_DOUBLE_EQ(WeightAverage::decay_at(0.5f, 100), 0.5);
  EXPECT_DOUBLE_EQ(WeightAverage::decay_at(0.999f, 100000), static_cast<double>(0.999f));
  EXPECT_THROW(WeightAverage(NamedTensors{}, 1.0f), std::invalid_argument);
  EXPECT_THROW(WeightAverage(NamedTensors{}, 0.0f), std::invalid_argument);
}

TEST(WeightAverage, EqualsThePyTorchTwinBitForBitOver50Steps) {
  const json doc = load_fixture();
  const size_t steps = doc.at("steps");
  ASSERT_EQ(steps, 50u);
  for (const json& c : doc.at("cases")) {
    const float decay = c.at("decay").get<float>();
    NamedTensors params;
    for (auto& [k, v] : c.at("init").items())
      params.insert(k, Tensor::from_vector(v.at("shape").get<Shape>(), v.at("values").get<std::vector<float>>()));
    WeightAverage avg(params, decay);
    std::vector<Tensor> list;
    for (auto& [k, p] : params) list.push_back(p);
    for (size_t t = 0; t < steps; ++t) {
      for (auto& [k, p] : params) {
        const std::vector<float> w = c.at("weights").at(t).at(k).get<std::vector<float>>();
        std::copy(w.begin(), w.end(), p.data());
      }
      avg.update(list);
      EXPECT_EQ(avg.updates(), static_cast<int64_t>(t + 1));
      for (const auto& [k, a] : avg.named()) {
        const std::vector<float> want = c.at("average").at(t).at(k).get<std::vector<float>>();
        ASSERT_EQ(static_cast<size_t>(a.numel()), want.size());
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(a.data()[i], want[i]) << "decay " << decay << ", step " << t + 1 << ", " << k << "[" << i
                                          << "]: tfm " << a.data()[i] << ", torch " << want[i] << ", diff "
                                          << a.data()[i] - want[i];
      }
    }
  }
}

// Two ranks each updating their own elements, then exchanging them, give the whole update's bits; so
// does any thread count (the large tensor takes the OpenMP loop).
TEST(WeightAverage, RangesAndThreadCountsGiveTheWholeUpdatesBits) {
  const int64_t n = 70000;  // above the OpenMP threshold of 65536
  std::vector<float> w0(n), w1(n);
  for (int64_t i = 0; i < n; ++i) w0[i] = static_cast<float>(i % 97) * 0.013f - 0.6f, w1[i] = static_cast<float>(i % 89) * -0.007f + 0.3f;
  const auto make = [&]() {
    NamedTensors p;
    p.insert("big", Tensor::from_vector({n}, w0));
    p.insert("small", Tensor::from_vector({3}, {1.0f, -2.0f, 0.5f}));
    return p;
  };
  NamedTensors whole_p = make();
  WeightAverage whole(whole_p, 0.99f);
  std::vector<Tensor> params = {Tensor::from_vector({n}, w1), Tensor::from_vector({3}, {0.25f, 4.0f, -1.0f})};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  whole.update(params);
  omp_set_num_threads(2);
  NamedTensors two_p = make();
  WeightAverage two(two_p, 0.99f);
  two.update(params);
  omp_set_num_threads(saved);
  NamedTensors split_p = make();
  WeightAverage split(split_p, 0.99f);
  split.update(params, {ParamRange{0, 0, 30000, nullptr}, ParamRange{1, 0, 3, nullptr}});
  // The other rank's elements, counted once: a rank counts each step once whatever it owns.
  WeightAverage other(make(), 0.99f);
  other.update(params, {ParamRange{0, 30000, n, nullptr}});
  Tensor split_big = split.tensors()[0];  // a handle on the average's storage
  std::copy(other.tensors()[0].data() + 30000, other.tensors()[0].data() + n, split_big.data() + 30000);
  for (size_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < whole.tensors()[i].numel(); ++k) {
      ASSERT_EQ(whole.tensors()[i].data()[k], two.tensors()[i].data()[k]) << i << "[" << k << "]";
      ASSERT_EQ(whole.tensors()[i].data()[k], split.tensors()[i].data()[k]) << i << "[" << k << "]";
    }
  EXPECT_EQ(split.updates(), 1);
}

// swap_with exchanges values in place: once, the parameters hold the average; twice, both are back.
TEST(WeightAverage, SwapWithExchangesAndRestores) {
  NamedTensors p;
  p.insert("x", Tensor::from_vector({2}, {1.0f, 2.0f}));
  WeightAverage avg(p, 0.5f);
  std::vector<Tensor> params = {Tensor::from_vector({2}, {3.0f, 6.0f})};
  avg.update(params);  // d = min(0.5, 2/11) = 2/11: avg = 1·(2/11) + 3·(9/11) ≈ 2.636
  const float a0 = avg.tensors()[0].data()[0];
  avg.swap_with(params);
  EXPECT_EQ(params[0].data()[0], a0);
  EXPECT_EQ(avg.tensors()[0].data()[0], 3.0f);
  avg.swap_with(params);
  EXPECT_EQ(params[0].data()[0], 3.0f);
  EXPECT_EQ(avg.tensors()[0].data()[0], a0);
  EXPECT_NEAR(a0, 29.0f / 11.0f, 1e-6f);
}

}  // namespace
}  // namespace tfm::train
