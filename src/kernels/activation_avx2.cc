// src/kernels/activation_avx2.cc — AVX2 bodies of the activation kernels for CPUs without AVX-512 (contracts in
// kernels.h): bias + activation forward and activation backward for every kind, and the FFN's bias + relu +
// dropout pass with its backward, 8 lanes. Compiled with AVX2 and FMA flags by CMake (the *_avx2.cc files); called only
// by the dispatchers in activation.cc, when cpu_has_avx2() and not cpu_has_avx512(). The methods and coefficients are
// activation_avx512.cc's (gelu_erf.h; the sigmoid, gelu_tanh and gate forms there), operation for operation, so
// the two agree with the twin and with float64 within the same bounds (tests/kernels/activation_test.cc runs
// every body the CPU has against both); the relu bodies are bitwise the twins'.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/common_avx2.h"
#include "kernels/dropout_hash_avx2.h"
#include "kernels/gelu_erf.h"
#include "kernels/kernels.h"

namespace tfm::kernels {

namespace {

using gelu_erf::kErfcG;
using gelu_erf::kErfP;

// c[0]·x^(K−1) + … + c[K−1] by Horner's rule with FMA.
template <size_t K>
inline __m256 horner(__m256 x, const float (&c)[K]) {
  __m256 y = _mm256_set1_ps(c[0]);
  for (size_t i = 1; i < K; ++i) y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(c[i]));
  return y;
}

struct GeluTerms {
  __m256 q;  // 1 + erf(x/√2)
  __m256 e;  // exp(−x²/2)
};

// activation_avx512.cc's gelu_terms, operation for operation (gelu_erf.h has the method).
inline GeluTerms gelu_terms(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678118654752440f));
  const __m256 az = abs_ps(z);
  const __m256 xc = _mm256_min_ps(abs_ps(x), _mm256_set1_ps(15.0f));
  const __m256 h = _mm256_mul_ps(xc, xc);
  const __m256 l = _mm256_fmsub_ps(xc, xc, h);
  const __m256 e0 = exp_ps(_mm256_mul_ps(h, _mm256_set1_ps(-0.5f)));
  const __m256 e = _mm256_fnmadd_ps(e0, _mm256_mul_ps(l, _mm256_set1_ps(0.5f)), e0);
  const __m256 q_small = _mm256_fmadd_ps(z, horner(_mm256_mul_ps(z, z), kErfP), one);
  const __m256 t = _mm256_div_ps(one, _mm256_min_ps(_mm256_max_ps(az, one), _mm256_set1_ps(10.0f)));
  const __m256 g = horner(_mm256_sub_ps(t, _mm256_set1_ps(0.55f)), kErfcG);
  const __m256 erfc = _mm256_mul_ps(e, _mm256_mul_ps(t, g));
  const __m256 pos = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_GT_OQ);
  const __m256 q_large = _mm256_blendv_ps(erfc, _mm256_sub_ps(_mm256_set1_ps(2.0f), erfc), pos);
  const __m256 small = _mm256_cmp_ps(az, one, _CMP_LT_OQ);
  return {_mm256_blendv_ps(q_large, q_small, small), e};
}

// gelu(v) = (0.5·v)·q, the twin's order of operations.
inline __m256 gelu_of(__m256 v, const GeluTerms& g) {
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v), g.q);
}
inline __m256 gelu_ps(__m256 v) { return gelu_of(v, gelu_terms(v)); }

// gelu'(v) = 0.5·q + v·(e/√(2π)).
inline __m256 gelu_grad_of(__m256 v, const GeluTerms& g) {
  const __m256 pdf = _mm256_mul_ps(g.e, _mm256_set1_ps(0.39894228040143267794f));
  return _mm256_fmadd_ps(v, pdf, _mm256_mul_ps(_mm256_set1_ps(0.5f), g.q));
}
inline __m256 gelu_grad_ps(__m256 v) { return gelu_grad_of(v, gelu_terms(v)); }

// σ(v) and σ(−v) from one e = exp(−|v|), as activation_avx512.cc's sigmoid_ps (it says why neither cancels).
struct Sigmoid {
  __m256 s;   // σ(v)
  __m256 sc;  // σ(−v) = 1 − σ(v)
};
inline Sigmoid sigmoid_ps(__m256 v) {
  const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), abs_ps(v)));
  const __m256 r = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  const __m256 er = _mm256_mul_ps(e, r);
  const __m256 neg = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
  return {_mm256_blendv_ps(r, er, neg), _mm256_blendv_ps(er, r, neg)};
}

