// tests/ops/attention_cache_test.cc — the incremental-decoding attention of src/ops/attention_cache.cc
// at the op level (tests/modules/transformer_test.cc steps whole layers through it):
//   * KVCache: append copies each row's key and value columns, the capacity doubles when full and
//     keeps what was there, select_rows reorders, repeats and drops rows — all bit for bit;
//   * attention_step equals the full causal ops::attention position by position: after step t each
//     row's output is position t of the full forward over that row's t + 1 positions, across
//     growth and a beam-style select_rows (the reference reorders the histories likewise);
//   * attention_memory equals ops::attention over each row's memory with the key padding mask its
//     memory_len stands for, for row_source groups that repeat, interleave and include an empty
//     memory (zeros), in both memory layouts;
//   * both against the double reference of tests/ops/attention_reference.h as well;
//   * the argument checks (each error names what does not fit), inference only, a hand-checked case.
//
// Tolerance: the cached step and the full forward run the same flash-attention kernel on the same
// float operands; a query row of the kernel reads only its own keys, and keys masked out by the
// causal mask or the key padding mask add exactly nothing (exp(−inf) = 0, and the running max and
// sum of the online softmax are unchanged by them), so the two must agree bit for bit. Against the
// double reference the bound is the first-order float error of attention derived in
// attention_reference.h (from the max-norms of q, k, v times ε).
// To add a case: another row pattern or step count in the tests below.
#include "tfm/ops/attention_cache.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/attention_reference.h"
#include "test_util.h"
#include "tfm/autograd.h"

