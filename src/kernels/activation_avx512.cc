// src/kernels/activation_avx512.cc — AVX-512 bodies of the activation kernels (contracts in kernels.h):
// bias + activation forward and activation backward for every kind, and the FFN's bias + relu +
// dropout pass with its backward. Compiled with AVX-512 flags by CMake; called only by the
// dispatchers in activation.cc after cpu_has_avx512(). Each runs a 16-lane main loop, then the
// remainder with a masked load/store in the same function. The relu bodies are bitwise equal to
// their scalar twins in activation_scalar.h; the others use the vector erf, exp and sigmoid below
// instead of std::erf / std::exp / std::tanh and agree with the twin to a few float ulps (bounds in
// tests/kernels/activation_test.cc). To add a kind: a branch in both entry functions, and a twin test.
// GCC 12's intrinsic headers seed the pass-through operand of _mm512_max_ps, _mm512_min_ps, _mm512_srli_epi32
// and others with an "undefined" vector that -Wmaybe-uninitialized / -Wuninitialized report from inside
// the header (GCC PR 105593); the value is never read.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning (and would warn about the name)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstddef>

#include "kernels/common_avx512.h"
#include "kernels/dropout_hash_avx512.h"
#include "kernels/gelu_erf.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

namespace {

// ---- gelu -----------------------------------------------------------------------------------------
// The method and its coefficients: gelu_erf.h.
using gelu_erf::kErfcG;
using gelu_erf::kErfP;

// c[0]·x^(K−1) + … + c[K−1] by Horner's rule with FMA.
template <size_t K>
inline __m512 horner(__m512 x, const float (&c)[K]) {
  __m512 y = _mm512_set1_ps(c[0]);
  for (size_t i = 1; i < K; ++i) y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(c[i]));
  return y;
}

struct GeluTerms {
  __m512 q;  // 1 + erf(x/√2)
  __m512 e;  // exp(−x²/2)
};

inline GeluTerms gelu_terms(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752440f));
  const __m512 az = _mm512_abs_ps(z);
  // e = exp(−x²/2)
  const __m512 xc = _mm512_min_ps(_mm512_abs_ps(x), _mm512_set1_ps(15.0f));
  const __m512 h = _mm512_mul_ps(xc, xc);
  const __m512 l = _mm512_fmsub_ps(xc, xc, h);
  const __m512 e0 = exp_ps(_mm512_mul_ps(h, _mm512_set1_ps(-0.5f)));
  const __m512 e = _mm512_fnmadd_ps(e0, _mm512_mul_ps(l, _mm512_set1_ps(0.5f)), e0);
  // |z| < 1: 1 + z·P(z²)
  const __m512 q_small = _mm512_fmadd_ps(z, horner(_mm512_mul_ps(z, z), kErfP), one);
  // |z| ≥ 1: erfc(|z|) = e·t·G(t − 0.55)
  const __m512 t = _mm512_div_ps(one, _mm512_min_ps(_mm512_max_ps(az, one), _mm512_set1_ps(10.0f)));
  const __m512 g = horner(_mm512_sub_ps(t, _mm512_set1_ps(0.55f)), kErfcG);
  const __m512 erfc = _mm512_mul_ps(e, _mm512_mul_ps(t, g));
  const __mmask16 pos = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GT_OQ);
  const __m512 q_large = _mm512_mask_sub_ps(erfc, pos, _mm512_set1_ps(2.0f), erfc);
  const __mmask16 small = _mm512_cmp_ps_mask(az, one, _CMP_LT_OQ);
  return {_mm512_mask_mov_ps(q_large, small, q_small), e};
}

// gelu(v) = (0.5·v)·q, the twin's order of operations.
inline __m512 gelu_of(__m512 v, const GeluTerms& g) {
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), v), g.q);
}
inline __m512 gelu_ps(__m512 v) { return gelu_of(v, gelu_terms(v)); }

// gelu'(v) = 0.5·q + v·(e/√(2π)).
inline __m512 gelu_grad_of(__m512 v, const GeluTerms& g) {
  const __m512 pdf = _mm512_mul_ps(g.e, _mm512_set1_ps(0.39894228040143267794f));
  return _mm512_fmadd_ps(v, pdf, _mm512_mul_ps(_mm512_set1_ps(0.5f), g.q));
}
inline __m512 gelu_grad_ps(__m512 v) { return gelu_grad_of(v, gelu_terms(v)); }

