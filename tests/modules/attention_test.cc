// tests/modules/attention_test.cc — MultiheadAttention (src/modules/attention.cc) as a module: what
// the op tests (tests/ops/attention_test.cc, linear_test.cc) cannot see and the parity suite checks
// only on its fixtures:
//   * its parameters: PyTorch's keys and shapes for the default, bias-free and variant geometries
//     (head_dim, v_head_dim, qkv_bias, out_bias), PyTorch's initialisation (zero biases, in_proj
//     xavier-uniform, out_proj like Linear), and the variant checks naming the option;
//   * its forward against a double re-statement of nn.MultiheadAttention (in-projection rows
//     q, k, v of in_proj_weight, attention with the masks, out_proj) for the three projection paths
//     — query, key and value one tensor (one packed GEMM), key and value one tensor (cross-attention),
//     three tensors — and for three distinct tensors holding equal values, in both layouts, with
//     masks, every variant;
//   * its backward: every parameter's and input's gradient against central differences of the
//     double re-statement;
//   * attention dropout: drawn from the module's generator in training only;
//   * the cached single-position forward in (1, N, E) and (N, 1, E) layouts against the full
//     forward, and the cache errors no layer test reaches.
//
// Tolerance, forward (absolute, per element; ε = 2⁻²³, γ_n = n·u/(1 − n·u), u = ε/2): the
// projections q, k, v err by e = γ_{E+1}·(E·nx·nW + nb) (nx, nW, nb the max-norms of the inputs,
// in_proj_weight and in_proj_bias; tests/ops/linear_test.cc); those move each score by at most
// scale·Dh·(nq + nk)·e on top of the attention's own rounding (Dh + 3)·ε·σ (σ, and the rest of the
// attention bound, as derived in tests/ops/attention_reference.h, nq, nk, nv the projections'
// max-norms), so the attention output errs by Δo = κ·(ρ + (S + 1)·ε)·nv + κ·e with
// ρ = 2·(score error) + (S + 4)·ε; out_proj adds Av·nWo·Δo + γ_{Av+1}·(Av·no·nWo + nbo). The bound is
// twice that (the flash kernel's per-tile rescaling), and sits 100–1000× above the measured errors.
// Gradients: the same three stages run in reverse (out_proj's backward, attention's, in_proj's),
// each a sum of products of the same magnitudes whose rounding the op tests bound one by one; here
// every gradient is checked normwise, max|g − numeric| ≤ 4·(forward bound / max|y|)·max|numeric|
// per tensor — the forward's relative bound with one more chained product and the cancellation in
// the softmax's backward (tests/kernels/attention_test.cc's rule). A gradient sent to the wrong rows
// of in_proj_weight, a missing bias gradient or a role mixed up errs by O(1) relative.
// To add a case: a variant in variants() or an input arrangement in Inputs.
#include "tfm/modules/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/attention_reference.h"
#include "test_util.h"
#include "tfm/autograd.h"

namespace tfm {
namespace {

using tfm::testing::bitwise_equal;
using tfm::testing::close_abs;
using tfm::testing::close_rel;
using tfm::testing::expect_invalid;
using tfm::testing::gamma_n;
using tfm::testing::kFloatEps;
using tfm::testing::linear_ref;
using tfm::testing::max_abs;
using tfm::testing::random_tensor;
using tfm::testing::RefAttention;
using tfm::testing::RefInput;
using tfm::testing::to_double;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Variant {
  std::string name;
  int64_t E, H;
  bool bias;
  AttentionVariant v;
};
std::vector<Variant> variants() {
  std::vector<Variant> out;
  out.push_back({"default E 8 H 2", 8, 2, true, {}});
  out.push_back({"bias false E 6 H 3", 6, 3, false, {}});
  AttentionVariant v;
  v.head_dim = 3;
  v.v_head_dim = 5;
  v.qkv_bias = false;
  v.out_bias = true;
  v.attn_scale = 0.3f;
  out.push_back({"head_dim 3 v_head_dim 5 no qkv bias scale 0.3, E 4 H 2", 4, 2, false, v});
  return out;
}

// Nonzero biases (PyTorch initialises them to zero, which would hide a bias left out).
void randomize_biases(MultiheadAttention& m, uint64_t seed) {
  for (Tensor* b : {&m.in_proj_bias, &m.out_proj.bias})
    if (b->defined()) b->copy_(random_tensor(b->shape(), seed++, -0.5f, 0.5f));
}

// The module's parameters in double, and the double re-statement of its forward.
struct DoubleMha {
  int64_t E, H, Dh, Dv, A, Av;
  double scale;
  bool batch_first;
  std::vector<double> W, b, Wo, bo;  // in_proj_weight (2A+Av, E), in_proj_bias or empty, out_proj
  mutable double nq = 0, nk = 0, nv = 0, no = 0;  // the last forward's projection and attention max-norms

