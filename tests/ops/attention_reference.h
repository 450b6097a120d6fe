// tests/ops/attention_reference.h — what the attention tests of the op and module layers share: a
// plain double-precision attention with PyTorch's mask semantics, written from the documentation
// of nn.MultiheadAttention (not from the kernels), a double Linear, central differences, the
// first-order float error bounds of attention derived below, and a check that an exception names
// what it should.
//
// The reference takes the masks in the forms ops::attention takes them (tfm Tensors: attn_mask
// (L, S) or (B·H, L, S), Bool or Float32; key_padding_mask (B, S), Bool or Float32; is_causal) and
// builds each score as scale·⟨q_i, k_j⟩ + attn_mask + key_padding_mask (a true Bool entry, and a
// causal j > i, is −inf). A query row whose every score is −inf gets zeros. Dropout, when p > 0,
// follows the kernels' documented counter rule (src/kernels/kernels.h, "Dropout on p"): element
// (b·H + h, i, j) is kept iff dropout_keep(seed, offset + ((b·H + h)·L + i)·S + j, p), kept
// probabilities scaled by 1/(1 − p).
//
// Error bounds (attention_bounds). ε = 2⁻²³, the float machine epsilon; nq, nk, nv, g are the
// max-norms of q, k, v and of the output gradient, m the largest finite |mask| (attn_mask and key
// padding added), n = max(S, L), κ = 1/(1 − p) (1 without dropout). To first order in ε:
//   * a score is a Dh-term dot product, one multiply by scale and two mask additions, of
//     magnitude ≤ σ = scale·Dh·nq·nk + m: its error is δs ≤ (Dh + 3)·ε·σ;
//   * p_j = exp(s_j − lse) then has relative error ρ ≤ 2·δs (s_j's and lse's) + (S + 4)·ε (the sum
//     of S exponentials in lse, exp within 2 ulp, the subtraction);
//   * o = κ·Σ_j p_j v_j (Σ p = 1): |Δo| ≤ κ·(ρ + (S + 1)·ε)·nv;
//   * dv_j = κ·Σ_i p_ij dO_i (Σ_i p_ij ≤ L): |Δdv| ≤ κ·L·g·(ρ + (L + 1)·ε);
//   * dp = ⟨dO, v⟩·κ and D = ⟨dO, o⟩ are bounded by π = κ·Dv·g·nv, with errors (Dv + 1)·ε·π and
//     Dv·g·|Δo| + Dv·ε·π; ds = p·(dp − D) then errs by p·β with
//     β = 2ρ·π + (2·Dv + 2·n + 4)·ε·π + Dv·g·|Δo| (the last sum over n terms included);
//   * dq = scale·Σ_j ds_j k_j (Σ_j p_j = 1): |Δdq| ≤ scale·nk·β; dk = scale·Σ_i ds_ij q_i
//     (Σ_i p_ij ≤ L): |Δdk| ≤ L·scale·nq·β.
// Each bound is doubled for what the first-order sums leave out: the flash kernel's online softmax
// rescales its running sums once per key tile (one more rounding each) and accumulates in tiles.
// With O(1) inputs these bounds sit around 1e-5..1e-4 absolute; the measured errors are 100× (the
// output: about one rounding of its value) to 1000× (the gradients) smaller, as worst-case bounds
// are; a mask applied wrongly or a gradient sent to the wrong columns changes results by O(0.1).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "test_util.h"
#include "tfm/tensor.h"

namespace tfm::testing {

inline constexpr double kFloatEps = 1.1920928955078125e-07;  // 2⁻²³

// γ_n = n·u / (1 − n·u), u = ε/2: the classic bound on the relative error of an n-term float sum of
// products (Higham, Accuracy and Stability of Numerical Algorithms, §3.1), for any summation order.
inline double gamma_n(int64_t n) {
  const double u = kFloatEps / 2.0;
  return static_cast<double>(n) * u / (1.0 - static_cast<double>(n) * u);
}

inline std::vector<double> to_double(const Tensor& t) {
  const auto v = values(t);
  return {v.begin(), v.end()};
}

inline double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x)
    if (std::isfinite(v)) m = std::max(m, std::fabs(v));
  return m;
}

// y (N, out) = x (N, in) · Wᵀ + b in double; W (out, in), b (out) or empty.
inline std::vector<double> linear_ref(const std::vector<double>& x, const std::vector<double>& W,
                                      const std::vector<double>& b, int64_t in, int64_t out) {
  const int64_t N = static_cast<int64_t>(x.size()) / in;
  std::vector<double> y(static_cast<size_t>(N * out));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
      for (int64_t k = 0; k < in; ++k) s += x[static_cast<size_t>(n * in + k)] * W[static_cast<size_t>(o * in + k)];
      y[static_cast<size_t>(n * out + o)] = s;
    }
  return y;
}

// One of q, k, v for the reference: a double source laid out (B, T, C) batch_first or (T, B, C),
// read at columns [col, col + width).
struct RefInput {
  const std::vector<double>* src;
  int64_t C;
  int64_t col = 0;
};

struct RefAttention {
  int64_t B, L, S, H, Dh, Dv;
  double scale;
  bool batch_first;
  Tensor attn_mask, key_padding_mask;  // as given to ops::attention (undefined: none)
  bool is_causal = false;
  float dropout_p = 0.0f;  // > 0: the kernels' counter rule with (seed, offset)
  uint64_t seed = 0, offset = 0;

