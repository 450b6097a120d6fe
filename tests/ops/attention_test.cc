// tests/ops/attention_test.cc — ops::attention (src/ops/attention.cc) at the op boundary, above the
// kernels that tests/kernels/attention_test.cc checks against their scalar twin:
//   * argument checks: each error names the tensor (query, key, value, attn_mask,
//     key_padding_mask) and prints the expected against the actual shape;
//   * the forward against a plain double reference (tests/ops/attention_reference.h, written from
//     nn.MultiheadAttention's documented mask rules) for every mask form the op takes — attn_mask
//     Bool and Float32, (L, S) and (B·H, L, S), key_padding_mask Bool and Float32, is_causal,
//     combinations, rows with every key masked (zeros, no gradient) — in both layouts
//     (batch_first and (T, B, C)) and for every way q, k, v reach the op: three tensors, one packed
//     self-attention projection (columns 0, A, 2A), a packed key/value projection, and sources with
//     columns no role reads (whose gradient must be exactly zero);
//   * the autograd backward (the gradient of every source) against central differences of the
//     double reference;
//   * dropout: the generator's draw (B·H·L·S counters in training, none otherwise), the output and
//     gradient against the reference with the same keep rule, eval equal to no dropout bit for bit;
//   * gradients accumulating across backward calls; no tape without gradients;
//   * a hand-checked case for each mask kind.
//
// Tolerance: the first-order float error bounds derived in tests/ops/attention_reference.h, from the
// max-norms of q, k, v, the masks and the output gradient times ε (absolute, per element, per
// role's columns of a source); the central differences add ≤ 1e-10 (kNumericSlack). Columns no role
// reads must get a gradient of exactly 0, rows with every key masked an output and a query gradient
// of exactly 0.
// To add a case: a mask form in mask_cases() or an input arrangement in Inputs; every combination
// then runs forward and backward.
#include "tfm/ops/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "ops/attention_reference.h"
#include "test_util.h"
#include "tfm/autocast.h"
#include "tfm/autograd.h"