  explicit DoubleMha(const MultiheadAttention& m)
      : E(m.embed_dim), H(m.num_heads), Dh(m.head_dim()), Dv(m.v_head_dim()), A(m.proj_dim()), Av(m.v_proj_dim()),
        scale(m.heads().scale), batch_first(m.batch_first) {
    W = to_double(m.in_proj_weight);
    if (m.in_proj_bias.defined()) b = to_double(m.in_proj_bias);
    Wo = to_double(m.out_proj.weight);
    if (m.out_proj.bias.defined()) bo = to_double(m.out_proj.bias);
  }
  // Rows [r0, r0 + n) of in_proj_weight and in_proj_bias.
  std::vector<double> rows_of(const std::vector<double>& t, int64_t r0, int64_t n, int64_t width) const {
    if (t.empty()) return {};
    return {t.begin() + r0 * width, t.begin() + (r0 + n) * width};
  }
  // query (B, L, E) / (L, B, E), key and value (B, S, E) / (S, B, E) → (B, L, E) / (L, B, E).
  std::vector<double> forward(const std::vector<double>& query, const std::vector<double>& key,
                              const std::vector<double>& value, int64_t B, int64_t L, int64_t S,
                              const ops::AttentionMasks& masks, float dropout_p = 0.0f, uint64_t seed = 0,
                              uint64_t offset = 0) const {
    const std::vector<double> q = linear_ref(query, rows_of(W, 0, A, E), rows_of(b, 0, A, 1), E, A);
    const std::vector<double> k = linear_ref(key, rows_of(W, A, A, E), rows_of(b, A, A, 1), E, A);
    const std::vector<double> v = linear_ref(value, rows_of(W, 2 * A, Av, E), rows_of(b, 2 * A, Av, 1), E, Av);
    nq = max_abs(q), nk = max_abs(k), nv = max_abs(v);
    RefAttention ref{B, L, S, H, Dh, Dv, scale, batch_first, masks.attn_mask, masks.key_padding_mask, masks.is_causal,
                     dropout_p, seed, offset};
    const std::vector<double> o = ref.forward({&q, A, 0}, {&k, A, 0}, {&v, Av, 0});
    no = max_abs(o);
    return linear_ref(o, Wo, bo, Av, E);
  }
  // The forward bound of the header comment (absolute, per element).
  double bound(double nx, int64_t S, double mask_magnitude, double dropout_p = 0.0) const {
    const double eps = kFloatEps, kappa = 1.0 / (1.0 - dropout_p);
    const double e = gamma_n(E + 1) * (static_cast<double>(E) * nx * max_abs(W) + max_abs(b));
    const double sigma = scale * static_cast<double>(Dh) * nq * nk + mask_magnitude;
    const double ds = scale * static_cast<double>(Dh) * (nq + nk) * e + static_cast<double>(Dh + 3) * eps * sigma;
    const double rho = 2.0 * ds + static_cast<double>(S + 4) * eps;
    const double dout = kappa * (rho + static_cast<double>(S + 1) * eps) * nv + kappa * e;
    const double nWo = max_abs(Wo);
    return 2.0 * (static_cast<double>(Av) * nWo * dout +
                  gamma_n(Av + 1) * (static_cast<double>(Av) * no * nWo + max_abs(bo)));
  }
};

// How query, key and value reach the module.
enum class Inputs { SELF, SELF_COPIES, CROSS, SEPARATE };
const char* inputs_name(Inputs i) {
  switch (i) {
    case Inputs::SELF: return "one tensor";
    case Inputs::SELF_COPIES: return "three equal tensors";
    case Inputs::CROSS: return "key is value";
    case Inputs::SEPARATE: return "three tensors";
  }
  return "?";
}

// Masks for query length L and key length S: self-attention gets a causal mask, a Bool (L, S)
// attn_mask and a Float32 padding mask with −inf; the others a Float32 (B·H, L, S) attn_mask and a
// Bool padding mask (the last key of batch 1 padded). No row loses every key.
ops::AttentionMasks masks_for(Inputs inputs, int64_t B, int64_t H, int64_t L, int64_t S) {
  ops::AttentionMasks m;
  if (inputs == Inputs::SELF || inputs == Inputs::SELF_COPIES) {
    std::vector<uint8_t> am(static_cast<size_t>(L * S), 0);
    am[static_cast<size_t>(2 * S + 1)] = 1;  // query 2 may not see key 1
    m.attn_mask = Tensor::from_bool({L, S}, am);
    std::vector<float> kpm = tfm::testing::random_values(B * S, 77, -1, 1);
    kpm[static_cast<size_t>(S + S - 1)] = -kInf;
    m.key_padding_mask = Tensor::from_vector({B, S}, kpm);
    m.is_causal = true;
  } else {
    m.attn_mask = random_tensor({B * H, L, S}, 78, -1, 1);
    std::vector<uint8_t> kpm(static_cast<size_t>(B * S), 0);
    kpm[static_cast<size_t>(S + S - 1)] = 1;
    m.key_padding_mask = Tensor::from_bool({B, S}, kpm);
  }
  return m;
}

double mask_magnitude(const ops::AttentionMasks& m) {
  double r = 0;
  for (const Tensor* t : {&m.attn_mask, &m.key_padding_mask})
    if (t->defined() && t->dtype() == DType::FLOAT32) r += max_abs(to_double(*t));
  return r;
}

TEST(MultiheadAttentionModule, KeysShapesAndInitialisation) {
  struct Want {
    std::vector<std::string> keys;
    std::vector<Shape> shapes;
  };
  const std::vector<Variant> vs = variants();
  const Want want[] = {
      {{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}, {{24, 8}, {24}, {8, 8}, {8}}},
      {{"in_proj_weight", "out_proj.weight"}, {{18, 6}, {6, 6}}},
      // A = 2·3 = 6, Av = 2·5 = 10: in_proj (2A + Av, E) = (22, 4), out_proj (E, Av) = (4, 10).
      {{"in_proj_weight", "out_proj.weight", "out_proj.bias"}, {{22, 4}, {4, 10}, {4}}},
  };
  for (size_t c = 0; c < vs.size(); ++c) {
    SCOPED_TRACE(vs[c].name);
    Generator gen{11, 0};
    MultiheadAttention m(vs[c].E, vs[c].H, 0.0f, vs[c].bias, true, vs[c].v, gen);
    NamedTensors sd = m.state_dict();
    EXPECT_EQ(sd.names(), want[c].keys);
    for (size_t i = 0; i < want[c].keys.size() && i < sd.size(); ++i)
      EXPECT_EQ(sd.at(want[c].keys[i]).shape(), want[c].shapes[i]) << want[c].keys[i];
    // xavier_uniform over (2A + Av, E): U(±√(6 / (fan_in + fan_out))), fan_in = E, fan_out = 2A + Av;
    // the largest |w| of 88 to 192 draws is close to the bound.
    const double bound = std::sqrt(6.0 / static_cast<double>(m.embed_dim + m.in_proj_weight.size(0)));
    const double w_max = max_abs(to_double(m.in_proj_weight));
    EXPECT_LE(w_max, bound);
    EXPECT_GE(w_max, 0.8 * bound);
    // out_proj: nn.Linear(Av, E)'s U(±1/√Av); PyTorch then zeroes its bias.
    const double o_bound = 1.0 / std::sqrt(static_cast<double>(m.v_proj_dim()));
    const double o_max = max_abs(to_double(m.out_proj.weight));
    EXPECT_LE(o_max, o_bound);
    EXPECT_GE(o_max, 0.5 * o_bound);
    for (const Tensor* b : {&m.in_proj_bias, &m.out_proj.bias}) {
      if (b->defined()) {
        EXPECT_EQ(max_abs(to_double(*b)), 0.0);
      }
    }
  }
  AttentionVariant v;
  v.head_dim = 5;  // 4 % 3 ≠ 0 is fine with head_dim given
  MultiheadAttention m(4, 3, 0.0f, true, false, v);
  EXPECT_EQ(m.heads().scale, 1.0f / std::sqrt(5.0f));
  EXPECT_EQ(m.proj_dim(), 15);
  EXPECT_EQ(m.v_proj_dim(), 15);
}

// kdim or vdim other than embed_dim: PyTorch's separate projections, its keys in its order, each matrix xavier over
// its own shape.
TEST(MultiheadAttentionModule, KdimAndVdimGiveSeparateProjections) {
  Generator gen{12, 0};
  MultiheadAttention m(8, 2, 0.0f, true, true, AttentionVariant{}, 5, 11, gen);
  EXPECT_TRUE(m.separate_projections());
  EXPECT_FALSE(m.in_proj_weight.defined());
  const NamedTensors sd = m.state_dict();
  EXPECT_EQ(sd.names(), (std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                                                  "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(sd.at("q_proj_weight").shape(), (Shape{8, 8}));
  EXPECT_EQ(sd.at("k_proj_weight").shape(), (Shape{8, 5}));
  EXPECT_EQ(sd.at("v_proj_weight").shape(), (Shape{8, 11}));
  EXPECT_EQ(sd.at("in_proj_bias").shape(), (Shape{24}));
  for (const Tensor* w : {&m.q_proj_weight, &m.k_proj_weight, &m.v_proj_weight}) {
    const double bound = std::sqrt(6.0 / static_cast<double>(w->size(0) + w->size(1)));
    const double w_max = max_abs(to_double(*w));
    EXPECT_LE(w_max, bound);
    EXPECT_GE(w_max, 0.6 * bound);
  }
  // kdim = vdim = embed_dim given explicitly is the packed layout, as in PyTorch.
  EXPECT_FALSE(MultiheadAttention(8, 2, 0.0f, true, true, AttentionVariant{}, 8, 8, gen).separate_projections());
  expect_invalid([&] { MultiheadAttention(8, 2, 0.0f, true, true, AttentionVariant{}, 0, 8, gen); },
                 {"MultiheadAttention: kdim 0 and vdim 8 must be positive"});

  // Forward: (B, L, E) queries against (B, S, kdim) keys and (B, S, vdim) values; the same numbers as the packed
  // module whose in_proj_weight stacks the three matrices, fed widened inputs (zeros in the extra columns).
  const Tensor q = random_tensor({2, 3, 8}, 13), k = random_tensor({2, 4, 5}, 14), v = random_tensor({2, 4, 11}, 15);
  const Tensor y = m.forward(q, k, v);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 8}));
  // Widen the inputs to 16 features, q and k at columns [0, 8) and [0, 5), v at [5, 16); the twin keeps the head
  // width 4 (head_dim), so its in_proj_weight is (24, 16) with rows [0, 8) for q, [8, 16) for k, [16, 24) for v,
  // and its out_proj (16, 8) is m's in its first 8 rows.
  AttentionVariant four;
  four.head_dim = 4;
  MultiheadAttention packed(16, 2, 0.0f, true, true, four, gen);
  auto widen = [](const Tensor& t, int64_t offset) {
    Tensor w = Tensor::zeros({t.size(0), t.size(1), 16});
    for (int64_t r = 0; r < t.size(0) * t.size(1); ++r)
      for (int64_t j = 0; j < t.size(2); ++j) w.data()[r * 16 + offset + j] = t.data()[r * t.size(2) + j];
    return w;
  };
  packed.in_proj_weight.fill_(0.0f);
  const Tensor* parts[] = {&m.q_proj_weight, &m.k_proj_weight, &m.v_proj_weight};
  const int64_t col0[] = {0, 0, 5};  // q at columns [0, 8), k at [0, 5), v at [5, 16)
  for (int p = 0; p < 3; ++p)
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t j = 0; j < parts[p]->size(1); ++j)
        packed.in_proj_weight.data()[(p * 8 + i) * 16 + col0[p] + j] = parts[p]->data()[i * parts[p]->size(1) + j];
  std::copy_n(m.in_proj_bias.data(), 24, packed.in_proj_bias.data());
  packed.out_proj.weight.fill_(0.0f);
  packed.out_proj.bias.fill_(0.0f);
  for (int64_t i = 0; i < 8; ++i) {
    std::copy_n(m.out_proj.weight.data() + i * 8, 8, packed.out_proj.weight.data() + i * 8);
    packed.out_proj.bias.data()[i] = m.out_proj.bias.data()[i];
  }
  const Tensor y2 = packed.forward(widen(q, 0), widen(k, 0), widen(v, 5));
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t j = 0; j < 8; ++j) EXPECT_NEAR(y.data()[r * 8 + j], y2.data()[r * 16 + j], 1e-5) << r << "," << j;

  // Incremental decoding reads one packed projection: refused by name.
  NoGradGuard ng;
  AttentionCache c;
  expect_invalid(
      [&] {
        m.forward(random_tensor({2, 1, 8}, 16), k, v, {}, &c);
      },
      {"MultiheadAttention with a cache: kdim and vdim must equal embed_dim"});
}