namespace tfm::ops {
namespace {

using tfm::testing::bitwise_equal;
using tfm::testing::close_abs;
using tfm::testing::expect_invalid;
using tfm::testing::max_abs;
using tfm::testing::random_tensor;
using tfm::testing::RefAttention;
using tfm::testing::RefInput;
using tfm::testing::to_double;

constexpr int64_t H = 2, Dh = 3, Dv = 4, A = H * Dh, Av = H * Dv;
constexpr float kScale = 0.6f;
const AttentionHeads kHeads{H, Dh, Dv, kScale};

// A step's source (N, 1, C): an unused column, q, v, k, another unused column.
constexpr int64_t kQ = 1, kV = kQ + A, kK = kV + Av, kC = kK + A + 1;

// histories[n]: row n's positions, C floats each → (N, T, C).
Tensor pack(const std::vector<std::vector<float>>& histories, int64_t C) {
  const int64_t N = static_cast<int64_t>(histories.size()), T = static_cast<int64_t>(histories[0].size()) / C;
  Tensor x = Tensor::empty({N, T, C});
  for (int64_t n = 0; n < N; ++n) std::memcpy(x.data() + n * T * C, histories[static_cast<size_t>(n)].data(), sizeof(float) * T * C);
  return x;
}

// The cache holds, for row n and position j, the k and v columns of histories[n]'s position j.
void expect_cache_holds(const KVCache& c, const std::vector<std::vector<float>>& hist, const std::string& when) {
  ASSERT_EQ(c.rows(), static_cast<int64_t>(hist.size())) << when;
  const int64_t cap = c.k.size(1);
  for (size_t n = 0; n < hist.size(); ++n)
    for (int64_t j = 0; j < c.length; ++j) {
      const float* src = hist[n].data() + j * kC;
      const std::vector<float> k(src + kK, src + kK + A), v(src + kV, src + kV + Av);
      const std::vector<float> ck(c.k.data() + (static_cast<int64_t>(n) * cap + j) * A,
                                  c.k.data() + (static_cast<int64_t>(n) * cap + j + 1) * A);
      const std::vector<float> cv(c.v.data() + (static_cast<int64_t>(n) * cap + j) * Av,
                                  c.v.data() + (static_cast<int64_t>(n) * cap + j + 1) * Av);
      ASSERT_TRUE(bitwise_equal(ck, k, when + ": key of row " + std::to_string(n) + ", position " + std::to_string(j)));
      ASSERT_TRUE(bitwise_equal(cv, v, when + ": value of row " + std::to_string(n) + ", position " + std::to_string(j)));
    }
}

// N rows stepped T times from a cache of capacity 1 (grown at lengths 1, 2, 4, 8); after step 3 the
// rows become (2, 0, 0) (reorder, repeat, drop), after step 6 (1, 2) (fewer rows).
TEST(AttentionCache, StepEqualsFullCausalForwardPositionByPosition) {
  NoGradGuard ng;
  KVCache cache;
  cache.reset(3, 1, A, Av);
  std::vector<std::vector<float>> hist(3);
  for (int t = 0; t < 11; ++t) {
    SCOPED_TRACE("step " + std::to_string(t));
    const int64_t N = static_cast<int64_t>(hist.size());
    const Tensor x = random_tensor({N, 1, kC}, 100 + static_cast<uint64_t>(t));
    for (int64_t n = 0; n < N; ++n)
      hist[static_cast<size_t>(n)].insert(hist[static_cast<size_t>(n)].end(), x.data() + n * kC, x.data() + (n + 1) * kC);
    cache.append(x, kK, kV);
    ASSERT_EQ(cache.length, t + 1);
    int64_t cap = 1;
    while (cap < cache.length) cap *= 2;
    EXPECT_EQ(cache.k.size(1), cap);
    EXPECT_EQ(cache.v.size(1), cap);
    expect_cache_holds(cache, hist, "after append");

    const Tensor got = attention_step({x, kQ}, cache, kHeads);
    ASSERT_EQ(got.shape(), (Shape{N, 1, Av}));

    // The full causal forward over each row's t + 1 positions; its position t is the step's.
    const Tensor full_src = pack(hist, kC);
    Generator gen;
    const AttentionMasks causal{{}, {}, true};
    const Tensor full = attention({full_src, kQ}, {full_src, kK}, {full_src, kV}, kHeads, true, causal, 0.0f, false, gen);
    Tensor last = Tensor::empty({N, 1, Av});
    for (int64_t n = 0; n < N; ++n) std::memcpy(last.data() + n * Av, full.data() + (n * (t + 1) + t) * Av, sizeof(float) * Av);
    EXPECT_TRUE(bitwise_equal(got, last, "step vs full forward"));

    const std::vector<double> src = to_double(full_src);
    RefAttention ref{N, t + 1, t + 1, H, Dh, Dv, kScale, true, {}, {}, true};
    const std::vector<double> want = ref.forward({&src, kC, kQ}, {&src, kC, kK}, {&src, kC, kV});
    std::vector<double> want_last;
    for (int64_t n = 0; n < N; ++n)
      want_last.insert(want_last.end(), want.begin() + (n * (t + 1) + t) * Av, want.begin() + (n * (t + 1) + t + 1) * Av);
    const double bound = tfm::testing::attention_bounds(max_abs(src), max_abs(src), max_abs(src), 1.0, 0.0, Dh, Dv, 1,
                                                        t + 1, kScale).o;
    EXPECT_TRUE(close_abs(tfm::testing::values(got), want_last, bound, "step vs double reference"));

    const std::vector<int64_t> sel = t == 3 ? std::vector<int64_t>{2, 0, 0} : t == 6 ? std::vector<int64_t>{1, 2}
                                                                                     : std::vector<int64_t>{};
    if (!sel.empty()) {
      cache.select_rows(sel);
      std::vector<std::vector<float>> h;
      for (int64_t r : sel) h.push_back(hist[static_cast<size_t>(r)]);
      hist = std::move(h);
      EXPECT_EQ(cache.length, t + 1);
      expect_cache_holds(cache, hist, "after select_rows");
    }
  }
}

// Memory rows of lengths 5, 2 and 0 (S = 5); six query rows reading memory rows 1, 1, 0, 2, 1, 0
// (groups that repeat, interleave, and one with no key).
TEST(AttentionCache, MemoryEqualsFullForwardWithKeyPadding) {
  NoGradGuard ng;
  const int64_t Bm = 3, S = 5, N = 6, Cq = A + 3, Ckv = Av + A + 2;  // q at col 2; v at col 1, k at col 1 + Av
  const std::vector<int64_t> memory_len = {5, 2, 0}, row_source = {1, 1, 0, 2, 1, 0};
  for (bool batch_first : {true, false}) {
    SCOPED_TRACE(batch_first ? "batch_first memory" : "(S, Bm, C) memory");
    const Tensor q = random_tensor({N, 1, Cq}, 200);
    const Tensor kv = random_tensor(batch_first ? Shape{Bm, S, Ckv} : Shape{S, Bm, Ckv}, 201);
    const Tensor got = attention_memory({q, 2}, {kv, 1 + Av}, {kv, 1}, row_source, memory_len, kHeads, batch_first);
    ASSERT_EQ(got.shape(), (Shape{N, 1, Av}));

    // The full forward: each row's memory gathered into (N, S, Ckv), keys j ≥ memory_len padded.
    Tensor rows = Tensor::empty({N, S, Ckv});
    std::vector<uint8_t> pad(static_cast<size_t>(N * S));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t b = row_source[static_cast<size_t>(n)];
      for (int64_t j = 0; j < S; ++j) {
        const int64_t at = batch_first ? b * S + j : j * Bm + b;
        std::memcpy(rows.data() + (n * S + j) * Ckv, kv.data() + at * Ckv, sizeof(float) * Ckv);
        pad[static_cast<size_t>(n * S + j)] = j >= memory_len[static_cast<size_t>(b)];
      }
    }
    const AttentionMasks masks{{}, Tensor::from_bool({N, S}, pad), false};
    Generator gen;
    const Tensor full = attention({q, 2}, {rows, 1 + Av}, {rows, 1}, kHeads, true, masks, 0.0f, false, gen);
    EXPECT_TRUE(bitwise_equal(got, full, "memory step vs full forward"));
    for (int64_t c = 0; c < Av; ++c) EXPECT_EQ(got.data()[3 * Av + c], 0.0f) << "row 3 reads an empty memory";

    const std::vector<double> qd = to_double(q), rd = to_double(rows);
    RefAttention ref{N, 1, S, H, Dh, Dv, kScale, true, {}, masks.key_padding_mask, false};
    const double bound =
        tfm::testing::attention_bounds(max_abs(qd), max_abs(rd), max_abs(rd), 1.0, 0.0, Dh, Dv, 1, S, kScale).o;
    EXPECT_TRUE(close_abs(tfm::testing::values(got), ref.forward({&qd, Cq, 2}, {&rd, Ckv, 1 + Av}, {&rd, Ckv, 1}),
                          bound, "memory step vs double reference"));
  }
}

// H = 1, Dh = Dv = 1, scale 1; each step's source is [q, k, v].
//   Step 1: [1, 0, 4]: one key, p = 1, o = 4 exactly (capacity 1, full).
//   Step 2: [1, ln 3, 8]: the cache grows to 2; scores (1·0, 1·ln 3), p = (1/4, 3/4),
//     o = 4/4 + 8·3/4 = 7 (ln 3 rounded to float: a few ulp).
//   attention_memory with memory keys (0, ln 3), values (4, 8) and query 1: memory_len 1 gives 4,
//   2 gives 7, 0 gives 0.
TEST(AttentionCache, HandChecked) {
  NoGradGuard ng;
  const float ln3 = std::log(3.0f);
  const AttentionHeads one{1, 1, 1, 1.0f};
  KVCache c;
  c.reset(1, 1, 1, 1);
  const Tensor s1 = Tensor::from_vector({1, 1, 3}, {1, 0, 4});
  c.append(s1, 1, 2);
  EXPECT_EQ(attention_step({s1, 0}, c, one).item(), 4.0f);
  const Tensor s2 = Tensor::from_vector({1, 1, 3}, {1, ln3, 8});
  c.append(s2, 1, 2);
  EXPECT_EQ(c.k.size(1), 2);
  EXPECT_NEAR(attention_step({s2, 0}, c, one).item(), 7.0f, 1e-5);

  const Tensor q = Tensor::from_vector({1, 1, 1}, {1});
  const Tensor mem = Tensor::from_vector({1, 2, 2}, {0, 4, ln3, 8});  // (Bm 1, S 2, [k | v])
  EXPECT_EQ(attention_memory({q, 0}, {mem, 0}, {mem, 1}, {0}, {1}, one).item(), 4.0f);
  EXPECT_NEAR(attention_memory({q, 0}, {mem, 0}, {mem, 1}, {0}, {2}, one).item(), 7.0f, 1e-5);
  EXPECT_EQ(attention_memory({q, 0}, {mem, 0}, {mem, 1}, {0}, {0}, one).item(), 0.0f);
}

// Inference only: an input requiring a gradient throws while gradients are recorded, and runs
// under NoGradGuard.
TEST(AttentionCache, InferenceOnly) {
  KVCache c;
  c.reset(2, 4, A, Av);
  const Tensor x = random_tensor({2, 1, kC}, 300);
  c.append(x, kK, kV);
  Tensor q = random_tensor({2, 1, kC}, 301).requires_grad_(true);
  expect_invalid([&] { attention_step({q, kQ}, c, kHeads); }, {"attention_step: inference only; run it under NoGradGuard"});
  Tensor kv = random_tensor({2, 3, A + Av}, 302).requires_grad_(true);
  expect_invalid([&] { attention_memory({x, kQ}, {kv, 0}, {kv, A}, {0, 1}, {3, 3}, kHeads); },
                 {"attention_memory: inference only; run it under NoGradGuard"});
  NoGradGuard ng;
  EXPECT_EQ(attention_step({q, kQ}, c, kHeads).shape(), (Shape{2, 1, Av}));
  EXPECT_EQ(attention_memory({x, kQ}, {kv, 0}, {kv, A}, {0, 1}, {3, 3}, kHeads).shape(), (Shape{2, 1, Av}));
}

TEST(AttentionCache, ErrorsSayWhatDoesNotFit) {
  NoGradGuard ng;
  const Tensor x = random_tensor({2, 1, kC}, 400);  // kC = 22
  {
    KVCache c;
    expect_invalid([&] { c.append(x, kK, kV); }, {"KVCache::append: cache not reset"});
    expect_invalid([&] { c.select_rows({0}); }, {"KVCache::select_rows: cache not reset"});
    expect_invalid([&] { c.reset(2, 0, A, Av); }, {"KVCache::reset: bad sizes"});
    expect_invalid([&] { c.reset(2, 1, A, 0); }, {"KVCache::reset: bad sizes"});
  }
  KVCache c;
  c.reset(2, 1, A, Av);
  expect_invalid([&] { c.append(random_tensor({3, 1, kC}, 401), kK, kV); },
                 {"KVCache::append: src Float32(3, 1, 22) does not fit 2 rows of keys 6 and values 8 wide"});
  {  // T positions at once (a prefill) hold what T single appends hold, bit for bit, the capacity grown
    const Tensor three = random_tensor({2, 3, kC}, 405);
    KVCache once, steps;
    once.reset(2, 1, A, Av);
    steps.reset(2, 1, A, Av);
    once.append(three, kK, kV);
    for (int64_t t = 0; t < 3; ++t) {
      Tensor one = Tensor::empty({2, 1, kC});
      for (int64_t n = 0; n < 2; ++n)
        std::copy(three.data() + (n * 3 + t) * kC, three.data() + (n * 3 + t + 1) * kC, one.data() + n * kC);
      steps.append(one, kK, kV);
    }
    ASSERT_EQ(once.length, 3);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t t = 0; t < 3; ++t) {
        EXPECT_TRUE(std::equal(once.k.data() + (n * once.k.size(1) + t) * A, once.k.data() + (n * once.k.size(1) + t + 1) * A,
                               steps.k.data() + (n * steps.k.size(1) + t) * A));
        EXPECT_TRUE(std::equal(once.v.data() + (n * once.v.size(1) + t) * Av, once.v.data() + (n * once.v.size(1) + t + 1) * Av,
                               steps.v.data() + (n * steps.v.size(1) + t) * Av));
      }
  }
  expect_invalid([&] { c.append(random_tensor({3, 1, kC}, 402), kK, kV); }, {"src Float32(3, 1, 22) does not fit 2 rows"});
  expect_invalid([&] { c.append(x, kC - A + 1, kV); }, {"src Float32(2, 1, 22) does not fit"});
  expect_invalid([&] { c.append(x, kK, -1); }, {"src Float32(2, 1, 22) does not fit"});
  expect_invalid([&] { c.append(Tensor::zeros({2, 1, kC}, DType::BOOL), kK, kV); },
                 {"KVCache::append: src must be Float32, got Bool(2, 1, 22)"});