// ---- sigmoid, gelu_tanh, the gates -----------------------------------------------------------------
// σ(v) and σ(−v) = 1 − σ(v) from one e = exp(−|v|) ∈ (0, 1]: with r = 1/(1 + e), σ(|v|) = r and
// σ(−|v|) = e·r. Neither side cancels, so both keep their relative precision (≈ 3 ulp: exp_ps's 2,
// the division's and the product's rounding); exp never overflows. ±inf give 1 and 0 as the twin's
// 1/(1 + exp(−v)); NaN stays NaN.
struct Sigmoid {
  __m512 s;   // σ(v)
  __m512 sc;  // σ(−v) = 1 − σ(v)
};
inline Sigmoid sigmoid_ps(__m512 v) {
  const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(v)));
  const __m512 r = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
  const __m512 er = _mm512_mul_ps(e, r);
  const __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
  return {_mm512_mask_mov_ps(r, neg, er), _mm512_mask_mov_ps(er, neg, r)};
}

// gelu_tanh(x) = 0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³). With 1 + tanh(u) = 2σ(2u) and
// 1 − tanh²(u) = 4σ(2u)σ(−2u):
//   gelu_tanh(x)  = x·σ(2u)
//   gelu_tanh'(x) = σ(2u) + 2x·σ(2u)σ(−2u)·u',  u' = √(2/π)·(1 + 3·0.044715·x²)
// so neither 1 + tanh nor 1 − tanh² cancels (the twin's form loses the relative precision of both
// for large |u|). ±inf: x·σ = inf or −inf·0 = NaN, and the gradient inf·0 = NaN, as the twin.
constexpr float kSqrt2OverPi = 0.79788456080286535588f, kTanhCubic = 0.044715f;
inline __m512 gelu_tanh_u2(__m512 x) {  // 2u
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(kTanhCubic), x2), x, x);
  return _mm512_mul_ps(_mm512_set1_ps(2.0f * kSqrt2OverPi), inner);
}
// Both from g = σ(2u): gelu_tanh_of and gelu_tanh_grad_of; the _ps forms compute g themselves.
inline __m512 gelu_tanh_of(__m512 x, const Sigmoid& g) { return _mm512_mul_ps(x, g.s); }
inline __m512 gelu_tanh_ps(__m512 x) { return gelu_tanh_of(x, sigmoid_ps(gelu_tanh_u2(x))); }
inline __m512 gelu_tanh_grad_of(__m512 x, const Sigmoid& g) {
  const __m512 du = _mm512_mul_ps(
      _mm512_set1_ps(kSqrt2OverPi),
      _mm512_fmadd_ps(_mm512_set1_ps(3.0f * kTanhCubic), _mm512_mul_ps(x, x), _mm512_set1_ps(1.0f)));
  const __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_add_ps(x, x), _mm512_mul_ps(g.s, g.sc)), du);
  return _mm512_add_ps(g.s, t);
}
inline __m512 gelu_tanh_grad_ps(__m512 x) { return gelu_tanh_grad_of(x, sigmoid_ps(gelu_tanh_u2(x))); }

// The gates g(b) and g'(b) of the gated kinds (the twin's gate / gate_grad):
//   GLU     g = σ(b)      g' = σ(b)·σ(−b)
//   GEGLU   g = gelu(b)   g' = gelu'(b)
//   SWIGLU  g = b·σ(b)    g' = σ(b)·(1 + b·σ(−b))
inline __m512 gate_ps(Activation k, __m512 b) {
  switch (k) {
    case Activation::GLU: return sigmoid_ps(b).s;
    case Activation::GEGLU: return gelu_ps(b);
    default: return _mm512_mul_ps(b, sigmoid_ps(b).s);
  }
}
inline __m512 gate_grad_ps(Activation k, __m512 b) {
  switch (k) {
    case Activation::GLU: {
      const Sigmoid g = sigmoid_ps(b);
      return _mm512_mul_ps(g.s, g.sc);
    }
    case Activation::GEGLU: return gelu_grad_ps(b);
    default: {
      const Sigmoid g = sigmoid_ps(b);
      return _mm512_mul_ps(g.s, _mm512_fmadd_ps(b, g.sc, _mm512_set1_ps(1.0f)));
    }
  }
}

