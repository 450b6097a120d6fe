// tests/models/sampling_test.cc — sample_token: argmax cases, temperature / top-k / top-p filters,
// the draw's statistics for a fixed seed, determinism, and the option checks.
//
// Statistical bound: N draws of a token of probability p give a count with standard deviation
// √(N·p·(1−p)); we accept |count − N·p| ≤ 5σ (a false failure once in ~1.7 million runs for a
// truly correct sampler; the seed is fixed, so the test is deterministic anyway), and a wrong
// filter moves the counts by far more (a cut token has count 0, a kept one ≥ ~N·p).
#include "tfm/models/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <stdexcept>
#include <vector>

using namespace tfm;

namespace {

std::vector<int64_t> counts(const std::vector<float>& logits, const SamplingOptions& opt, int n, uint64_t seed = 1) {
  Generator g{seed, 0};
  std::vector<int64_t> c(logits.size(), 0);
  for (int i = 0; i < n; ++i) ++c[static_cast<size_t>(sample_token(logits.data(), static_cast<int64_t>(logits.size()), opt, g))];
  return c;
}

void expect_frequencies(const std::vector<int64_t>& c, const std::vector<double>& p, int n) {
  for (size_t v = 0; v < p.size(); ++v) {
    const double sigma = std::sqrt(n * p[v] * (1 - p[v]));
    if (p[v] == 0) {
      EXPECT_EQ(c[v], 0) << "token " << v;
    } else {
      EXPECT_NEAR(static_cast<double>(c[v]), n * p[v], 5 * sigma) << "token " << v;
    }
  }
}

std::vector<double> softmax(const std::vector<float>& z, double t) {
  double mx = -INFINITY, s = 0;
  for (float x : z) mx = std::max(mx, double(x));
  std::vector<double> p;
  for (float x : z) s += std::exp((x - mx) / t);
  for (float x : z) p.push_back(std::exp((x - mx) / t) / s);
  return p;
}

const std::vector<float> kLogits = {0.5f, 2.0f, -1.0f, 1.0f, 2.0f, 0.0f};  // ties at ids 1 and 4

}  // namespace

TEST(Sampling, ArgmaxCasesConsumeNoCounter) {
  for (SamplingOptions opt : {SamplingOptions{0.0f, 0, 1.0f}, SamplingOptions{1.0f, 1, 1.0f},
                              SamplingOptions{0.0f, 3, 0.5f}, SamplingOptions{5.0f, 1, 0.9f}}) {
    Generator g{3, 7};
    EXPECT_EQ(sample_token(kLogits.data(), 6, opt, g), 1);  // first maximum
    EXPECT_EQ(g.offset, 7u);
  }
  const float masked[] = {-INFINITY, -3.0f, -INFINITY};
  Generator g{0, 0};
  EXPECT_EQ(sample_token(masked, 3, SamplingOptions{0.0f, 0, 1.0f}, g), 1);
}

TEST(Sampling, TemperatureFrequencies) {
  const int n = 20000;
  for (float t : {1.0f, 0.5f, 2.0f}) {
    SamplingOptions opt;
    opt.temperature = t;
    expect_frequencies(counts(kLogits, opt, n), softmax(kLogits, t), n);
  }
}

TEST(Sampling, TopKKeepsTheLargestTiesByLowerId) {
  const int n = 20000;
  SamplingOptions opt;
  opt.top_k = 3;  // 2.0 (id 1), 2.0 (id 4), 1.0 (id 3)
  std::vector<float> kept = {2.0f, 2.0f, 1.0f};
  auto q = softmax(kept, 1.0);
  expect_frequencies(counts(kLogits, opt, n), {0, q[0], 0, q[2], q[1], 0}, n);
  opt.top_k = 1000;  // more than V: no cut
  expect_frequencies(counts(kLogits, opt, n), softmax(kLogits, 1.0), n);
  opt.top_k = 2;  // the tie at the boundary is broken by id: ids 1 and 4 only (equal)
  expect_frequencies(counts(kLogits, opt, n), {0, 0.5, 0, 0, 0.5, 0}, n);
}