// add_bias_kv and add_zero_attn against a module without them fed one more key/value position: a zero input row
// projects to in_proj_bias's key and value parts, so with bias_k, bias_v set to those parts (and, for the zero
// position, those parts zero) the twin's extra position is exactly the added one; the masks padded with a column
// that blocks nothing.
TEST(MultiheadAttentionModule, AddBiasKvAndAddZeroAttnAppendKeyPositions) {
  Generator gen{21, 0};
  MultiheadAttention both(64, 4, 0.0f, true, true, AttentionVariant{}, std::nullopt, std::nullopt, true, true, gen);
  EXPECT_EQ(both.added_positions(), 2);
  const NamedTensors sd = both.state_dict();
  EXPECT_EQ(sd.names(), (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "bias_k", "bias_v",
                                                  "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(sd.at("bias_k").shape(), (Shape{1, 1, 64}));
  EXPECT_EQ(sd.at("bias_v").shape(), (Shape{1, 1, 64}));
  for (const Tensor* b : {&both.bias_k, &both.bias_v}) {  // xavier_normal over (1, 1, 64): std 1/8
    double ss = 0;
    for (int64_t i = 0; i < 64; ++i) ss += static_cast<double>(b->data()[i]) * b->data()[i];
    const double sd_hat = std::sqrt(ss / 64);
    EXPECT_GT(sd_hat, 0.125 * 0.6);
    EXPECT_LT(sd_hat, 0.125 * 1.4);
  }

  const int64_t E = 8, B = 2, L = 3, S = 4;
  for (const bool bias_kv : {true, false}) {
    for (const bool batch_first : {true, false}) {
      SCOPED_TRACE(std::string(bias_kv ? "add_bias_kv" : "add_zero_attn") + (batch_first ? ", batch_first" : ""));
      MultiheadAttention m(E, 2, 0.0f, true, batch_first, AttentionVariant{}, std::nullopt, std::nullopt, bias_kv,
                           !bias_kv, gen);
      MultiheadAttention twin(E, 2, 0.0f, true, batch_first, gen);
      std::copy_n(m.in_proj_weight.data(), 3 * E * E, twin.in_proj_weight.data());
      std::copy_n(m.out_proj.weight.data(), E * E, twin.out_proj.weight.data());
      std::copy_n(m.out_proj.bias.data(), E, twin.out_proj.bias.data());
      if (bias_kv) {
        std::copy_n(m.in_proj_bias.data() + E, E, m.bias_k.data());
        std::copy_n(m.in_proj_bias.data() + 2 * E, E, m.bias_v.data());
      } else {
        std::fill_n(m.in_proj_bias.data() + E, 2 * E, 0.0f);
      }
      std::copy_n(m.in_proj_bias.data(), 3 * E, twin.in_proj_bias.data());
      const Tensor q = random_tensor(batch_first ? Shape{B, L, E} : Shape{L, B, E}, 22);
      const Tensor kv = random_tensor(batch_first ? Shape{B, S, E} : Shape{S, B, E}, 23);
      // kv with a zero position after each row's S
      Tensor kv1 = Tensor::zeros(batch_first ? Shape{B, S + 1, E} : Shape{S + 1, B, E});
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < S; ++t)
          std::copy_n(kv.data() + (batch_first ? b * S + t : t * B + b) * E, E,
                      kv1.data() + (batch_first ? b * (S + 1) + t : t * B + b) * E);
      ops::AttentionMasks masks, padded;
      masks.attn_mask = random_tensor({L, S}, 24);
      masks.key_padding_mask = Tensor::from_bool({B, S}, {0, 0, 0, 1, 0, 1, 1, 1});
      padded.attn_mask = Tensor::zeros({L, S + 1});
      for (int64_t i = 0; i < L; ++i)
        std::copy_n(masks.attn_mask.data() + i * S, S, padded.attn_mask.data() + i * (S + 1));
      padded.key_padding_mask = Tensor::from_bool({B, S + 1}, {0, 0, 0, 1, 0, 0, 1, 1, 1, 0});
      const Tensor y = m.forward(q, kv, kv, masks), y2 = twin.forward(q, kv1, kv1, padded);
      ASSERT_EQ(y.shape(), y2.shape());
      for (int64_t i = 0; i < y.numel(); ++i) EXPECT_NEAR(y.data()[i], y2.data()[i], 1e-5) << i;
      // is_causal hides the S keys beyond each query, never the added position.
      ops::AttentionMasks causal, causal_padded;
      causal.is_causal = true;
      causal_padded.attn_mask = Tensor::zeros({L, S + 1});
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = i + 1; j < S; ++j) causal_padded.attn_mask.data()[i * (S + 1) + j] = -INFINITY;
      const Tensor yc = m.forward(q, kv, kv, causal), yc2 = twin.forward(q, kv1, kv1, causal_padded);
      for (int64_t i = 0; i < yc.numel(); ++i) EXPECT_NEAR(yc.data()[i], yc2.data()[i], 1e-5) << i;
    }
  }

  // No keys of its own (S = 0, masks of no columns): every query attends bias_k alone, so each output row is
  // out_proj(bias_v).
  {
    ops::AttentionMasks none;
    none.attn_mask = Tensor::zeros({3, 0});
    none.key_padding_mask = Tensor::zeros({2, 0});
    MultiheadAttention m(E, 2, 0.0f, true, true, AttentionVariant{}, std::nullopt, std::nullopt, true, false, gen);
    const Tensor y = m.forward(random_tensor({2, 3, E}, 28), Tensor::zeros({2, 0, E}), Tensor::zeros({2, 0, E}), none);
    ASSERT_EQ(y.shape(), (Shape{2, 3, E}));
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t i = 0; i < E; ++i) {
        double want = m.out_proj.bias.data()[i];
        for (int64_t j = 0; j < E; ++j)
          want += static_cast<double>(m.out_proj.weight.data()[i * E + j]) * m.bias_v.data()[j];
        EXPECT_NEAR(y.data()[r * E + i], want, 1e-5) << r << "," << i;
      }
  }

  // A mask of the wrong key length names the mask; a cache refuses the added positions.
  ops::AttentionMasks wrong;
  wrong.key_padding_mask = Tensor::zeros({2, 5});
  expect_invalid(
      [&] {
        both.forward(random_tensor({2, 3, 64}, 25), random_tensor({2, 4, 64}, 26), random_tensor({2, 4, 64}, 26),
                     wrong);
      },
      {"key_padding_mask: expected shape (B, 4), got (2, 5)"});
  NoGradGuard ng;
  AttentionCache c;
  ops::AttentionMasks causal;
  causal.is_causal = true;
  const Tensor x = random_tensor({2, 1, 64}, 27);
  expect_invalid([&] { both.forward(x, x, x, causal, &c); },
                 {"MultiheadAttention with a cache: not with add_bias_kv or add_zero_attn"});
}

