// tests/test_util_test.cc — the shared test helpers themselves (tests/test_util.h): the random stream
// is pinned (the tests whose bounds were measured on their data, tests/models/decode_test.cc, depend
// on it), and every comparison can fail — on an element out of tolerance, on NaN, on an infinity
// the other side lacks, on a size or shape that differs — and names what it found.
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tfm::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

bool mentions(const ::testing::AssertionResult& r, const std::string& text) {
  return std::string(r.message()).find(text) != std::string::npos;
}

// Rng(5): state₀ = 5·a + c; the next three states (mod 2⁶⁴) are 0x23e6e93b8c88d2bf,
// 0xd20c8774e92c4de2 and 0x4f38415b5b5e5009, so
//   bits()           = the first state's top 32 bits = 0x23e6e93b
//   uniform_int(3,9) = 3 + (0xd20c8774e92c4de2 >> 33) mod 7 = 3 + 4 = 7
//   uniform()        = −1 + 2·(0x4f38415b5b5e5009 >> 40)/2²⁴ = −1 + 2·5191745/2²⁴ = −3196863/2²³ (exact)
TEST(Rng, StreamIsPinned) {
  Rng r(5);
  EXPECT_EQ(r.bits(), 0x23e6e93bu);
  EXPECT_EQ(r.uniform_int(3, 9), 7);
  EXPECT_EQ(r.uniform(), -3196863.0f / 8388608.0f);
  // random_values(n, seed) is n draws of Rng(seed).uniform.
  Rng again(5);
  again.next();
  again.next();
  const std::vector<float> v = random_values(3, 5);
  EXPECT_EQ(v[2], again.uniform());
}

TEST(Rng, RangesAreRespected) {
  Rng r(1);
  bool lo_seen = false, hi_seen = false;
  for (int i = 0; i < 10000; ++i) {
    const int32_t k = r.uniform_int(-2, 2);
    ASSERT_GE(k, -2);
    ASSERT_LE(k, 2);
    lo_seen |= k == -2;
    hi_seen |= k == 2;
    const float x = r.uniform(0.5f, 0.75f);
    ASSERT_GE(x, 0.5f);
    ASSERT_LT(x, 0.75f);
  }
  EXPECT_TRUE(lo_seen && hi_seen) << "both ends of uniform_int are reachable";
}

TEST(CloseRel, PassesWithinTheBoundAndFailsBeyondIt) {
  const std::vector<float> e = {1.0f, -2.0f, 4.0f};
  EXPECT_TRUE(close_rel(std::vector<float>{1.0f, -2.0f, 4.0002f}, e, 1e-4));  // ≈ 2e-4 / 4 = 5e-5
  const auto r = close_rel(std::vector<float>{1.0f, -2.0f, 4.01f}, e, 1e-4, "y");
  EXPECT_FALSE(r);
  EXPECT_TRUE(mentions(r, "y: rel error")) << r.message();
  EXPECT_TRUE(mentions(r, "[2] 4.01")) << r.message();  // index and both values
  EXPECT_TRUE(mentions(r, "max error")) << r.message();
}

TEST(CloseRel, NaNAndUnmatchedInfinitiesFailEqualInfinitiesPass) {
  const std::vector<float> e = {1.0f, kInf, 2.0f};
  EXPECT_TRUE(close_rel(std::vector<float>{1.0f, kInf, 2.0f}, e, 1e-6));
  EXPECT_FALSE(close_rel(std::vector<float>{1.0f, -kInf, 2.0f}, e, 1e-6));
  EXPECT_FALSE(close_rel(std::vector<float>{1.0f, kInf, kNaN}, e, 1e-6));
  EXPECT_FALSE(close_rel(std::vector<float>{kNaN}, std::vector<float>{kNaN}, 1e-6));
}

TEST(CloseRel, FloorSetsTheScaleOfASmallReference) {
  const std::vector<float> e = {1e-6f, 0.0f}, a = {2e-6f, 0.0f};
  EXPECT_FALSE(close_rel(a, e, 1e-3));            // relative to max|e| = 1e-6: error 1
  EXPECT_TRUE(close_rel(a, e, 1e-3, "", 1.0));    // relative to the floor 1: error 1e-6
  EXPECT_TRUE(close_rel(std::vector<float>{0.0f}, std::vector<float>{0.0f}, 0.0));  // all zero
}