TEST(Sampling, TopPKeepsTheShortestPrefixReachingP) {
  const int n = 20000;
  // probabilities 0.5, 0.25, 0.125, 0.125 (exact in binary)
  const std::vector<float> z = {std::log(0.125f), std::log(0.5f), std::log(0.125f), std::log(0.25f)};
  SamplingOptions opt;
  opt.top_p = 0.5f;  // {1} reaches 0.5 exactly: kept alone
  expect_frequencies(counts(z, opt, n), {0, 1, 0, 0}, n);
  opt.top_p = 0.6f;  // {1, 3}
  expect_frequencies(counts(z, opt, n), {0, 2.0 / 3, 0, 1.0 / 3}, n);
  opt.top_p = 0.8f;  // {1, 3, 0}: the tie between ids 0 and 2 goes to the lower id
  expect_frequencies(counts(z, opt, n), {1.0 / 7, 4.0 / 7, 0, 2.0 / 7}, n);
  opt.top_p = 1e-6f;  // never fewer than one token: the argmax
  expect_frequencies(counts(z, opt, n), {0, 1, 0, 0}, n);
  opt.top_p = 1.0f;
  expect_frequencies(counts(z, opt, n), {0.125, 0.5, 0.125, 0.25}, n);
  opt.top_p = 0.6f;  // top-k 3 first keeps {1, 3, 0} (mass 7/8); 0.6 of that needs {1, 3}
  opt.top_k = 3;
  expect_frequencies(counts(z, opt, n), {0, 2.0 / 3, 0, 1.0 / 3}, n);
}

TEST(Sampling, MaskedLogitsAreNeverDrawn) {
  const std::vector<float> z = {-INFINITY, 0.0f, -INFINITY, 0.0f};
  SamplingOptions opt;
  opt.temperature = 3.0f;
  expect_frequencies(counts(z, opt, 4000), {0, 0.5, 0, 0.5}, 4000);
}

// A +inf logit takes the whole mass (the softmax's limit), shared with any other +inf: never the NaN
// that exp(inf − inf) would make of every probability.
TEST(Sampling, InfiniteLogitsShareTheWholeMass) {
  SamplingOptions opt;
  opt.temperature = 0.7f;
  opt.top_p = 0.9f;
  expect_frequencies(counts({0.0f, INFINITY, 5.0f, INFINITY}, opt, 4000), {0, 0.5, 0, 0.5}, 4000);
  expect_frequencies(counts({3.0f, 1.0f, INFINITY}, opt, 1000), {0, 0, 1}, 1000);
}

TEST(Sampling, SameSeedSameTokensOneCounterPerDraw) {
  SamplingOptions opt;
  opt.top_p = 0.95f;
  Generator a{42, 0}, b{42, 0}, c{43, 0};
  int differ = 0;
  for (int i = 0; i < 200; ++i) {
    const int32_t x = sample_token(kLogits.data(), 6, opt, a);
    EXPECT_EQ(x, sample_token(kLogits.data(), 6, opt, b));
    differ += x != sample_token(kLogits.data(), 6, opt, c);
  }
  EXPECT_EQ(a.offset, 200u);
  EXPECT_GT(differ, 50);  // another seed, another stream
}

// The draw as its specification reads (the candidates sorted through their ids by logit, highest first, ties by
// lower id; the inverse CDF in that order), against sample_token's sort of integer keys: the same token for every
// row and uniform, on rows with ties, -0 beside +0, ±inf, NaN and the extremes of float's range.
int32_t reference_draw(const std::vector<float>& z, const SamplingOptions& opt, double uniform) {
  std::vector<int32_t> ids;
  for (size_t v = 0; v < z.size(); ++v)
    if (!std::isnan(z[v]) && z[v] != -INFINITY) ids.push_back(static_cast<int32_t>(v));
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  size_t n = opt.top_k > 0 ? std::min(ids.size(), static_cast<size_t>(opt.top_k)) : ids.size();
  std::vector<double> p(n);
  double total = 0;
  for (size_t i = 0; i < n; ++i)
    total += p[i] = std::exp((double(z[ids[i]]) - double(z[ids[0]])) / double(opt.temperature));
  if (opt.top_p < 1.0f) {
    double cum = 0;
    size_t keep = 0;
    while (keep < n && cum < double(opt.top_p) * total) cum += p[keep++];
    n = std::max<size_t>(keep, 1);
    total = 0;
    for (size_t i = 0; i < n; ++i) total += p[i];
  }
  const double u = uniform * total;
  double cum = 0;
  for (size_t i = 0; i < n; ++i)
    if (u < (cum += p[i])) return ids[i];
  return ids[n - 1];
}