  // An empty cache, then a query of two positions, too narrow, or of other rows than the cache.
  expect_invalid([&] { attention_step({x, kQ}, c, kHeads); }, {"attention_step: cache does not match query Float32(2, 1, 22)"});
  c.append(x, kK, kV);
  expect_invalid([&] { attention_step({random_tensor({2, 2, kC}, 403), kQ}, c, kHeads); },
                 {"attention_step: query must be (N, 1, C ≥ col + 6), got Float32(2, 2, 22) with col 1"});
  expect_invalid([&] { attention_step({x, kC - A + 1}, c, kHeads); }, {"got Float32(2, 1, 22) with col 17"});
  expect_invalid([&] { attention_step({random_tensor({3, 1, kC}, 404), kQ}, c, kHeads); },
                 {"attention_step: cache does not match query Float32(3, 1, 22)"});
  expect_invalid([&] { attention_step({x, kQ}, c, {H, Dh, Dv + 1, kScale}); }, {"attention_step: cache does not match query"});
  expect_invalid([&] { attention_step({x, kQ}, c, {0, Dh, Dv, kScale}); },
                 {"attention_step: num_heads, head_dim and v_head_dim must be positive"});
  expect_invalid([&] { c.select_rows({1, 2}); }, {"KVCache::select_rows: row 2 out of range [0, 2)"});
  expect_invalid([&] { c.select_rows({-1}); }, {"KVCache::select_rows: row -1 out of range [0, 2)"});

