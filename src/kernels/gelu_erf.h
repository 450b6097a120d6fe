// src/kernels/gelu_erf.h — the polynomials behind the SIMD bodies' GELU (activation_avx512.cc, 16 lanes;
// activation_avx2.cc, 8 lanes): one method, one set of coefficients, for both widths. Plain constants, so any
// file may include it.
//
// gelu(x) = 0.5·x·q and gelu'(x) = Φ(x) + x·φ(x) = 0.5·q + x·e/√(2π), with
//   q = 1 + erf(z) = 2Φ(x),  z = x/√2,   e = exp(−x²/2) = exp(−z²).
// q is computed in two ranges, both evaluated for every lane and blended by |z| < 1:
//   |z| < 1:  erf(z) = z·P(z²), P of degree 6 fitted (Chebyshev interpolation, 40-digit
//             arithmetic) to erf(√u)/√u on u ∈ [0, 1]: relative error ≤ 1.2e-9.
//   |z| ≥ 1:  erfc(|z|) = e·t·G(t − 0.55), t = 1/|z| ∈ (0, 1], G of degree 11 fitted to
//             R(1/t)/t on t ∈ [0.1, 1], where R(z) = erfc(z)·exp(z²) is smooth (→ 1/(√π·z));
//             relative error ≤ 1.3e-8. The shift by 0.55 keeps Horner's terms small (Σ|cᵢ|·0.45ⁱ
//             = 0.6 against G ≈ 0.43–0.56), so rounding stays near one ulp.
//             Then q = 2 − erfc(|z|) for z > 0 and q = erfc(|z|) for z < 0: the negative tail keeps
//             its relative precision instead of cancelling in 1 + erf(z) (the twin's form).
//             |z| is clamped to 10 for t, the end of G's fitted range: erfc(10) ≈ 2.1e-45 is at the
//             bottom of float's denormals (it rounds to 2⁻¹⁴⁹ ≈ 1.4e-45), and e = exp(−z²) is itself a
//             denormal there (exp(−100) ≈ 3.7e-44) and 0 from |z| ≈ 10.2 on (exp_ps rounds exp(−104)
//             to 0), so beyond 10 the clamped t·G moves erfc by a few denormal units at most.
// e is the vector exp of −x²/2 with x² = h + l split exactly by an FMA (h = x·x rounded, l = fma(x, x, −h)):
// e = exp(−h/2)·(1 − l/2), so the rounding of x² (relative 6e-8, i.e. an absolute 6e-8·x²/2 in the
// exponent, 1e-6 at |x| = 6) does not reach e. |x| is clamped to 15 there, where e is already 0
// (exp_ps(−112.5) = 0), so ±inf give e = 0 rather than NaN from inf − inf.
// Special values follow the twin's formulas: gelu(+inf) = inf, gelu(−inf) = −inf·0 = NaN,
// gelu'(±inf) = q/2 + (±inf)·0 = NaN, NaN → NaN.
#pragma once

namespace tfm::kernels::gelu_erf {

constexpr float kErfP[] = {7.875875063e-5f, -0.0008016864287f, 0.005189087423f, -0.02685421201f,
                           0.1128359472f,   -0.3761262667f,    1.128379166f};
constexpr float kErfcG[] = {0.1145922753f,   -0.048454565f,   -0.09342889906f, 0.1058529248f,
                            -0.06092109901f, 0.009622215843f, 0.04989265231f,  -0.09691252297f,
                            0.09835656317f,  -0.02036566453f, -0.1700351067f,  0.5023534283f};

}  // namespace tfm::kernels::gelu_erf