TEST(Sampling, DrawsAsTheSpecificationOrdersTheCandidates) {
  Generator values{7, 0};
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 3.4e38f, -3.4e38f, 1e-45f, -1e-45f, 1.0f, 1.0f};
  // Rows 201 on are long enough for sample_token's radix sort (at least 1024 candidates), GPT-2's 50,257 among them.
  for (int row = 0; row < 207; ++row) {
    std::vector<float> z(row <= 200 ? 1 + row % 97 : row == 206 ? 50257 : 1024 + (row - 201) * 977);
    if (row == 200) z = {-0.0f, 0.0f, -0.0f, 0.0f, -1.0f, NAN};  // -0 and +0 tie: ids 0, 1, 2, 3 in that order
    for (size_t v = 0; v < z.size() && row != 200; ++v) {
      const float u = values.uniform();
      z[v] = row % 3 == 0 ? std::round(u * 4.0f) - 2.0f  // many ties, -0 among them
                          : u < 0.1f ? specials[static_cast<size_t>(u * 110.0f) % 11] : (u - 0.5f) * 20.0f;
      // A long row would almost always hold +inf (skipped below) or ±3.4e38 (all the mass on one token).
      if (row > 200 && std::isfinite(z[v]) == false && z[v] > 0) z[v] = (u - 0.5f) * 20.0f;
      if (row > 200 && std::fabs(z[v]) == 3.4e38f) z[v] = (u - 0.5f) * 20.0f;
    }
    if (std::none_of(z.begin(), z.end(), [](float x) { return std::isfinite(x); })) z[0] = 0.5f;
    if (std::any_of(z.begin(), z.end(), [](float x) { return x == INFINITY; })) continue;  // all-NaN softmax: below
    for (const SamplingOptions opt : {SamplingOptions{1.0f, 0, 1.0f}, SamplingOptions{0.7f, 5, 1.0f},
                                      SamplingOptions{1.3f, 0, 0.6f}}) {
      Generator g{static_cast<uint64_t>(row), 0}, same{static_cast<uint64_t>(row), 0};
      for (int draw = 0; draw < (row > 200 ? 40 : 5); ++draw) {
        const int32_t got = sample_token(z.data(), static_cast<int64_t>(z.size()), opt, g);
        EXPECT_EQ(got, reference_draw(z, opt, static_cast<double>(same.uniform()))) << "row " << row;
      }
    }
  }
}