TEST(MultiheadAttentionModule, VariantErrorsNameTheOption) {
  auto make = [](int64_t E, int64_t H, const AttentionVariant& v) { MultiheadAttention m(E, H, 0.0f, true, true, v); };
  expect_invalid([&] { make(6, 4, {}); },
                 {"MultiheadAttention: embed_dim 6 is not divisible by num_heads 4 (or give head_dim)"});
  expect_invalid([&] { make(0, 2, {}); }, {"MultiheadAttention: embed_dim 0 and num_heads 2 must be positive"});
  expect_invalid([&] { make(4, -1, {}); }, {"embed_dim 4 and num_heads -1 must be positive"});
  AttentionVariant v;
  v.head_dim = 0;
  expect_invalid([&] { make(4, 2, v); }, {"MultiheadAttention: head_dim must be positive, got 0"});
  v = {};
  v.v_head_dim = -3;
  expect_invalid([&] { make(4, 2, v); }, {"MultiheadAttention: v_head_dim must be positive, got -3"});
  v = {};
  v.attn_scale = 0.0f;
  expect_invalid([&] { make(4, 2, v); }, {"MultiheadAttention: attn_scale must be finite and positive, got 0"});
  v.attn_scale = kInf;
  expect_invalid([&] { make(4, 2, v); }, {"attn_scale must be finite and positive, got inf"});
}