TEST(CloseRel, TensorsNameShapesAndIndices) {
  const Tensor e = Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor a = e.clone();
  a.data()[4] = 7;
  const auto r = close_rel(a, e, 1e-3, "t");
  EXPECT_FALSE(r);
  EXPECT_TRUE(mentions(r, "[1, 1] 7 vs 5")) << r.message();
  const auto s = close_rel(e.reshape({3, 2}), e, 1e-3, "t");
  EXPECT_FALSE(s);
  EXPECT_TRUE(mentions(s, "(3, 2), expected float32 (2, 3)")) << s.message();
  EXPECT_FALSE(close_rel(std::vector<float>{1, 2}, std::vector<float>{1, 2, 3}, 1.0));
}

TEST(CloseAbs, NumberRunOrFunctionOfTheIndex) {
  const std::vector<float> e = {1.0f, 2.0f, 3.0f}, a = {1.1f, 2.0f, 3.3f};
  EXPECT_TRUE(close_abs(a, e, 0.31));
  EXPECT_FALSE(close_abs(a, e, 0.2));
  EXPECT_TRUE(close_abs(a, e, std::vector<double>{0.11, 0.0, 0.31}));
  EXPECT_FALSE(close_abs(a, e, std::vector<double>{0.11, 0.0, 0.29}));
  EXPECT_FALSE(close_abs(a, e, std::vector<double>{0.11, 0.0}));  // one tolerance short
  EXPECT_TRUE(close_abs(a, e, [](int64_t i) { return 0.11 * double(i + 1); }));
  const auto r = close_abs(a, e, [](int64_t i) { return 0.1 * double(i); }, "z");
  EXPECT_FALSE(r);
  EXPECT_TRUE(mentions(r, "z: 2 elements differ")) << r.message();  // [0] and [2]
  EXPECT_TRUE(mentions(r, "tol 0.2")) << r.message();
  // Zero tolerance is value equality: −0 equals +0, NaN equals nothing.
  EXPECT_TRUE(close_abs(std::vector<float>{-0.0f, kInf}, std::vector<float>{0.0f, kInf}, 0.0));
  EXPECT_FALSE(close_abs(std::vector<float>{kNaN}, std::vector<float>{kNaN}, 1.0));
  // Float against double.
  EXPECT_TRUE(close_abs(std::vector<float>{0.1f}, std::vector<double>{0.1}, 1e-8));
  EXPECT_FALSE(close_abs(std::vector<float>{0.1f}, std::vector<double>{0.1}, 1e-10));
}

TEST(BitwiseEqual, BitsNotValues) {
  EXPECT_TRUE(bitwise_equal(std::vector<float>{kNaN, 1.0f}, std::vector<float>{kNaN, 1.0f}));
  const auto r = bitwise_equal(std::vector<float>{1.0f, -0.0f}, std::vector<float>{1.0f, 0.0f}, "w");
  EXPECT_FALSE(r);
  EXPECT_TRUE(mentions(r, "w: 1 element differs")) << r.message();
  EXPECT_TRUE(mentions(r, "[1] -0 vs 0")) << r.message();
  EXPECT_FALSE(bitwise_equal(std::vector<uint16_t>{1, 2}, std::vector<uint16_t>{1, 3}));
  EXPECT_FALSE(bitwise_equal(std::vector<float>{1.0f}, std::vector<float>{1.0f, 2.0f}));
}

TEST(BitwiseEqual, TensorsOfEitherDtype) {
  const Tensor m = Tensor::from_bool({2, 2}, {1, 0, 0, 1});
  EXPECT_TRUE(bitwise_equal(m, m.clone()));
  EXPECT_FALSE(bitwise_equal(m, Tensor::from_bool({2, 2}, {1, 0, 1, 1})));
  EXPECT_FALSE(bitwise_equal(m, Tensor::from_vector({2, 2}, {1, 0, 0, 1})));  // dtype
  EXPECT_FALSE(bitwise_equal(m, Tensor()));                                   // undefined
  const Tensor f = random_tensor({3, 5}, 2);
  EXPECT_TRUE(bitwise_equal(f, f.clone()));
  EXPECT_FALSE(bitwise_equal(f, f.reshape({5, 3})));
}

}  // namespace
}  // namespace tfm::testing