// Gated rows: x (N, 2F) = [a | b] (+ bias (2F)), y (N, F) = a ⊙ g(b).
template <Activation K>
void gated_forward_rows(const float* x, const float* bias, float* y, int64_t N, int64_t F) {
  for (int64_t n = 0; n < N; ++n) {
    const float* ar = x + n * 2 * F;
    const float* br = ar + F;
    float* yr = y + n * F;
    for (int64_t f = 0; f < F; f += 16) {
      const __mmask16 m = first_n(F - f);
      __m512 a = _mm512_maskz_loadu_ps(m, ar + f), b = _mm512_maskz_loadu_ps(m, br + f);
      if (bias) {
        a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(m, bias + f));
        b = _mm512_add_ps(b, _mm512_maskz_loadu_ps(m, bias + F + f));
      }
      _mm512_mask_storeu_ps(yr + f, m, _mm512_mul_ps(a, gate_ps(K, b)));
    }
  }
}

// Gated backward: da = dy ⊙ g(b), db = (dy ⊙ a) ⊙ g'(b), dx (N, 2F) = [da | db].
template <Activation K>
void gated_backward_rows(const float* dy, const float* x, float* dx, int64_t N, int64_t F) {
  for (int64_t n = 0; n < N; ++n) {
    const float* ar = x + n * 2 * F;
    const float* br = ar + F;
    const float* gr = dy + n * F;
    float* dar = dx + n * 2 * F;
    float* dbr = dar + F;
    for (int64_t f = 0; f < F; f += 16) {
      const __mmask16 m = first_n(F - f);
      const __m512 a = _mm512_maskz_loadu_ps(m, ar + f), b = _mm512_maskz_loadu_ps(m, br + f);
      const __m512 g = _mm512_maskz_loadu_ps(m, gr + f);
      _mm512_mask_storeu_ps(dar + f, m, _mm512_mul_ps(g, gate_ps(K, b)));
      _mm512_mask_storeu_ps(dbr + f, m, _mm512_mul_ps(_mm512_mul_ps(g, a), gate_grad_ps(K, b)));
    }
  }
}

// y = act(x + bias) for the kinds with a vector body, row by row.
// act is a lambda (the callers wrap the named functions in one), so that each call inlines: a function
// pointer is an indirect call per vector.
template <typename Act>
void bias_map_rows(const float* x, const float* bias, float* y, int64_t N, int64_t F, Act act) {
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * F;
    float* yr = y + n * F;
    for (int64_t f = 0; f < F; f += 16) {
      const __mmask16 m = first_n(F - f);
      __m512 v = _mm512_maskz_loadu_ps(m, xr + f);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + f));
      _mm512_mask_storeu_ps(yr + f, m, act(v));
    }
  }
}

// dx = dy ⊙ act'(x) over n elements.
template <typename Grad>
void grad_map(const float* dy, const float* x, float* dx, int64_t n, Grad grad) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    const __m512 g = grad(_mm512_maskz_loadu_ps(m, x + i));
    _mm512_mask_storeu_ps(dx + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dy + i), g));
  }
}

// y = act(x) and d = act'(x) over n elements: both(v, y, d) from one evaluation per vector.
template <typename Both>
void value_grad_map(const float* x, float* y, float* d, int64_t n, Both both) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    __m512 yv, dv;
    both(_mm512_maskz_loadu_ps(m, x + i), yv, dv);
    _mm512_mask_storeu_ps(y + i, m, yv);
    _mm512_mask_storeu_ps(d + i, m, dv);
  }
}

}  // namespace

// relu(x + b) = max(0, x + b): vmaxps returns its second operand (v) when either is NaN or both are zeros, so
// NaN stays NaN and −0 stays −0, as the twin's `v < 0 ? 0 : v` and torch.relu.
// gelu(x + b), gelu_tanh(x + b) by gelu_ps, gelu_tanh_ps; the gated kinds by gated_forward_rows.
bool bias_activation_forward_avx512(Activation k, const float* x, const float* bias, float* y,
                                    int64_t N, int64_t F) {
  switch (k) {
    case Activation::RELU: {
      const __m512 zero = _mm512_setzero_ps();
      bias_map_rows(x, bias, y, N, F, [zero](__m512 v) { return _mm512_max_ps(zero, v); });
      return true;
    }
    case Activation::GELU:
      bias_map_rows(x, bias, y, N, F, [](const __m512 v) { return gelu_ps(v); });
      return true;
    case Activation::GELU_TANH:
      bias_map_rows(x, bias, y, N, F, [](const __m512 v) { return gelu_tanh_ps(v); });
      return true;
    case Activation::GLU: gated_forward_rows<Activation::GLU>(x, bias, y, N, F); return true;
    case Activation::GEGLU: gated_forward_rows<Activation::GEGLU>(x, bias, y, N, F); return true;
    case Activation::SWIGLU: gated_forward_rows<Activation::SWIGLU>(x, bias, y, N, F); return true;
    default: return false;
  }
}