// One case: the module's forward and backward against the double re-statement.
void check_forward_backward(const Variant& var, Inputs inputs, bool batch_first, uint64_t seed) {
  SCOPED_TRACE(var.name + ", " + inputs_name(inputs) + (batch_first ? ", batch_first" : ", (T, B, E)"));
  Generator gen{seed, 0};
  MultiheadAttention m(var.E, var.H, 0.0f, var.bias, batch_first, var.v, gen);
  randomize_biases(m, seed + 1);
  const int64_t B = 2, L = 4, E = var.E;
  const bool self = inputs == Inputs::SELF || inputs == Inputs::SELF_COPIES;
  const int64_t S = self ? L : 5;
  auto shape = [&](int64_t T) { return batch_first ? Shape{B, T, E} : Shape{T, B, E}; };
  std::vector<Tensor> in;  // the distinct input tensors
  Tensor query, key, value;
  switch (inputs) {
    case Inputs::SELF:
      in = {random_tensor(shape(L), seed + 2).requires_grad_(true)};
      query = key = value = in[0];
      break;
    case Inputs::SELF_COPIES: {
      const Tensor x = random_tensor(shape(L), seed + 2);
      in = {x.clone().requires_grad_(true), x.clone().requires_grad_(true), x.clone().requires_grad_(true)};
      query = in[0], key = in[1], value = in[2];
      break;
    }
    case Inputs::CROSS:
      in = {random_tensor(shape(L), seed + 2).requires_grad_(true), random_tensor(shape(S), seed + 3).requires_grad_(true)};
      query = in[0], key = value = in[1];
      break;
    case Inputs::SEPARATE:
      in = {random_tensor(shape(L), seed + 2).requires_grad_(true), random_tensor(shape(S), seed + 3).requires_grad_(true),
            random_tensor(shape(S), seed + 4).requires_grad_(true)};
      query = in[0], key = in[1], value = in[2];
      break;
  }
  const ops::AttentionMasks masks = masks_for(inputs, B, var.H, L, S);
  Tensor y = m.forward(query, key, value, masks);
  ASSERT_EQ(y.shape(), shape(L));

  DoubleMha d(m);
  std::vector<std::vector<double>> xd;
  for (const Tensor& t : in) xd.push_back(to_double(t));
  auto role = [&](const Tensor& t) -> std::vector<double>& {
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].same(t)) return xd[i];
    throw std::logic_error("not an input");
  };
  std::vector<double>& qd = role(query);
  std::vector<double>& kd = role(key);
  std::vector<double>& vd = role(value);
  const std::vector<double> want = d.forward(qd, kd, vd, B, L, S, masks);
  double nx = 0;
  for (const auto& x : xd) nx = std::max(nx, max_abs(x));
  const double bound = d.bound(nx, S, mask_magnitude(masks));
  EXPECT_TRUE(close_abs(tfm::testing::values(y), want, bound, "y", y.shape()));

  // Backward: loss = Σ w ⊙ y.
  const Tensor w = random_tensor(y.shape(), seed + 9);
  y.backward(w);
  const std::vector<double> wd = to_double(w);
  const double rel = 4.0 * bound / max_abs(want);
  auto loss = [&] { return tfm::testing::dot(d.forward(qd, kd, vd, B, L, S, masks), wd); };
  auto check = [&](const Tensor& t, std::vector<double>& x, const std::string& name) {
    ASSERT_TRUE(t.grad().defined()) << name;
    const std::vector<double> numeric = tfm::testing::numeric_grad(x, loss);
    EXPECT_TRUE(close_rel(tfm::testing::values(t.grad()), numeric, rel, "d" + name, tfm::testing::kTinyMagnitude,
                          t.shape()));
  };
  check(m.in_proj_weight, d.W, "in_proj_weight");
  if (m.in_proj_bias.defined()) check(m.in_proj_bias, d.b, "in_proj_bias");
  check(m.out_proj.weight, d.Wo, "out_proj.weight");
  if (m.out_proj.bias.defined()) check(m.out_proj.bias, d.bo, "out_proj.bias");
  for (size_t i = 0; i < in.size(); ++i) check(in[i], xd[i], "input " + std::to_string(i));
}