  const Tensor kv = random_tensor({3, 4, A + Av}, 405);  // Bm 3, S 4
  const auto mem = [&](const std::vector<int64_t>& rs, const std::vector<int64_t>& len) {
    attention_memory({x, kQ}, {kv, 0}, {kv, A}, rs, len, kHeads);
  };
  expect_invalid([&] { mem({0}, {4, 4, 4}); }, {"attention_memory: row_source needs 2 entries and memory_len 3"});
  expect_invalid([&] { mem({0, 1}, {4, 4}); }, {"attention_memory: row_source needs 2 entries and memory_len 3"});
  expect_invalid([&] { mem({0, 3}, {4, 4, 4}); }, {"attention_memory: row_source 3 out of range"});
  expect_invalid([&] { mem({-1, 0}, {4, 4, 4}); }, {"attention_memory: row_source -1 out of range"});
  expect_invalid([&] { mem({0, 1}, {4, 5, 4}); }, {"attention_memory: memory_len 5 exceeds S"});
  expect_invalid([&] { attention_memory({x, kQ}, {kv, Av + 1}, {kv, A}, {0, 1}, {4, 4, 4}, kHeads); },
                 {"attention_memory: key Float32(3, 4, 14) and value Float32(3, 4, 14) do not fit widths 6 and 8"});
  expect_invalid([&] { attention_memory({x, kQ}, {kv, 0}, {random_tensor({3, 5, Av}, 406), 0}, {0, 1}, {4, 4, 4}, kHeads); },
                 {"attention_memory: key Float32(3, 4, 14) and value Float32(3, 5, 8) do not fit"});
  expect_invalid([&] { attention_memory({x, kC}, {kv, 0}, {kv, A}, {0, 1}, {4, 4, 4}, kHeads); },
                 {"attention_memory: query must be (N, 1, C ≥ col + 6), got Float32(2, 1, 22) with col 22"});
}

}  // namespace
}  // namespace tfm::ops