// relu: dx = x ≤ 0 ? 0 : dy, a select (x NaN passes dy: _CMP_NLE_UQ is true on unordered), as the twin.
// gelu, gelu_tanh: dx = dy · act'(x); the gated kinds by gated_backward_rows.
bool activation_backward_avx512(Activation k, const float* dy, const float* x, float* dx, int64_t N,
                                int64_t F) {
  switch (k) {
    case Activation::RELU: {
      const __m512 zero = _mm512_setzero_ps();
      for (int64_t i = 0; i < N * F; i += 16) {
        const __mmask16 m = first_n(N * F - i);
        const __mmask16 open = _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(m, x + i), zero, _CMP_NLE_UQ);
        _mm512_mask_storeu_ps(dx + i, m, _mm512_maskz_loadu_ps(m & open, dy + i));
      }
      return true;
    }
    case Activation::GELU:
      grad_map(dy, x, dx, N * F, [](const __m512 v) { return gelu_grad_ps(v); });
      return true;
    case Activation::GELU_TANH:
      grad_map(dy, x, dx, N * F, [](const __m512 v) { return gelu_tanh_grad_ps(v); });
      return true;
    case Activation::GLU: gated_backward_rows<Activation::GLU>(dy, x, dx, N, F); return true;
    case Activation::GEGLU: gated_backward_rows<Activation::GEGLU>(dy, x, dx, N, F); return true;
    case Activation::SWIGLU: gated_backward_rows<Activation::SWIGLU>(dy, x, dx, N, F); return true;
    default: return false;
  }
}

// relu(x + b) as bias_activation_forward_avx512 (max(0, v)), then dropout_forward_avx512's keep and
// multiply.
void bias_relu_dropout_forward_avx512(const float* x, const float* bias, float* y, int64_t N,
                                      int64_t F, const DropoutSpec& drop) {
  const __m512 zero = _mm512_setzero_ps(), scale = _mm512_set1_ps(dropout_scale(drop.p));
  DropoutMask16 drop_mask = DropoutMask16::strided(drop.seed, drop.p, 1);
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * F;
    float* yr = y + n * F;
    const uint64_t row = drop.offset + static_cast<uint64_t>(n * F);
    for (int64_t f = 0; f < F; f += 16) {
      const __mmask16 m = first_n(F - f);
      __m512 v = _mm512_maskz_loadu_ps(m, xr + f);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + f));
      const __mmask16 keep = drop_mask.keep(row + static_cast<uint64_t>(f));
      _mm512_mask_storeu_ps(yr + f, m, _mm512_maskz_mul_ps(keep, _mm512_max_ps(zero, v), scale));
    }
  }
}

// dx = y ≤ 0 ? 0 : dy·scale (a masked multiply: dropped or shut lanes get +0 whatever dy holds; a NaN y, kept
// and z NaN, passes dy·scale).
void relu_dropout_backward_avx512(const float* dy, const float* y, float* dx, int64_t n, float p) {
  const __m512 zero = _mm512_setzero_ps(), scale = _mm512_set1_ps(dropout_scale(p));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    const __mmask16 open = _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(m, y + i), zero, _CMP_NLE_UQ);
    _mm512_mask_storeu_ps(dx + i, m, _mm512_maskz_mul_ps(open, _mm512_maskz_loadu_ps(m, dy + i), scale));
  }
}

// relu_dropout_backward_avx512 with y widened from bfloat16 (bits << 16, exact) before the same compare.
// Its scalar twin is relu_dropout_backward_bf16_scalar in activation.cc (a plain float function, not a
// template of activation_scalar.h).
void relu_dropout_backward_bf16_avx512(const float* dy, const uint16_t* y16, float* dx, int64_t n, float p) {
  const __m512 zero = _mm512_setzero_ps(), scale = _mm512_set1_ps(dropout_scale(p));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, y16 + i));
    const __m512 y = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    const __mmask16 open = _mm512_cmp_ps_mask(y, zero, _CMP_NLE_UQ);
    _mm512_mask_storeu_ps(dx + i, m, _mm512_maskz_mul_ps(open, _mm512_maskz_loadu_ps(m, dy + i), scale));
  }
}