namespace tfm::ops {
namespace {

using tfm::testing::AttentionBounds;
using tfm::testing::bitwise_equal;
using tfm::testing::close_abs;
using tfm::testing::expect_invalid;
using tfm::testing::kNumericSlack;
using tfm::testing::max_abs;
using tfm::testing::random_tensor;
using tfm::testing::RefAttention;
using tfm::testing::RefInput;
using tfm::testing::Rng;
using tfm::testing::to_double;

constexpr float kInf = std::numeric_limits<float>::infinity();

// How q, k and v reach the op.
enum class Inputs {
  SEPARATE,     // three tensors, each read from column 0
  PACKED_SELF,  // one (.., 2A + Av) tensor: q at 0, k at A, v at 2A (L = S)
  PACKED_KV,    // q alone; one (.., A + Av) tensor: k at 0, v at A
  PARTIAL,      // q at column 2 of (.., A + 5); v at 0 and k at Av of (.., Av + A + 1): unread columns
};
const char* inputs_name(Inputs i) {
  switch (i) {
    case Inputs::SEPARATE: return "separate";
    case Inputs::PACKED_SELF: return "packed_self";
    case Inputs::PACKED_KV: return "packed_kv";
    case Inputs::PARTIAL: return "partial";
  }
  return "?";
}

struct Geometry {
  int64_t B = 2, L = 4, S = 5, H = 2, Dh = 3, Dv = 5;
  float scale = 0.7f;
  bool batch_first = true;
  int64_t A() const { return H * Dh; }
  int64_t Av() const { return H * Dv; }
  AttentionHeads heads() const { return {H, Dh, Dv, scale}; }
};

// The masks of one case and the (b, i) rows they leave without a key.
struct MaskCase {
  std::string name;
  AttentionMasks masks;
  std::vector<std::pair<int64_t, int64_t>> dead;
};

// A Bool (rows, S) block with about one entry in four true, column 0 always false (every row keeps
// a key), or a Float32 one in [−1, 1) with about one in five −inf (column 0 finite).
Tensor bool_mask(const Shape& shape, uint64_t seed) {
  Rng rng(seed);
  const int64_t S = shape.back();
  std::vector<uint8_t> m(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < m.size(); ++i) m[i] = (static_cast<int64_t>(i) % S != 0) && rng.uniform(0, 1) < 0.25f;
  return Tensor::from_bool(shape, m);
}
Tensor float_mask(const Shape& shape, uint64_t seed) {
  Rng rng(seed);
  const int64_t S = shape.back();
  std::vector<float> m(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < m.size(); ++i) {
    m[i] = rng.uniform(-1, 1);
    if (static_cast<int64_t>(i) % S != 0 && rng.uniform(0, 1) < 0.2f) m[i] = -kInf;
  }
  return Tensor::from_vector(shape, m);
}

std::vector<MaskCase> mask_cases(const Geometry& g) {
  const int64_t B = g.B, L = g.L, S = g.S, BH = g.B * g.H;
  std::vector<MaskCase> cases;
  cases.push_back({"none", {}, {}});
  cases.push_back({"attn_mask bool 2-D", {bool_mask({L, S}, 1), {}, false}, {}});
  cases.push_back({"attn_mask float 2-D", {float_mask({L, S}, 2), {}, false}, {}});
  cases.push_back({"attn_mask bool 3-D", {bool_mask({BH, L, S}, 3), {}, false}, {}});
  cases.push_back({"attn_mask float 3-D", {float_mask({BH, L, S}, 4), {}, false}, {}});
  cases.push_back({"key_padding_mask bool", {{}, bool_mask({B, S}, 5), false}, {}});
  cases.push_back({"key_padding_mask float", {{}, float_mask({B, S}, 6), false}, {}});
  cases.push_back({"is_causal", {{}, {}, true}, {}});
  cases.push_back({"causal + float 2-D + bool padding", {float_mask({L, S}, 7), bool_mask({B, S}, 8), true}, {}});
  cases.push_back({"bool 3-D + float padding", {bool_mask({BH, L, S}, 9), float_mask({B, S}, 10), false}, {}});
  {
    // Row 1 of the 2-D mask blocks every key; batch 1 pads every key: rows (0, 1) and all of batch 1
    // have no key left.
    std::vector<uint8_t> m(static_cast<size_t>(L * S), 0), pad(static_cast<size_t>(B * S), 0);
    for (int64_t j = 0; j < S; ++j) m[static_cast<size_t>(1 * S + j)] = 1, pad[static_cast<size_t>(1 * S + j)] = 1;
    MaskCase c{"fully masked rows", {Tensor::from_bool({L, S}, m), Tensor::from_bool({B, S}, pad), false}, {{0, 1}}};
    for (int64_t i = 0; i < L; ++i) c.dead.push_back({1, i});
    cases.push_back(c);
  }
  {
    // Causal with key 0 of batch 0 padded: query 0 of batch 0 sees no key.
    std::vector<float> pad(static_cast<size_t>(B * S), 0.0f);
    pad[0] = -kInf;
    cases.push_back({"causal + padded first key", {{}, Tensor::from_vector({B, S}, pad), true}, {{0, 0}}});
  }
  return cases;
}

// The sources of one case, each role's (source index, column), and the reference's view of them.
struct Sources {
  std::vector<Tensor> src;                       // leaves requiring grad
  int qs = 0, ks = 0, vs = 0;                    // index into src of each role's source
  int64_t qc = 0, kc = 0, vc = 0;                // each role's first column
  AttentionInput q() const { return {src[static_cast<size_t>(qs)], qc}; }
  AttentionInput k() const { return {src[static_cast<size_t>(ks)], kc}; }
  AttentionInput v() const { return {src[static_cast<size_t>(vs)], vc}; }
};

Sources make_sources(const Geometry& g, Inputs inputs, uint64_t seed) {
  const int64_t A = g.A(), Av = g.Av();
  auto shape = [&](int64_t T, int64_t C) { return g.batch_first ? Shape{g.B, T, C} : Shape{T, g.B, C}; };
  Sources s;
  auto add = [&](int64_t T, int64_t C) {
    s.src.push_back(random_tensor(shape(T, C), seed++).requires_grad_(true));
    return static_cast<int>(s.src.size() - 1);
  };
  switch (inputs) {
    case Inputs::SEPARATE:
      s.qs = add(g.L, A), s.ks = add(g.S, A), s.vs = add(g.S, Av);
      break;
    case Inputs::PACKED_SELF:
      s.qs = s.ks = s.vs = add(g.L, 2 * A + Av);
      s.kc = A, s.vc = 2 * A;
      break;
    case Inputs::PACKED_KV:
      s.qs = add(g.L, A);
      s.ks = s.vs = add(g.S, A + Av);
      s.vc = A;
      break;
    case Inputs::PARTIAL:
      s.qs = add(g.L, A + 5);
      s.qc = 2;
      s.ks = s.vs = add(g.S, Av + A + 1);
      s.kc = Av, s.vc = 0;
      break;
  }
  return s;
}

// Per-element tolerance of source i's gradient: each role's bound on its columns, 0 elsewhere.
std::vector<double> grad_tolerance(const Sources& s, int i, const Geometry& g, const AttentionBounds& b) {
  const Tensor& t = s.src[static_cast<size_t>(i)];
  const int64_t C = t.size(2);
  std::vector<double> tol(static_cast<size_t>(t.numel()), kNumericSlack);
  for (int64_t e = 0; e < t.numel(); ++e) {
    const int64_t c = e % C;
    double r = 0;
    if (s.qs == i && c >= s.qc && c < s.qc + g.A()) r += b.dq;
    if (s.ks == i && c >= s.kc && c < s.kc + g.A()) r += b.dk;
    if (s.vs == i && c >= s.vc && c < s.vc + g.Av()) r += b.dv;
    tol[static_cast<size_t>(e)] += r;
  }
  return tol;
}

// The double problem of a case: sources as doubles, and the reference over them.
struct DoubleCase {
  std::vector<std::vector<double>> src;
  RefAttention ref;
  RefInput q, k, v;
  DoubleCase(const Sources& s, const Geometry& g, const AttentionMasks& m) {
    for (const Tensor& t : s.src) src.push_back(to_double(t));
    ref = RefAttention{g.B, g.L, g.S, g.H, g.Dh, g.Dv, g.scale, g.batch_first, m.attn_mask, m.key_padding_mask,
                       m.is_causal};
    auto in = [&](int i, int64_t col) { return RefInput{&src[static_cast<size_t>(i)], s.src[static_cast<size_t>(i)].size(2), col}; };
    q = in(s.qs, s.qc), k = in(s.ks, s.kc), v = in(s.vs, s.vc);
  }
  DoubleCase(const DoubleCase&) = delete;
  std::vector<double> forward() const { return ref.forward(q, k, v); }
};

AttentionBounds bounds_for(const Sources& s, const DoubleCase& d, const Geometry& g, double grad_max,
                           double dropout_p = 0.0) {
  const double nq = max_abs(d.src[static_cast<size_t>(s.qs)]), nk = max_abs(d.src[static_cast<size_t>(s.ks)]),
               nv = max_abs(d.src[static_cast<size_t>(s.vs)]);
  return tfm::testing::attention_bounds(nq, nk, nv, grad_max, d.ref.mask_magnitude(), g.Dh, g.Dv, g.L, g.S, g.scale,
                                        dropout_p);
}

// Runs the op forward and backward on one case and checks the output, the dead rows and every
// source's gradient. Dropout (p > 0, training) with `gen`.
void check_case(const Geometry& g, Inputs inputs, const MaskCase& mc, uint64_t seed, float dropout_p = 0.0f) {
  const std::string tag = mc.name + ", " + inputs_name(inputs) + (g.batch_first ? ", batch_first" : ", (T, B, C)") +
                          (dropout_p > 0 ? ", dropout" : "");
  SCOPED_TRACE(tag);
  const Sources s = make_sources(g, inputs, seed);
  Generator gen{0xD0D0 + seed, 1000};
  const uint64_t offset = gen.offset;
  Tensor out = attention(s.q(), s.k(), s.v(), g.heads(), g.batch_first, mc.masks, dropout_p, true, gen);
  EXPECT_EQ(gen.offset, offset + (dropout_p > 0 ? static_cast<uint64_t>(g.B * g.H * g.L * g.S) : 0));
  ASSERT_EQ(out.shape(), (g.batch_first ? Shape{g.B, g.L, g.Av()} : Shape{g.L, g.B, g.Av()}));

  DoubleCase d(s, g, mc.masks);
  d.ref.dropout_p = dropout_p, d.ref.seed = gen.seed, d.ref.offset = offset;
  const Tensor w = random_tensor(out.shape(), seed + 50);
  const AttentionBounds b = bounds_for(s, d, g, 1.0, dropout_p);
  EXPECT_TRUE(close_abs(tfm::testing::values(out), d.forward(), b.o, "o", out.shape()));
  for (auto [bb, i] : mc.dead)
    for (int64_t c = 0; c < g.Av(); ++c) {
      const int64_t row = g.batch_first ? bb * g.L + i : i * g.B + bb;
      ASSERT_EQ(out.data()[row * g.Av() + c], 0.0f) << "fully masked row (" << bb << ", " << i << ")";
    }

  out.backward(w);
  const std::vector<double> wd = to_double(w);
  for (size_t i = 0; i < s.src.size(); ++i) {
    const Tensor& t = s.src[i];
    ASSERT_TRUE(t.grad().defined()) << "source " << i;
    ASSERT_EQ(t.grad().shape(), t.shape());
    const std::vector<double> numeric =
        tfm::testing::numeric_grad(d.src[i], [&] { return tfm::testing::dot(d.forward(), wd); });
    EXPECT_TRUE(close_abs(tfm::testing::values(t.grad()), numeric, grad_tolerance(s, static_cast<int>(i), g, b),
                          "d(source " + std::to_string(i) + ")", t.shape()));
  }
  const Tensor& qsrc = s.src[static_cast<size_t>(s.qs)];
  for (auto [bb, i] : mc.dead)
    for (int64_t c = 0; c < g.A(); ++c) {
      const int64_t row = g.batch_first ? bb * g.L + i : i * g.B + bb;
      ASSERT_EQ(qsrc.grad().data()[row * qsrc.size(2) + s.qc + c], 0.0f) << "dq of fully masked row (" << bb << ", " << i << ")";
    }
}

TEST(Attention, EveryMaskFormMatchesDoubleReferenceForwardAndBackward) {
  uint64_t seed = 1000;
  for (bool batch_first : {true, false})
    for (Inputs inputs : {Inputs::SEPARATE, Inputs::PACKED_SELF, Inputs::PACKED_KV, Inputs::PARTIAL}) {
      Geometry g;
      g.batch_first = batch_first;
      if (inputs == Inputs::PACKED_SELF) g.S = g.L;  // self-attention
      for (const MaskCase& mc : mask_cases(g)) check_case(g, inputs, mc, seed += 100);
    }
}

// One head as wide as the whole projection, one key, one query: the degenerate sizes.
TEST(Attention, SingleHeadSingleKeyMatchesDoubleReference) {
  Geometry g;
  g.B = 3, g.L = 1, g.S = 1, g.H = 1, g.Dh = 7, g.Dv = 2, g.scale = 0.25f;
  check_case(g, Inputs::SEPARATE, {"none", {}, {}}, 5000);
  g.batch_first = false;
  check_case(g, Inputs::PACKED_KV, {"is_causal", {{}, {}, true}, {}}, 5100);
}

// Dropout in training: B·H·L·S counters drawn from the generator, the output and gradient those of
// the reference with the kernels' keep rule at (seed, offset before the call).
TEST(Attention, DropoutInTrainingDrawsAndMatchesReference) {
  uint64_t seed = 6000;
  for (bool batch_first : {true, false}) {
    Geometry g;
    g.batch_first = batch_first;
    for (const MaskCase& mc : mask_cases(g))
      if (mc.name == "none" || mc.name == "causal + float 2-D + bool padding" || mc.name == "fully masked rows")
        check_case(g, Inputs::PACKED_KV, mc, seed += 100, 0.3f);
  }
}

// Outside training, or with p = 0, no dropout and no draw: the same bits as p = 0 in training.
TEST(Attention, NoDropoutOutsideTrainingAndNoDraw) {
  Geometry g;
  const Sources s = make_sources(g, Inputs::SEPARATE, 7000);
  const AttentionMasks m = mask_cases(g)[8].masks;
  Generator g0{5, 77};
  const Tensor plain = attention(s.q(), s.k(), s.v(), g.heads(), true, m, 0.0f, true, g0);
  EXPECT_EQ(g0.offset, 77u);
  Generator g1{5, 77};
  const Tensor eval = attention(s.q(), s.k(), s.v(), g.heads(), true, m, 0.5f, false, g1);
  EXPECT_EQ(g1.offset, 77u);
  EXPECT_TRUE(bitwise_equal(eval, plain, "eval with p = 0.5 vs p = 0"));
  Generator g2{5, 77};
  const Tensor dropped = attention(s.q(), s.k(), s.v(), g.heads(), true, m, 0.5f, true, g2);
  EXPECT_FALSE(bitwise_equal(dropped, plain, "training with p = 0.5 vs p = 0")) << "dropout changed nothing";
}

// Inside Autocast(BFLOAT16) the products take bfloat16 operands only where bf16_attention_pays (L·S > 64²): at 64
// queries and keys the output and every gradient are float32's bits; at 65 queries (on a CPU with AVX512-BF16) they
// differ from float32's, and each is within docs/bf16.md's bound of the double reference, normwise: 2·u_b·2M for
// M = 2 products with bfloat16 operands (QKᵀ and PV; u_b = 2⁻⁸), as tests/parity/parity_test.cc holds modules.
TEST(Attention, AutocastRunsTheProductsInBf16FromOneScoreTileUp) {
  EXPECT_FALSE(bf16_attention_pays(64, 64));
  EXPECT_TRUE(bf16_attention_pays(65, 64));
  EXPECT_TRUE(bf16_attention_pays(1, 4097));
  const auto normwise = [](std::span<const float> got, const std::vector<double>& want) {
    EXPECT_EQ(got.size(), want.size());
    return tfm::testing::rel_error_l2(got, want);
  };
  constexpr double kBound = 2 * 0x1p-8 * 2 * 2;
  uint64_t seed = 7500;
  for (const int64_t L : {64, 65}) {
    SCOPED_TRACE("L = " + std::to_string(L));
    Geometry g;
    g.B = 2, g.L = L, g.S = 64, g.H = 2, g.Dh = 4, g.Dv = 4;  // mask_cases needs B ≥ 2
    Sources s = make_sources(g, Inputs::SEPARATE, seed += 100);
    const AttentionMasks m = mask_cases(g)[8].masks;  // causal + float 2-D + bool padding
    const Tensor w = random_tensor({g.B, g.L, g.Av()}, seed + 50);
    const auto run = [&](Precision precision) {
      for (Tensor& t : s.src) t.zero_grad();
      Autocast scope(precision);
      Generator gen{3, 0};
      Tensor out = attention(s.q(), s.k(), s.v(), g.heads(), true, m, 0.0f, true, gen);
      out.backward(w);
      std::vector<Tensor> r{out};
      for (const Tensor& t : s.src) r.push_back(t.grad());
      return r;
    };
    const std::vector<Tensor> f32 = run(Precision::FLOAT32), b16 = run(Precision::BFLOAT16);
    if (!bf16_attention_pays(g.L, g.S)) {
      for (size_t i = 0; i < f32.size(); ++i) EXPECT_TRUE(bitwise_equal(b16[i], f32[i], "result " + std::to_string(i)));
      continue;
    }
    if (!bf16_matmul_accelerated()) continue;  // the products keep float32 FMAs without AVX512-BF16
    EXPECT_FALSE(bitwise_equal(b16[0], f32[0], "o")) << "bf16 products changed nothing";
    DoubleCase d(s, g, m);
    const double o_err = normwise(tfm::testing::values(b16[0]), d.forward());
    EXPECT_LE(o_err, kBound) << "o";
    EXPECT_GT(o_err, 100 * 0x1p-24) << "o: bf16 must change the output";
    const std::vector<double> wd = to_double(w);
    for (size_t i = 0; i < s.src.size(); ++i) {
      const std::vector<double> numeric =
          tfm::testing::numeric_grad(d.src[i], [&] { return tfm::testing::dot(d.forward(), wd); });
      EXPECT_LE(normwise(tfm::testing::values(b16[i + 1]), numeric), kBound) << "d(source " << i << ")";
    }
  }
}

// A second backward adds the same gradient into each source's grad (bitwise twice the first); with
// no input requiring a gradient nothing is recorded and the output is the same.
TEST(Attention, GradientsAccumulateAndNoTapeWithoutGrad) {
  Geometry g;
  const Sources s = make_sources(g, Inputs::PACKED_KV, 8000);
  const AttentionMasks m = mask_cases(g)[8].masks;
  Generator gen{1, 0};
  const Tensor w = random_tensor(g.batch_first ? Shape{g.B, g.L, g.Av()} : Shape{g.L, g.B, g.Av()}, 8050);
  const Tensor out = attention(s.q(), s.k(), s.v(), g.heads(), true, m, 0.0f, true, gen);
  out.backward(w);
  std::vector<std::vector<float>> first;
  for (const Tensor& t : s.src) {
    const auto v = tfm::testing::values(t.grad());
    first.emplace_back(v.begin(), v.end());
    for (float& x : first.back()) x *= 2.0f;  // exact
  }
  attention(s.q(), s.k(), s.v(), g.heads(), true, m, 0.0f, true, gen).backward(w);
  for (size_t i = 0; i < s.src.size(); ++i)
    EXPECT_TRUE(bitwise_equal(tfm::testing::values(s.src[i].grad()), first[i], "twice, source " + std::to_string(i)));

  NoGradGuard ng;
  const Tensor plain = attention(s.q(), s.k(), s.v(), g.heads(), true, m, 0.0f, true, gen);
  EXPECT_EQ(plain.grad_fn(), nullptr);
  EXPECT_TRUE(bitwise_equal(plain, out, "without the tape"));
}

// One tensor read by several roles over the same columns (attention of x with itself, no projection):
// each role's gradient is added into x's, as when the roles read three copies of x. (The kernel writes
// each role's gradient over its block of a shared buffer; overlapping roles get buffers of their own.)
TEST(Attention, RolesReadingTheSameColumnsAddTheirGradients) {
  Geometry g;
  g.S = g.L;
  g.Dv = g.Dh;
  const Shape shape{g.B, g.L, g.A()};
  const Tensor w = random_tensor(shape, 8101);
  Generator gen{1, 0};
  for (const bool causal : {false, true}) {
    const AttentionMasks m{{}, {}, causal};
    Tensor x = random_tensor(shape, 8100).requires_grad_(true);
    const Tensor same = attention({x, 0}, {x, 0}, {x, 0}, g.heads(), true, m, 0.0f, true, gen);
    same.backward(w);
    // q and k the same columns, v a copy: two roles overlapping.
    Tensor y = x.clone().requires_grad_(true), yv = x.clone().requires_grad_(true);
    attention({y, 0}, {y, 0}, {yv, 0}, g.heads(), true, m, 0.0f, true, gen).backward(w);
    Tensor q = x.clone().requires_grad_(true), k = x.clone().requires_grad_(true), v = x.clone().requires_grad_(true);
    const Tensor apart = attention({q, 0}, {k, 0}, {v, 0}, g.heads(), true, m, 0.0f, true, gen);
    apart.backward(w);
    const std::string what = causal ? "causal" : "no mask";
    EXPECT_TRUE(bitwise_equal(same, apart, what + ": forward"));
    const auto gq = tfm::testing::values(q.grad()), gk = tfm::testing::values(k.grad()),
               gv = tfm::testing::values(v.grad()), gx = tfm::testing::values(x.grad()),
               gy = tfm::testing::values(y.grad());
    std::vector<double> sum3, sum2, got3, got2;
    std::vector<double> tol;
    for (size_t i = 0; i < gx.size(); ++i) {
      sum3.push_back(double(gq[i]) + gk[i] + gv[i]);
      sum2.push_back(double(gq[i]) + gk[i]);
      got3.push_back(gx[i]);
      got2.push_back(gy[i]);
      tol.push_back(4e-7 * (std::fabs(gq[i]) + std::fabs(gk[i]) + std::fabs(gv[i])) + 1e-30);  // two float adds
    }
    EXPECT_TRUE(close_abs(got3, sum3, tol, what + ": q, k, v all x"));
    EXPECT_TRUE(close_abs(got2, sum2, tol, what + ": q and k both y"));
    EXPECT_TRUE(bitwise_equal(tfm::testing::values(yv.grad()), gv, what + ": v's copy"));
  }
}

// B = H = L = 1, S = 2, Dh = Dv = 1, scale 1: q = 1, k = (0, ln 3), v = (4, 8), dO = 1.
//   No mask: s = (0, ln 3), p = (1/4, 3/4), o = 4/4 + 8·3/4 = 7;
//     dv = p = (1/4, 3/4); dp = v = (4, 8), D = o = 7, ds = p·(dp − D) = (−3/4, 3/4);
//     dq = Σ ds_j k_j = 3/4·ln 3; dk = ds·q = (−3/4, 3/4).
//     (ln 3 is rounded to float, so these hold to a few ulp.)
//   attn_mask Bool [[false, true]], or is_causal (key 1 > query 0): p = (1, 0), o = 4 exactly,
//     dv = (1, 0), ds = 1·(4 − 4) = 0: dq = dk = 0.
//   key_padding_mask Float32 [[0, −ln 3]]: s = (0, ln 3 − ln 3 = 0) exactly, p = (1/2, 1/2), o = 6.
TEST(Attention, HandChecked) {
  const float ln3 = std::log(3.0f);
  struct Run {
    Tensor o, dq, dk, dv;
  };
  auto run = [&](const AttentionMasks& m) {
    Tensor q = Tensor::from_vector({1, 1, 1}, {1}).requires_grad_(true);
    Tensor k = Tensor::from_vector({1, 2, 1}, {0, ln3}).requires_grad_(true);
    Tensor v = Tensor::from_vector({1, 2, 1}, {4, 8}).requires_grad_(true);
    Generator gen;
    Tensor o = attention({q, 0}, {k, 0}, {v, 0}, {1, 1, 1, 1.0f}, true, m, 0.0f, false, gen);
    o.backward(Tensor::full({1, 1, 1}, 1.0f));
    return Run{o, q.grad(), k.grad(), v.grad()};
  };
  const Run none = run({});
  EXPECT_NEAR(none.o.item(), 7.0f, 1e-5);
  EXPECT_NEAR(none.dv.data()[0], 0.25f, 1e-6);
  EXPECT_NEAR(none.dv.data()[1], 0.75f, 1e-6);
  EXPECT_NEAR(none.dq.item(), 0.75f * ln3, 1e-5);
  EXPECT_NEAR(none.dk.data()[0], -0.75f, 1e-5);
  EXPECT_NEAR(none.dk.data()[1], 0.75f, 1e-5);
  for (const AttentionMasks& m : {AttentionMasks{Tensor::from_bool({1, 2}, {0, 1}), {}, false},
                                  AttentionMasks{{}, {}, true}}) {
    const Run r = run(m);
    EXPECT_EQ(r.o.item(), 4.0f);
    EXPECT_EQ(r.dv.data()[0], 1.0f);
    EXPECT_EQ(r.dv.data()[1], 0.0f);
    EXPECT_EQ(r.dq.item(), 0.0f);
    EXPECT_EQ(r.dk.data()[0], 0.0f);
    EXPECT_EQ(r.dk.data()[1], 0.0f);
  }
  EXPECT_EQ(run({{}, Tensor::from_vector({1, 2}, {0, -ln3}), false}).o.item(), 6.0f);
}

TEST(Attention, ErrorsNameTheTensorAndTheExpectedShape) {
  // B 2, L 4, S 5, H 2, Dh 3, Dv 5: A = 6, Av = 10.
  const Tensor q = random_tensor({2, 4, 6}, 1), k = random_tensor({2, 5, 6}, 2), v = random_tensor({2, 5, 10}, 3);
  Generator gen;
  auto call = [&](const AttentionInput& qi, const AttentionInput& ki, const AttentionInput& vi,
                  const AttentionMasks& m = {}, AttentionHeads h = {2, 3, 5, 0.5f}) {
    attention(qi, ki, vi, h, true, m, 0.0f, false, gen);
  };
  expect_invalid([&] { call({Tensor(), 0}, {k, 0}, {v, 0}); }, {"attention: query is undefined"});
  expect_invalid([&] { call({q, 0}, {Tensor(), 0}, {v, 0}); }, {"attention: key is undefined"});
  expect_invalid([&] { call({q, 0}, {k, 0}, {Tensor::zeros({2, 5, 10}, DType::BOOL), 0}); },
                 {"attention: value must be Float32, got Bool(2, 5, 10)"});
  expect_invalid([&] { call({q.reshape({8, 6}), 0}, {k, 0}, {v, 0}); },
                 {"attention: query, key and value must be 3-D, got Float32(8, 6), Float32(2, 5, 6), Float32(2, 5, 10)"});
  expect_invalid([&] { call({q, 0}, {k, 0}, {v, 0}, {}, {0, 3, 5, 0.5f}); },
                 {"attention: num_heads, head_dim and v_head_dim must be positive, got 0, 3, 5"});
  expect_invalid([&] { call({q, 0}, {k, 0}, {v, 0}, {}, {2, 3, -1, 0.5f}); }, {"got 2, 3, -1"});
  expect_invalid([&] { call({random_tensor({2, 4, 5}, 4), 0}, {k, 0}, {v, 0}); },
                 {"attention: query Float32(2, 4, 5) (columns from 0) does not fit batch 2, length 4, width 6"});
  expect_invalid([&] { call({q, 1}, {k, 0}, {v, 0}); },
                 {"attention: query Float32(2, 4, 6) (columns from 1) does not fit batch 2, length 4, width 6"});
  expect_invalid([&] { call({q, -1}, {k, 0}, {v, 0}); }, {"(columns from -1)"});
  expect_invalid([&] { call({q, 0}, {random_tensor({3, 5, 6}, 5), 0}, {v, 0}); },
                 {"attention: key Float32(3, 5, 6) (columns from 0) does not fit batch 2, length 5, width 6"});
  expect_invalid([&] { call({q, 0}, {k, 0}, {random_tensor({2, 4, 10}, 6), 0}); },
                 {"attention: value Float32(2, 4, 10) (columns from 0) does not fit batch 2, length 5, width 10"});
  expect_invalid([&] { call({q, 0}, {k, 0}, {random_tensor({2, 5, 6}, 7), 0}); },
                 {"attention: value Float32(2, 5, 6) (columns from 0) does not fit batch 2, length 5, width 10"});
  expect_invalid([&] { call({q, 0}, {k, 0}, {v, 0}, {Tensor::zeros({5, 4}), {}, false}); },
                 {"attn_mask: expected shape (4, 5), got (5, 4)"});
  expect_invalid([&] { call({q, 0}, {k, 0}, {v, 0}, {Tensor::zeros({2, 4, 5}, DType::BOOL), {}, false}); },
                 {"attn_mask: expected shape (4, 5) or (4, 4, 5), got (2, 4, 5)"});
  expect_invalid([&] { call({q, 0}, {k, 0}, {v, 0}, {Tensor::zeros({5}), {}, false}); },
                 {"attn_mask: expected shape (4, 5) or (4, 4, 5), got (5,)"});
  expect_invalid([&] { call({q, 0}, {k, 0}, {v, 0}, {{}, Tensor::zeros({5, 2}, DType::BOOL), false}); },
                 {"key_padding_mask: expected shape (2, 5), got (5, 2)"});
  expect_invalid([&] { call({q, 0}, {k, 0}, {v, 0}, {{}, Tensor::zeros({2, 5, 1}), false}); },
                 {"key_padding_mask: expected shape (2, 5), got (2, 5, 1)"});
}

}  // namespace
}  // namespace tfm::ops