// gelu_tanh(x) = x·σ(2u) and gelu_tanh'(x) = σ(2u) + 2x·σ(2u)σ(−2u)·u', u = √(2/π)·(x + 0.044715·x³)
// (activation_avx512.cc derives them).
constexpr float kSqrt2OverPi = 0.79788456080286535588f, kTanhCubic = 0.044715f;
inline __m256 gelu_tanh_u2(__m256 x) {  // 2u
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(kTanhCubic), x2), x, x);
  return _mm256_mul_ps(_mm256_set1_ps(2.0f * kSqrt2OverPi), inner);
}
// Both from g = σ(2u): gelu_tanh_of and gelu_tanh_grad_of; the _ps forms compute g themselves.
inline __m256 gelu_tanh_of(__m256 x, const Sigmoid& g) { return _mm256_mul_ps(x, g.s); }
inline __m256 gelu_tanh_ps(__m256 x) { return gelu_tanh_of(x, sigmoid_ps(gelu_tanh_u2(x))); }
inline __m256 gelu_tanh_grad_of(__m256 x, const Sigmoid& g) {
  const __m256 du =
      _mm256_mul_ps(_mm256_set1_ps(kSqrt2OverPi),
                    _mm256_fmadd_ps(_mm256_set1_ps(3.0f * kTanhCubic), _mm256_mul_ps(x, x), _mm256_set1_ps(1.0f)));
  const __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(x, x), _mm256_mul_ps(g.s, g.sc)), du);
  return _mm256_add_ps(g.s, t);
}
inline __m256 gelu_tanh_grad_ps(__m256 x) { return gelu_tanh_grad_of(x, sigmoid_ps(gelu_tanh_u2(x))); }

// The gates g(b) and g'(b) of the gated kinds (the twin's gate / gate_grad):
//   GLU     g = σ(b)      g' = σ(b)·σ(−b)
//   GEGLU   g = gelu(b)   g' = gelu'(b)
//   SWIGLU  g = b·σ(b)    g' = σ(b)·(1 + b·σ(−b))
template <Activation K>
inline __m256 gate_ps(__m256 b) {
  if constexpr (K == Activation::GLU) return sigmoid_ps(b).s;
  if constexpr (K == Activation::GEGLU) return gelu_ps(b);
  if constexpr (K == Activation::SWIGLU) return _mm256_mul_ps(b, sigmoid_ps(b).s);
}
template <Activation K>
inline __m256 gate_grad_ps(__m256 b) {
  if constexpr (K == Activation::GEGLU) return gelu_grad_ps(b);
  const Sigmoid g = sigmoid_ps(b);
  if constexpr (K == Activation::GLU) return _mm256_mul_ps(g.s, g.sc);
  return _mm256_mul_ps(g.s, _mm256_fmadd_ps(b, g.sc, _mm256_set1_ps(1.0f)));
}

// fn(f, n) over a row of F: n = 8 lanes from f, the last fewer than 8 through the tail loads and stores.
template <typename Fn>
inline void over_row(int64_t F, Fn fn) {
  int64_t f = 0;
  for (; f + 8 <= F; f += 8) fn(f, int64_t{8});
  if (f < F) fn(f, F - f);
}

// y = act(x + bias) for the plain kinds, row by row.
// act is a lambda (the callers wrap the named functions in one), so that each call inlines: a function
// pointer is an indirect call per vector.
template <typename Act>
void bias_map_rows(const float* x, const float* bias, float* y, int64_t N, int64_t F, Act act) {
  for (int64_t r = 0; r < N; ++r) {
    const float* xr = x + r * F;
    float* yr = y + r * F;
    over_row(F, [&](int64_t f, int64_t n) {
      __m256 v = load_n(xr + f, n);
      if (bias) v = _mm256_add_ps(v, load_n(bias + f, n));
      store_n(yr + f, act(v), n);
    });
  }
}

// dx = dy ⊙ act'(x) over n elements.
template <typename Grad>
void grad_map(const float* dy, const float* x, float* dx, int64_t n, Grad grad) {
  over_row(n,
           [&](int64_t i, int64_t k) { store_n(dx + i, _mm256_mul_ps(load_n(dy + i, k), grad(load_n(x + i, k))), k); });
}