TEST(Sampling, Errors) {
  Generator g;
  const auto throws = [&](SamplingOptions o, const std::string& what, const float* z = kLogits.data(), int64_t V = 6) {
    try {
      sample_token(z, V, o, g);
      ADD_FAILURE() << "no throw for " << what;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  throws({-1.0f, 0, 1.0f}, "temperature");
  throws({NAN, 0, 1.0f}, "temperature");
  throws({INFINITY, 0, 1.0f}, "temperature");
  throws({1.0f, -2, 1.0f}, "top_k");
  throws({1.0f, 0, 0.0f}, "top_p");
  throws({1.0f, 0, 1.5f}, "top_p");
  throws({1.0f, 0, NAN}, "top_p");
  throws({}, "empty", kLogits.data(), 0);
  const float none[] = {-INFINITY, NAN};
  throws({}, "no finite logit", none, 2);
  EXPECT_THROW(check_sampling_options({1.0f, 0, -0.1f}), std::invalid_argument);
  EXPECT_NO_THROW(check_sampling_options({}));
}

// A refused value is printed so that it shows why (shortest round trip), not rounded to 6 decimals,
// which made a value just outside the range look inside it ("1.000000", "-0.000000").
TEST(Sampling, ErrorsShowTheRefusedValue) {
  const auto message = [](SamplingOptions o) {
    try {
      check_sampling_options(o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  EXPECT_EQ(message({1.0f, 0, 1.0000001}), "sampling: top_p must be in (0, 1], got 1.0000001");  // a double
  EXPECT_EQ(message({-1e-7f, 0, 1.0f}), "sampling: temperature must be finite and ≥ 0, got -1e-07");
  EXPECT_EQ(message({1.0f, 0, -1e-30}), "sampling: top_p must be in (0, 1], got -1e-30");
  EXPECT_EQ(message({1.0f, 0, 0.0f}), "sampling: top_p must be in (0, 1], got 0");
  EXPECT_EQ(message({NAN, 0, 1.0f}), "sampling: temperature must be finite and ≥ 0, got nan");
  EXPECT_EQ(message({INFINITY, 0, 1.0f}), "sampling: temperature must be finite and ≥ 0, got inf");
  EXPECT_EQ(message({1.0f, 0, 0.25f}), "no throw");
}

// top_p is the decimal the user typed, and "sums to at least top_p" holds for it at exact ties: n equal logits
// (probability 1/n each) at top_p k/n keep exactly k tokens, ids 0..k−1 (ties by lower id). With top_p held as a
// float, 0.2 became 0.20000000298 and ten logits kept 3 tokens (2, 3, 4, 5, 5, 7, 7, 9, 9 for 0.1 ... 0.9); held as
// a double but compared without the sums' rounding, a hundred logits at 0.07 kept 8 (fl(0.07 · 100)
// = 7.000000000000001).
TEST(Sampling, TopPKeepsExactlyTheTiedPrefixThatReachesATypedDecimal) {
  for (const int n : {10, 100}) {
    const std::vector<float> equal(static_cast<size_t>(n), 0.25f);
    for (int k = 1; k < n; ++k) {
      SamplingOptions opt;
      opt.top_p = k / static_cast<double>(n);  // the double nearest k/n: what "0.07" reads as
      const std::vector<int64_t> c = counts(equal, opt, 3000);
      int kept = 0, beyond = 0;
      for (int v = 0; v < n; ++v) (v < k ? kept : beyond) += c[static_cast<size_t>(v)] > 0;
      EXPECT_EQ(kept, k) << n << " logits, top_p " << opt.top_p;
      EXPECT_EQ(beyond, 0) << n << " logits, top_p " << opt.top_p;
    }
  }
  // A top_p below float's least value is a top_p all the same: the argmax (float made 1e-50 a refused 0).
  SamplingOptions opt;
  opt.top_p = 1e-50;
  EXPECT_NO_THROW(check_sampling_options(opt));
  expect_frequencies(counts(kLogits, opt, 100), {0, 1, 0, 0, 0, 0}, 100);
}

// float32_option: a front end's double (a command line's text, a Python float) as the float an option is kept
// in, refused by its name and the value given when float32 would make it inf or 0 (the range check would then
// have named "inf" or "0", or a temperature of 1e-50 would have been greedy without a word).
TEST(Sampling, Float32OptionRefusesWhatFloatWouldTurnIntoInfOrZeroNamingTheValueGiven) {
  const auto message = [](double v) {
    try {
      float32_option(v, "--temperature");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  EXPECT_EQ(message(1e39), "--temperature must be representable as a float32, got 1e+39");
  EXPECT_EQ(message(-1e300), "--temperature must be representable as a float32, got -1e+300");
  EXPECT_EQ(message(3.5e38), "--temperature must be representable as a float32, got 3.5e+38");
  EXPECT_EQ(message(1e-50), "--temperature must be representable as a float32, got 1e-50");
  EXPECT_EQ(message(-1e-50), "--temperature must be representable as a float32, got -1e-50");
  EXPECT_EQ(message(0x1p-150), "--temperature must be representable as a float32, got 7.006492321624085e-46");
  EXPECT_EQ(message(0x1.ffffffp127), "--temperature must be representable as a float32, got 3.4028235677973366e+38");
  EXPECT_EQ(float32_option(0.8, "t"), 0.8f);  // rounded to nearest
  EXPECT_EQ(float32_option(3.4028235e38, "t"), FLT_MAX);
  EXPECT_EQ(float32_option(0x1.fffffefffffffp127, "t"), FLT_MAX);  // just below the half-way point
  EXPECT_EQ(float32_option(1e-45, "t"), 0x1p-149f);                // the least subnormal: not 0
  EXPECT_EQ(float32_option(0.0, "t"), 0.0f);
  EXPECT_TRUE(std::signbit(float32_option(-0.0, "t")));
  EXPECT_EQ(float32_option(INFINITY, "t"), INFINITY);  // for the range check to name
  EXPECT_EQ(float32_option(-INFINITY, "t"), -INFINITY);
  EXPECT_TRUE(std::isnan(float32_option(NAN, "t")));
}