// The forward's and the backward's functions of each plain kind on one evaluation: relu's max and [x ≤ 0 ? 0 : 1],
// gelu's terms (erf and exp), gelu_tanh's σ(2u). map(both) runs a value_grad_map with the kind's `both`; false for
// a kind without one.
template <typename Map>
static bool plain_forward_grad(Activation k, Map map) {
  switch (k) {
    case Activation::RELU: {
      const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
      map([zero, one](__m512 v, __m512& yv, __m512& dv) {
        yv = _mm512_max_ps(zero, v);
        dv = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero, _CMP_NLE_UQ), one);
      });
      return true;
    }
    case Activation::GELU:
      map([](__m512 v, __m512& yv, __m512& dv) {
        const GeluTerms g = gelu_terms(v);
        yv = gelu_of(v, g);
        dv = gelu_grad_of(v, g);
      });
      return true;
    case Activation::GELU_TANH:
      map([](__m512 v, __m512& yv, __m512& dv) {
        const Sigmoid g = sigmoid_ps(gelu_tanh_u2(v));
        yv = gelu_tanh_of(v, g);
        dv = gelu_tanh_grad_of(v, g);
      });
      return true;
    default:
      return false;
  }
}

bool activation_forward_grad_avx512(Activation k, const float* x, float* y, float* d, int64_t n) {
  return plain_forward_grad(k, [&](auto both) { value_grad_map(x, y, d, n, both); });
}

// The same y rounded by bf16_hi as it is stored (float_to_bf16's rounding of the float32 body's y).
bool activation_forward_grad_bf16_avx512(Activation k, const float* x, uint16_t* y16, float* d, int64_t n) {
  return plain_forward_grad(k, [&](auto both) {
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = first_n(n - i);
      __m512 yv, dv;
      both(_mm512_maskz_loadu_ps(m, x + i), yv, dv);
      _mm256_mask_storeu_epi16(y16 + i, m,
                               _mm512_cvtepi32_epi16(_mm512_srli_epi32(bf16_hi(_mm512_castps_si512(yv)), 16)));
      _mm512_mask_storeu_ps(d + i, m, dv);
    }
  });
}

// relu_dropout_backward_bf16_avx512's dx, 16 lanes at a time, into elementwise_avx512.cc's bias_grad strips
// (NV accumulators over the rows, the same float adds in row order) and rounded by bf16_hi into dx16.
template <int NV>
static void relu_round_strip(const float* dy, const uint16_t* y16, int64_t ld, __m512 scale, float* db, uint16_t* dx16,
                             int64_t N, __mmask16 last) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 acc[NV];
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) acc[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xFFFF, db + 16 * v);
  for (int64_t n = 0; n < N; ++n) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v == NV - 1 ? last : 0xFFFF;
      const int64_t at = n * ld + 16 * v;
      const __m512i h = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, y16 + at));
      const __mmask16 open = _mm512_cmp_ps_mask(_mm512_castsi512_ps(_mm512_slli_epi32(h, 16)), zero, _CMP_NLE_UQ);
      const __m512 x = _mm512_maskz_mul_ps(open, _mm512_maskz_loadu_ps(m, dy + at), scale);
      acc[v] = _mm512_add_ps(acc[v], x);
      const __m512i r = _mm512_srli_epi32(bf16_hi(_mm512_castps_si512(x)), 16);
      _mm256_mask_storeu_epi16(dx16 + at, m, _mm512_cvtepi32_epi16(r));
    }
  }
#pragma GCC unroll 16
  for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(db + 16 * v, v == NV - 1 ? last : 0xFFFF, acc[v]);
}

void relu_dropout_backward_bf16_round_avx512(const float* dy, const uint16_t* y16, int64_t ld, float p, float* db,
                                             uint16_t* dx16, int64_t N, int64_t F) {
  const __m512 scale = _mm512_set1_ps(dropout_scale(p));
  int64_t f = 0;
  for (; f + 256 <= F; f += 256) relu_round_strip<16>(dy + f, y16 + f, ld, scale, db + f, dx16 + f, N, 0xFFFF);
  for (; f < F; f += 16) relu_round_strip<1>(dy + f, y16 + f, ld, scale, db + f, dx16 + f, N, first_n(F - f));
}

}  // namespace tfm::kernels