TEST(MultiheadAttentionModule, ForwardAndBackwardMatchDoubleRestatement) {
  uint64_t seed = 1000;
  for (const Variant& var : variants())
    for (Inputs inputs : {Inputs::SELF, Inputs::SELF_COPIES, Inputs::CROSS, Inputs::SEPARATE})
      for (bool batch_first : {true, false}) check_forward_backward(var, inputs, batch_first, seed += 100);
}

// Attention dropout draws B·H·L·S counters from the module's generator in training and nothing in
// eval, where the output is bit for bit that of the same weights with dropout 0.
TEST(MultiheadAttentionModule, DropoutOnlyInTraining) {
  const int64_t E = 8, H = 2, B = 2, L = 4;
  Generator gen{21, 0}, gen0{22, 0};
  MultiheadAttention m(E, H, 0.3f, true, true, gen), m0(E, H, 0.0f, true, true, gen0);
  randomize_biases(m, 23);
  m0.load_state_dict(m.state_dict());
  const Tensor x = random_tensor({B, L, E}, 24);
  const ops::AttentionMasks causal{{}, {}, true};

  const uint64_t before = gen.offset;
  const Tensor trained = m.forward(x, x, x, causal);
  EXPECT_EQ(gen.offset, before + static_cast<uint64_t>(B * H * L * L));
  DoubleMha d(m);
  const std::vector<double> xd = to_double(x);
  const std::vector<double> want = d.forward(xd, xd, xd, B, L, L, causal, 0.3f, gen.seed, before);
  EXPECT_TRUE(close_abs(tfm::testing::values(trained), want, d.bound(max_abs(xd), L, 0.0, 0.3), "training"));

  m.eval();
  m0.eval();
  const uint64_t at_eval = gen.offset;
  const Tensor evaluated = m.forward(x, x, x, causal);
  EXPECT_EQ(gen.offset, at_eval);
  EXPECT_TRUE(bitwise_equal(evaluated, m0.forward(x, x, x, causal), "eval vs dropout 0"));
  EXPECT_FALSE(bitwise_equal(evaluated, trained, "eval vs training")) << "dropout changed nothing in training";
}