  // The additive mask of (b, h, i, j): attn_mask + key_padding_mask, −inf for true Bool entries
  // and for causal j > i.
  double mask(int64_t b, int64_t h, int64_t i, int64_t j) const {
    const double inf = std::numeric_limits<double>::infinity();
    double m = 0;
    if (is_causal && j > i) return -inf;
    if (attn_mask.defined()) {
      const int64_t at = (attn_mask.dim() == 3 ? (b * H + h) * L * S : 0) + i * S + j;
      if (attn_mask.dtype() == DType::BOOL) {
        if (attn_mask.data_bool()[at]) return -inf;
      } else {
        m += attn_mask.data()[at];
      }
    }
    if (key_padding_mask.defined()) {
      const int64_t at = b * S + j;
      if (key_padding_mask.dtype() == DType::BOOL) {
        if (key_padding_mask.data_bool()[at]) return -inf;
      } else {
        m += key_padding_mask.data()[at];
      }
    }
    return m;
  }

  // The largest finite |attn_mask| + |key_padding_mask| (m in the bounds).
  double mask_magnitude() const {
    double m = 0;
    for (const Tensor* t : {&attn_mask, &key_padding_mask})
      if (t->defined() && t->dtype() == DType::FLOAT32) m += max_abs(to_double(*t));
    return m;
  }

  // Element (b, t, c) of a source.
  static double at(const RefInput& in, bool batch_first, int64_t B, int64_t T, int64_t b, int64_t t, int64_t c) {
    const int64_t row = batch_first ? b * T + t : t * B + b;
    return (*in.src)[static_cast<size_t>(row * in.C + in.col + c)];
  }

  // → (B, L, H·Dv) batch_first or (L, B, H·Dv).
  std::vector<double> forward(const RefInput& q, const RefInput& k, const RefInput& v) const {
    const int64_t Ev = H * Dv;
    std::vector<double> out(static_cast<size_t>(B * L * Ev), 0.0);
    std::vector<double> s(static_cast<size_t>(S));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i) {
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j < S; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < Dh; ++d)
              dot += at(q, batch_first, B, L, b, i, h * Dh + d) * at(k, batch_first, B, S, b, j, h * Dh + d);
            s[static_cast<size_t>(j)] = scale * dot + mask(b, h, i, j);
            mx = std::max(mx, s[static_cast<size_t>(j)]);
          }
          if (mx == -std::numeric_limits<double>::infinity()) continue;  // every key masked: zeros
          double z = 0;
          for (int64_t j = 0; j < S; ++j) z += std::exp(s[static_cast<size_t>(j)] - mx);
          const int64_t orow = batch_first ? b * L + i : i * B + b;
          for (int64_t j = 0; j < S; ++j) {
            double p = std::exp(s[static_cast<size_t>(j)] - mx) / z;
            if (dropout_p > 0.0f) {
              const uint64_t counter = offset + static_cast<uint64_t>(((b * H + h) * L + i) * S + j);
              p = kernels::dropout_keep(seed, counter, dropout_p) ? p / (1.0 - static_cast<double>(dropout_p)) : 0.0;
            }
            for (int64_t d = 0; d < Dv; ++d)
              out[static_cast<size_t>(orow * Ev + h * Dv + d)] += p * at(v, batch_first, B, S, b, j, h * Dv + d);
          }
        }
    return out;
  }
};

// The first-order float error bounds of attention derived in the header comment (absolute, per
// element; already doubled).
struct AttentionBounds {
  double o, dq, dk, dv;
};

inline AttentionBounds attention_bounds(double nq, double nk, double nv, double g, double m, int64_t Dh, int64_t Dv,
                                        int64_t L, int64_t S, double scale, double dropout_p = 0.0) {
  const double eps = kFloatEps, kappa = 1.0 / (1.0 - dropout_p);
  const double n = static_cast<double>(std::max(L, S));
  const double sigma = scale * static_cast<double>(Dh) * nq * nk + m;
  const double ds = static_cast<double>(Dh + 3) * eps * sigma;
  const double rho = 2.0 * ds + static_cast<double>(S + 4) * eps;
  const double o = kappa * (rho + static_cast<double>(S + 1) * eps) * nv;
  const double pi = kappa * static_cast<double>(Dv) * g * nv;
  const double beta = 2.0 * rho * pi + (2.0 * static_cast<double>(Dv) + 2.0 * n + 4.0) * eps * pi +
                      static_cast<double>(Dv) * g * o;
  AttentionBounds r;
  r.o = 2.0 * o;
  r.dq = 2.0 * scale * nk * beta;
  r.dk = 2.0 * static_cast<double>(L) * scale * nq * beta;
  r.dv = 2.0 * kappa * static_cast<double>(L) * g * (rho + static_cast<double>(L + 1) * eps);
  return r;
}

// Central differences of loss() with respect to every element of x (x restored afterwards). With
// h = 1e-5 in double the truncation error is O(h²·|ℓ'''|) ≈ 1e-10 and the rounding error
// O(2⁻⁵³·|ℓ|/h) ≈ 1e-11: both far below the float tolerances they are compared with (kNumericSlack
// covers them).
inline std::vector<double> numeric_grad(std::vector<double>& x, const std::function<double()>& loss) {
  const double h = 1e-5;
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = loss();
    x[i] = keep - h;
    const double down = loss();
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}
inline constexpr double kNumericSlack = 1e-8;

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Runs f, which must throw std::invalid_argument whose message contains every one of `needles`.
template <class F>
void expect_invalid(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning \"" << (needles.empty() ? "" : needles[0]) << "\"";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    for (const std::string& n : needles) EXPECT_NE(what.find(n), std::string::npos) << "\"" << n << "\" not in: " << what;
  }
}

}  // namespace tfm::testing