// Gated rows: x (N, 2F) = [a | b] (+ bias (2F)), y (N, F) = a ⊙ g(b).
template <Activation K>
void gated_forward_rows(const float* x, const float* bias, float* y, int64_t N, int64_t F) {
  for (int64_t r = 0; r < N; ++r) {
    const float* ar = x + r * 2 * F;
    const float* br = ar + F;
    float* yr = y + r * F;
    over_row(F, [&](int64_t f, int64_t n) {
      __m256 a = load_n(ar + f, n), b = load_n(br + f, n);
      if (bias) {
        a = _mm256_add_ps(a, load_n(bias + f, n));
        b = _mm256_add_ps(b, load_n(bias + F + f, n));
      }
      store_n(yr + f, _mm256_mul_ps(a, gate_ps<K>(b)), n);
    });
  }
}

// Gated backward: da = dy ⊙ g(b), db = (dy ⊙ a) ⊙ g'(b), dx (N, 2F) = [da | db].
template <Activation K>
void gated_backward_rows(const float* dy, const float* x, float* dx, int64_t N, int64_t F) {
  for (int64_t r = 0; r < N; ++r) {
    const float* ar = x + r * 2 * F;
    const float* br = ar + F;
    const float* gr = dy + r * F;
    float* dar = dx + r * 2 * F;
    float* dbr = dar + F;
    over_row(F, [&](int64_t f, int64_t n) {
      const __m256 a = load_n(ar + f, n), b = load_n(br + f, n), g = load_n(gr + f, n);
      store_n(dar + f, _mm256_mul_ps(g, gate_ps<K>(b)), n);
      store_n(dbr + f, _mm256_mul_ps(_mm256_mul_ps(g, a), gate_grad_ps<K>(b)), n);
    });
  }
}

// y = act(x) and d = act'(x) over n elements: both(v, y, d) from one evaluation per vector.
template <typename Both>
void value_grad_map(const float* x, float* y, float* d, int64_t n, Both both) {
  over_row(n, [&](int64_t i, int64_t k) {
    __m256 yv, dv;
    both(load_n(x + i, k), yv, dv);
    store_n(y + i, yv, k);
    store_n(d + i, dv, k);
  });
}

}  // namespace

// relu(x + b) = max(0, x + b): vmaxps returns its second operand (v) when either is NaN or both are zeros, so
// NaN stays NaN and −0 stays −0, as the twin's `v < 0 ? 0 : v`.
bool bias_activation_forward_avx2(Activation k, const float* x, const float* bias, float* y, int64_t N, int64_t F) {
  switch (k) {
    case Activation::RELU: {
      const __m256 zero = _mm256_setzero_ps();
      bias_map_rows(x, bias, y, N, F, [zero](__m256 v) { return _mm256_max_ps(zero, v); });
      return true;
    }
    case Activation::GELU:
      bias_map_rows(x, bias, y, N, F, [](const __m256 v) { return gelu_ps(v); });
      return true;
    case Activation::GELU_TANH:
      bias_map_rows(x, bias, y, N, F, [](const __m256 v) { return gelu_tanh_ps(v); });
      return true;
    case Activation::GLU:
      gated_forward_rows<Activation::GLU>(x, bias, y, N, F);
      return true;
    case Activation::GEGLU:
      gated_forward_rows<Activation::GEGLU>(x, bias, y, N, F);
      return true;
    case Activation::SWIGLU:
      gated_forward_rows<Activation::SWIGLU>(x, bias, y, N, F);
      return true;
    default:
      return false;
  }
}

// relu: dx = x ≤ 0 ? 0 : dy, a select (x NaN passes dy: _CMP_NLE_UQ is true on unordered), as the twin.
bool activation_backward_avx2(Activation k, const float* dy, const float* x, float* dx, int64_t N, int64_t F) {
  switch (k) {
    case Activation::RELU: {
      const __m256 zero = _mm256_setzero_ps();
      over_row(N * F, [&](int64_t i, int64_t k) {
        const __m256 open = _mm256_cmp_ps(load_n(x + i, k), zero, _CMP_NLE_UQ);
        store_n(dx + i, _mm256_and_ps(open, load_n(dy + i, k)), k);
      });
      return true;
    }
    case Activation::GELU:
      grad_map(dy, x, dx, N * F, [](const __m256 v) { return gelu_grad_ps(v); });
      return true;
    case Activation::GELU_TANH:
      grad_map(dy, x, dx, N * F, [](const __m256 v) { return gelu_tanh_grad_ps(v); });
      return true;
    case Activation::GLU:
      gated_backward_rows<Activation::GLU>(dy, x, dx, N, F);
      return true;
    case Activation::GEGLU:
      gated_backward_rows<Activation::GEGLU>(dy, x, dx, N, F);
      return true;
    case Activation::SWIGLU:
      gated_backward_rows<Activation::SWIGLU>(dy, x, dx, N, F);
      return true;
    default:
      return false;
  }
}