// Rows of a sequence tensor: x (N, T, C) batch_first or (T, N, C) → row n, position t.
const float* at(const Tensor& x, bool batch_first, int64_t n, int64_t t) {
  const int64_t C = x.size(2);
  return x.data() + (batch_first ? n * x.size(1) + t : t * x.size(1) + n) * C;
}

// The cached forward, one position per row, against the full forward: self-attention (causal) over
// each row's history, cross-attention over a memory with padded rows (memory_len in the cache, the
// key padding mask in the full forward) read by rows of other sources (row_source), in both layouts.
// Both are float evaluations of the same numbers, each within the forward bound of the exact value.
TEST(MultiheadAttentionModule, CachedStepsEqualTheFullForward) {
  NoGradGuard ng;
  const int64_t E = 8, H = 2, N = 3, T = 5, Bm = 2, S = 4;
  for (bool batch_first : {true, false}) {
    SCOPED_TRACE(batch_first ? "batch_first" : "(T, N, E)");
    Generator gen{31, 0};
    MultiheadAttention m(E, H, 0.1f, true, batch_first, gen);
    randomize_biases(m, 32);
    m.eval();  // dropout 0.1 left on would show
    const DoubleMha d(m);
    const Tensor xs = random_tensor(batch_first ? Shape{N, T, E} : Shape{T, N, E}, 33);
    const Tensor memory = random_tensor(batch_first ? Shape{Bm, S, E} : Shape{S, Bm, E}, 34);
    const std::vector<int64_t> row_source = {1, 0, 1}, memory_len = {4, 2};

    // Full forwards: causal self-attention over all T positions; cross-attention of each row over its
    // memory row, gathered, with the padding mask.
    const Tensor self_full = m.forward(xs, xs, xs, {{}, {}, true});
    Tensor rows = Tensor::empty(batch_first ? Shape{N, S, E} : Shape{S, N, E});
    std::vector<uint8_t> pad(static_cast<size_t>(N * S));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < S; ++j) {
        const int64_t b = row_source[static_cast<size_t>(n)];
        std::memcpy(const_cast<float*>(at(rows, batch_first, n, j)), at(memory, batch_first, b, j), sizeof(float) * E);
        pad[static_cast<size_t>(n * S + j)] = j >= memory_len[static_cast<size_t>(b)];
      }
    const Tensor cross_full = m.forward(xs, rows, rows, {{}, Tensor::from_bool({N, S}, pad), false});

    AttentionCache self_cache, cross_cache;
    cross_cache.row_source = row_source;
    cross_cache.memory_len = memory_len;
    for (int64_t t = 0; t < T; ++t) {
      Tensor x = Tensor::empty(batch_first ? Shape{N, 1, E} : Shape{1, N, E});
      for (int64_t n = 0; n < N; ++n) std::memcpy(x.data() + n * E, at(xs, batch_first, n, t), sizeof(float) * E);
      const Tensor s = m.forward(x, x, x, {{}, {}, true}, &self_cache);
      const Tensor c = m.forward(x, memory, memory, {}, &cross_cache);
      ASSERT_EQ(s.shape(), x.shape());
      ASSERT_EQ(c.shape(), x.shape());
      std::vector<float> s_full, c_full;
      for (int64_t n = 0; n < N; ++n) {
        s_full.insert(s_full.end(), at(self_full, batch_first, n, t), at(self_full, batch_first, n, t) + E);
        c_full.insert(c_full.end(), at(cross_full, batch_first, n, t), at(cross_full, batch_first, n, t) + E);
      }
      // Each path within the forward bound of the exact value: 2× between them. The bound's
      // magnitudes come from the double forward of the whole sequence.
      const std::vector<double> xd = to_double(xs), md = to_double(memory);
      d.forward(xd, xd, xd, N, T, T, {});
      const double self_bound = 2.0 * d.bound(max_abs(xd), T, 0.0);
      d.forward(xd, to_double(rows), to_double(rows), N, T, S, {});
      const double cross_bound = 2.0 * d.bound(std::max(max_abs(xd), max_abs(md)), S, 0.0);
      EXPECT_TRUE(close_abs(tfm::testing::values(s), s_full, self_bound, "self step " + std::to_string(t)));
      EXPECT_TRUE(close_abs(tfm::testing::values(c), c_full, cross_bound, "cross step " + std::to_string(t)));
    }
    EXPECT_EQ(self_cache.length(), T);
  }
}

// The cache's conditions at the module that the layer tests (tests/modules/transformer_test.cc) do
// not reach.
TEST(MultiheadAttentionModule, CacheErrorsSayWhatTheCacheNeeds) {
  NoGradGuard ng;
  Generator gen{41, 0};
  MultiheadAttention m(8, 2, 0.0f, true, true, gen);
  const Tensor x = random_tensor({2, 1, 8}, 42), memory = random_tensor({2, 3, 8}, 43);
  {
    AttentionCache c;
    expect_invalid([&] { m.forward(x, memory, memory, {{}, {}, true}, &c); },
                   {"MultiheadAttention with a cache: cross-attention cannot be causal"});
  }
  {
    AttentionCache c;
    expect_invalid([&] { m.forward(x, x, x, {{}, Tensor::zeros({2, 1}, DType::BOOL), true}, &c); },
                   {"MultiheadAttention with a cache: the cache holds exactly the earlier positions, so no attn_mask or "
                    "key_padding_mask"});
  }
  {
    AttentionCache c;
    expect_invalid([&] { m.forward(x, memory, memory, {Tensor::zeros({1, 3}), {}, false}, &c); },
                   {"no attn_mask or key_padding_mask (the cache's memory_len marks the padding)"});
  }
  {
    AttentionCache c;
    expect_invalid([&] { m.forward(x, x, memory, {}, &c); }, {"key and value must be one tensor"});
  }
}

}  // namespace
}  // namespace tfm