// relu(x + b) as bias_activation_forward_avx2 (max(0, v)), then dropout_forward_avx2's keep and multiply.
void bias_relu_dropout_forward_avx2(const float* x, const float* bias, float* y, int64_t N, int64_t F,
                                    const DropoutSpec& drop) {
  const __m256 zero = _mm256_setzero_ps(), scale = _mm256_set1_ps(dropout_scale(drop.p));
  DropoutMask8 drop_mask(drop.seed, drop.p);
  for (int64_t r = 0; r < N; ++r) {
    const float* xr = x + r * F;
    float* yr = y + r * F;
    const uint64_t row = drop.offset + static_cast<uint64_t>(r * F);
    over_row(F, [&](int64_t f, int64_t n) {
      __m256 v = load_n(xr + f, n);
      if (bias) v = _mm256_add_ps(v, load_n(bias + f, n));
      const __m256 keep = drop_mask.keep(row + static_cast<uint64_t>(f));
      store_n(yr + f, _mm256_and_ps(keep, _mm256_mul_ps(_mm256_max_ps(zero, v), scale)), n);
    });
  }
}

// dx = y ≤ 0 ? 0 : dy·scale (dropped or shut lanes get +0 whatever dy holds; a NaN y passes dy·scale), as the twin.
void relu_dropout_backward_avx2(const float* dy, const float* y, float* dx, int64_t n, float p) {
  const __m256 zero = _mm256_setzero_ps(), scale = _mm256_set1_ps(dropout_scale(p));
  over_row(n, [&](int64_t i, int64_t k) {
    const __m256 open = _mm256_cmp_ps(load_n(y + i, k), zero, _CMP_NLE_UQ);
    store_n(dx + i, _mm256_and_ps(open, _mm256_mul_ps(load_n(dy + i, k), scale)), k);
  });
}

// The forward's and the backward's functions of each plain kind on one evaluation (activation_avx512.cc's), as
// plain_forward_grad there.
template <typename Map>
static bool plain_forward_grad(Activation k, Map map) {
  switch (k) {
    case Activation::RELU: {
      const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
      map([zero, one](__m256 v, __m256& yv, __m256& dv) {
        yv = _mm256_max_ps(zero, v);
        dv = _mm256_and_ps(_mm256_cmp_ps(v, zero, _CMP_NLE_UQ), one);
      });
      return true;
    }
    case Activation::GELU:
      map([](__m256 v, __m256& yv, __m256& dv) {
        const GeluTerms g = gelu_terms(v);
        yv = gelu_of(v, g);
        dv = gelu_grad_of(v, g);
      });
      return true;
    case Activation::GELU_TANH:
      map([](__m256 v, __m256& yv, __m256& dv) {
        const Sigmoid g = sigmoid_ps(gelu_tanh_u2(v));
        yv = gelu_tanh_of(v, g);
        dv = gelu_tanh_grad_of(v, g);
      });
      return true;
    default:
      return false;
  }
}

bool activation_forward_grad_avx2(Activation k, const float* x, float* y, float* d, int64_t n) {
  return plain_forward_grad(k, [&](auto both) { value_grad_map(x, y, d, n, both); });
}

// The same y rounded by bf16_hi (common_avx2.h) as it is stored.
bool activation_forward_grad_bf16_avx2(Activation k, const float* x, uint16_t* y16, float* d, int64_t n) {
  return plain_forward_grad(k, [&](auto both) {
    over_row(n, [&](int64_t i, int64_t kk) {
      __m256 yv, dv;
      both(load_n(x + i, kk), yv, dv);
      store_bf16_n(y16 + i, yv, kk);
      store_n(d + i, dv, kk);
    });
  });
}

}  // namespace tfm::kernels
