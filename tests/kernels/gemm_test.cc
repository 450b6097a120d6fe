// tests/kernels/gemm_test.cc — gemm (oneDNN on fixed panels) against its scalar twin gemm_scalar,
// gemm_scalar against gemm_scalar<double>, a hand-checked 2×2, the beta = 0 "overwrite even NaN"
// contract, padded leading dimensions (padding must be neither read nor written), and bitwise
// thread-count independence.
//
// Tolerance (all comparisons). Any summation order of K products in float satisfies
//   |ŝ − s| ≤ γ_K · Σ_k |a_ik b_kj|,   γ_n = n·u / (1 − n·u),   u = 2^-24 = FLT_EPSILON / 2,
// and applying alpha (wherever the implementation applies it: once or per product) and adding
// beta·c adds at most three more roundings, so each float result is within
//   γ_{K+3} · (|alpha| Σ_k |a_ik b_kj| + |beta c_ij|)
// of the exact value, and two float implementations differ by at most twice that. Against the
// double reference only the float side errs: one γ_{K+3}. The magnitudes Σ|a||b| come from
// gemm_scalar<double> on |A|, |B| (exact enough: double's own error is ~2^-29 times smaller).
// To add a case: append to kShapes or write a TEST with its own derivation.
#include <gtest/gtest.h>
#include <omp.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/gemm_backend.h"
#include "kernels/gemm_scalar.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace tfm::kernels {
namespace {

using testing::bitwise_equal;
using testing::close_abs;
using testing::Rng;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// γ_n for float, n·u/(1 − n·u).
double gamma_f(int64_t n) {
  const double u = FLT_EPSILON / 2.0;
  return double(n) * u / (1.0 - double(n) * u);
}

// A row-major (rows, cols) matrix stored with leading dimension ld ≥ cols; the padding columns
// hold `pad` (NaN for inputs, so reading them would poison the result).
struct Mat {
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<float> v;
  Mat(int64_t r, int64_t c, int64_t pad_cols, float pad, Rng& rng)
      : rows(r), cols(c), ld(c + pad_cols), v(size_t(std::max<int64_t>(r * (c + pad_cols), 1)), pad) {
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) v[i * ld + j] = rng.uniform(-1.f, 1.f);
  }
  float& at(int64_t i, int64_t j) { return v[i * ld + j]; }
  // The (rows, cols) elements, densely, and the padding columns after them, row by row.
  std::vector<float> elements() const {
    std::vector<float> out;
    for (int64_t i = 0; i < rows; ++i) out.insert(out.end(), v.begin() + i * ld, v.begin() + i * ld + cols);
    return out;
  }
  std::vector<float> padding() const {
    std::vector<float> out;
    for (int64_t i = 0; i < rows; ++i) out.insert(out.end(), v.begin() + i * ld + cols, v.begin() + (i + 1) * ld);
    return out;
  }
};

struct Case {
  bool ta, tb;
  int64_t M, N, K, pad;
  std::string str() const {
    return std::string(ta ? "T" : "N") + (tb ? "T" : "N") + " M=" + std::to_string(M) +
           " N=" + std::to_string(N) + " K=" + std::to_string(K) + " pad=" + std::to_string(pad);
  }
};

// Σ_k |op(A)_ik| |op(B)_kj| for every (i, j), in double, laid out (M, N) densely.
std::vector<double> abs_products(const Case& c, const Mat& A, const Mat& B) {
  std::vector<double> a(A.v.size()), b(B.v.size()), s(size_t(std::max<int64_t>(c.M * c.N, 1)));
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::isnan(A.v[i]) ? 0.0 : std::fabs(A.v[i]);
  for (size_t i = 0; i < b.size(); ++i) b[i] = std::isnan(B.v[i]) ? 0.0 : std::fabs(B.v[i]);
  gemm_scalar<double>(c.ta, c.tb, c.M, c.N, c.K, 1.0, a.data(), A.ld, b.data(), B.ld, 0.0, s.data(),
                      c.N);
  return s;
}

// Checks `got` against `want` element by element within factor·γ_{K+3}·(|α|Σ|a||b| + |β c0|), and
// that the padding of got is untouched (still C0's).
void expect_close(const Case& c, float alpha, float beta, const Mat& C0, const Mat& got,
                  const std::vector<double>& want, const std::vector<double>& absprod,
                  double factor, const std::string& what) {
  const std::vector<float> c0 = C0.elements();
  auto tol = [&](int64_t ij) {
    const double c0_ij = beta == 0.f ? 0.0 : std::fabs(double(c0[ij]));
    return factor * gamma_f(c.K + 3) * (std::fabs(alpha) * absprod[ij] + std::fabs(beta) * c0_ij) +
           FLT_MIN;  // subnormal slack when the bound is 0
  };
  const std::string at = what + " " + c.str() + " alpha=" + std::to_string(alpha) + " beta=" + std::to_string(beta);
  EXPECT_TRUE(close_abs(got.elements(), want, tol, at, {c.M, c.N}));
  EXPECT_TRUE(bitwise_equal(got.padding(), C0.padding(), at + ": padding of C"));
}

using GemmFn = void (*)(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                        float, float*, int64_t);

// fn's C for a case, alpha and beta, checked against gemm_scalar's within twice the one-sided bound (both are
// float); C starts as C0: random with its padding a sentinel that must survive, all NaN where beta = 0 says it
// is not read. Returns C0 and fn's C.
std::pair<Mat, Mat> check_against_scalar(GemmFn fn, const Case& c, const Mat& A, const Mat& B,
                                         const std::vector<double>& absprod, float alpha, float beta, Rng& rng,
                                         const std::string& what) {
  Mat C0(c.M, c.N, c.pad, -7.f, rng);
  if (beta == 0.f)
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) C0.at(i, j) = kNaN;
  Mat Cf = C0, Cs = C0;
  fn(c.ta, c.tb, c.M, c.N, c.K, alpha, A.v.data(), A.ld, B.v.data(), B.ld, beta, Cf.v.data(), Cf.ld);
  gemm_scalar(c.ta, c.tb, c.M, c.N, c.K, alpha, A.v.data(), A.ld, B.v.data(), B.ld, beta, Cs.v.data(), Cs.ld);
  std::vector<double> scalar(size_t(c.M * c.N));
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) scalar[i * c.N + j] = Cs.at(i, j);
  expect_close(c, alpha, beta, C0, Cf, scalar, absprod, 2.0, what);
  return {C0, Cf};
}

// fn(case, A, B, Σ|a||b|) for every shape of `shapes` ({M, N, K} each), every transposition and operands
// padded by 0 and 5 columns of NaN (which must not be read). A is stored (M,K) or (K,M), B (K,N) or (N,K).
template <size_t kCount, typename Fn>
void for_each_case(const int64_t (&shapes)[kCount][3], Rng& rng, Fn fn) {
  for (const auto& s : shapes)
    for (int t = 0; t < 4; ++t)
      for (int64_t pad : {0, 5}) {
        const Case c{bool(t & 1), bool(t & 2), s[0], s[1], s[2], pad};
        const Mat A(c.ta ? c.K : c.M, c.ta ? c.M : c.K, pad, kNaN, rng);
        const Mat B(c.tb ? c.N : c.K, c.tb ? c.K : c.N, pad, kNaN, rng);
        fn(c, A, B, abs_products(c, A, B));
      }
}

// Odd sizes (not multiples of any vector width), degenerate 1s, and sizes above the serial
// threshold (2^21 multiply-adds) so the threaded panel paths run too: row panels with a ragged
// last panel (65·130·257, 200·300·150, 1030·70·40) and column panels (M < 128: 40·700·99).
const int64_t kShapes[][3] = {{1, 1, 1},     {1, 17, 3},     {3, 1, 33},      {17, 33, 1},
                              {33, 17, 100}, {100, 3, 17},   {100, 100, 100}, {65, 130, 257},
                              {200, 300, 150}, {40, 700, 99}, {1030, 70, 40}};

TEST(Gemm, MatchesScalarAllTransposesOddSizesPaddedAlphaBeta) {
  Rng rng(1234);
  for_each_case(kShapes, rng, [&](const Case& c, const Mat& A, const Mat& B, const std::vector<double>& absprod) {
    for (float alpha : {0.f, 1.f, 0.5f})
      for (float beta : {0.f, 1.f, 0.5f})
        check_against_scalar(&gemm, c, A, B, absprod, alpha, beta, rng, "gemm vs gemm_scalar");
  });
}

// op(A) = Aᵀ with a long leading dimension (lda ≥ 2048, the weight-gradient case dW = dyᵀ·x with
// out ≥ 2048). Two special paths in gemm.cc where oneDNN runs the panels (gemm_avx2.cc, on CPUs without
// AVX-512, packs any stride and takes neither): with beta = 0 and M ≥ 4N (and enough work) the product
// runs swapped, Cᵀ = Bᵀ·A into a scratch, transposed into C (gemm_tn_swapped: 1030·70·40, 600·150·50);
// otherwise panels with ≥ 256 columns copy their A panel to rows and run NN (transposed_panel).
// Sizes not multiples of 16×16 tiles; one serial call (33·257·17), column panels (M < 128:
// 100·600·70) and row panels (300·260·40), B plain and transposed, C padded (its padding must
// survive), alpha 1 and 0.5, beta 0 (C starts as NaN) and 1. Same bound as above.
TEST(Gemm, LongStrideTransposedAMatchesScalar) {
  Rng rng(99);
  const Case cases[] = {{true, false, 33, 257, 17, 2048 - 33 + 5}, {true, false, 100, 600, 70, 2048 - 100},
                        {true, true, 300, 260, 40, 2100 - 300},    {true, false, 300, 260, 40, 2048 - 300},
                        {true, false, 1030, 70, 40, 2048 - 1030 + 3}, {true, false, 600, 150, 50, 2048 - 600}};
  for (const Case& c : cases) {
    Mat A(c.K, c.M, c.pad, kNaN, rng);
    Mat B(c.tb ? c.N : c.K, c.tb ? c.K : c.N, 3, kNaN, rng);
    ASSERT_GE(A.ld, 2048) << c.str();
    const std::vector<double> absprod = abs_products(c, A, B);
    for (float alpha : {1.f, 0.5f}) {
      for (float beta : {0.f, 1.f}) {
        Mat C0(c.M, c.N, 2, -7.f, rng);
        if (beta == 0.f)
          for (int64_t i = 0; i < c.M; ++i)
            for (int64_t j = 0; j < c.N; ++j) C0.at(i, j) = kNaN;
        Mat Cf = C0, Cs = C0;
        gemm(c.ta, c.tb, c.M, c.N, c.K, alpha, A.v.data(), A.ld, B.v.data(), B.ld, beta, Cf.v.data(), Cf.ld);
        gemm_scalar(c.ta, c.tb, c.M, c.N, c.K, alpha, A.v.data(), A.ld, B.v.data(), B.ld, beta,
                    Cs.v.data(), Cs.ld);
        std::vector<double> scalar(size_t(c.M * c.N));
        for (int64_t i = 0; i < c.M; ++i)
          for (int64_t j = 0; j < c.N; ++j) scalar[i * c.N + j] = Cs.at(i, j);
        expect_close(c, alpha, beta, C0, Cf, scalar, absprod, 2.0, "long-stride TN vs gemm_scalar");
      }
    }
  }
}

// The AVX2 panel kernel (gemm_avx2.cc: what gemm runs on CPUs with AVX2 but not AVX-512), called directly so
// it is tested on every CPU with AVX2. Against gemm_scalar within the bound above, for every transposition,
// odd sizes and sizes past its blocks (K > 256: several passes through C; M > 144: several blocks of A; M > 512:
// several chunks of rows, op(B) packed once for all, each chunk's sums between passes in the scratch), padded
// operands (NaN padding must not be read) and C (the padding must survive), alpha 1 and 0.5, beta 0 (C starts
// as NaN), 1, 0.5 and 0.3. And its order of summation depends on K, alpha and beta only: any block of C computed
// by a call of its own (the operands offset to its rows and columns) has the whole product's bits there,
// which is what makes kernels::gemm's panels independent of how they are cut and spread over threads. With a
// bias, bitwise the product added to rows preset to it (gemm_bias's definition).
TEST(GemmAvx2, MatchesScalarAndAnyBlockOfCHasTheWholeProductsBits) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 (or TFM_FORCE_SCALAR)";
  Rng rng(4321);
  const int64_t shapes[][3] = {{1, 1, 1},      {5, 17, 3},    {6, 16, 8},     {7, 15, 9},
                               {33, 17, 100},  {100, 3, 17},  {150, 70, 600}, {13, 35, 513},
                               {145, 33, 257}, {40, 200, 99}, {1030, 20, 260}};
  for_each_case(shapes, rng, [&](const Case& c, const Mat& A, const Mat& B, const std::vector<double>& absprod) {
    for (float alpha : {1.f, 0.5f}) {
      for (float beta : {0.f, 1.f, 0.5f, 0.3f}) {  // 0.3·c is inexact: a fused multiply-add would show
        const GemmFn avx2 = [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                               int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
          gemm_detail::gemm_avx2_serial(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        };
        auto [C0, Cf] =
            check_against_scalar(avx2, c, A, B, absprod, alpha, beta, rng, "gemm_avx2_serial vs gemm_scalar");

        // The block of rows [i0, M) and columns [j0, N), by a call of its own on C0's values.
        const int64_t i0 = c.M / 3, j0 = c.N / 2;
        Mat Cb = C0;
        const float* a = c.ta ? A.v.data() + i0 : A.v.data() + i0 * A.ld;
        const float* b = c.tb ? B.v.data() + j0 * B.ld : B.v.data() + j0;
        gemm_detail::gemm_avx2_serial(c.ta, c.tb, c.M - i0, c.N - j0, c.K, alpha, a, A.ld, b, B.ld, beta,
                                      &Cb.at(i0, j0), Cb.ld);
        std::vector<float> whole, block;
        for (int64_t i = i0; i < c.M; ++i)
          for (int64_t j = j0; j < c.N; ++j) whole.push_back(Cf.at(i, j)), block.push_back(Cb.at(i, j));
        EXPECT_TRUE(bitwise_equal(block, whole, "block of " + c.str()));
      }
    }
    // With a bias (gemm_bias's panels): bitwise the product onto rows preset to the bias, C's NaN unread.
    Mat bias(1, c.N, 0, 0.f, rng), preset(c.M, c.N, c.pad, -7.f, rng);
    Mat fused = preset;
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) preset.at(i, j) = bias.at(0, j), fused.at(i, j) = kNaN;
    gemm_detail::gemm_avx2_serial(c.ta, c.tb, c.M, c.N, c.K, 1.f, A.v.data(), A.ld, B.v.data(), B.ld, 1.f,
                                  preset.v.data(), preset.ld);
    gemm_detail::gemm_avx2_serial(c.ta, c.tb, c.M, c.N, c.K, 1.f, A.v.data(), A.ld, B.v.data(), B.ld, 0.f,
                                  fused.v.data(), fused.ld, bias.v.data());
    EXPECT_TRUE(bitwise_equal(fused.v, preset.v, "bias of " + c.str()));
  });
}

// The scalar twin itself against the double-precision instance of the same specification.
TEST(GemmScalar, MatchesDoubleReference) {
  Rng rng(99);
  for (const auto& s : kShapes) {
    for (int t = 0; t < 4; ++t) {
      const Case c{bool(t & 1), bool(t & 2), s[0], s[1], s[2], 3};
      Mat A(c.ta ? c.K : c.M, c.ta ? c.M : c.K, c.pad, kNaN, rng);
      Mat B(c.tb ? c.N : c.K, c.tb ? c.K : c.N, c.pad, kNaN, rng);
      Mat C0(c.M, c.N, c.pad, -7.f, rng);
      const std::vector<double> absprod = abs_products(c, A, B);
      const float alpha = 0.5f, beta = 0.5f;
      std::vector<double> a(A.v.begin(), A.v.end()), b(B.v.begin(), B.v.end()), want(size_t(c.M * c.N));
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) want[i * c.N + j] = C0.at(i, j);
      gemm_scalar<double>(c.ta, c.tb, c.M, c.N, c.K, alpha, a.data(), A.ld, b.data(), B.ld, beta, want.data(), c.N);
      Mat Cs = C0;
      gemm_scalar(c.ta, c.tb, c.M, c.N, c.K, alpha, A.v.data(), A.ld, B.v.data(), B.ld, beta, Cs.v.data(), Cs.ld);
      expect_close(c, alpha, beta, C0, Cs, want, absprod, 1.0, "gemm_scalar vs double");
    }
  }
}

// Hand-checkable:  A = [1 2; 3 4], B = [5 6; 7 8], C = [1 1; 1 1], alpha = 0.5, beta = 2
//   A·B = [1·5+2·7  1·6+2·8; 3·5+4·7  3·6+4·8] = [19 22; 43 50]
//   0.5·A·B + 2·C = [9.5+2  11+2; 21.5+2  25+2] = [11.5 13; 23.5 27]   (all exact in float)
// With trans_a and trans_b, the same numbers stored transposed give the same C.
TEST(Gemm, HandChecked2x2) {
  const float A[] = {1, 2, 3, 4}, At[] = {1, 3, 2, 4};
  const float B[] = {5, 6, 7, 8}, Bt[] = {5, 7, 6, 8};
  const float want[] = {11.5f, 13.f, 23.5f, 27.f};
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    float Cf[] = {1, 1, 1, 1}, Cs[] = {1, 1, 1, 1};
    gemm(ta, tb, 2, 2, 2, 0.5f, ta ? At : A, 2, tb ? Bt : B, 2, 2.f, Cf, 2);
    gemm_scalar(ta, tb, 2, 2, 2, 0.5f, ta ? At : A, 2, tb ? Bt : B, 2, 2.f, Cs, 2);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(Cf[i], want[i]) << "gemm ta=" << ta << " tb=" << tb << " i=" << i;
      EXPECT_EQ(Cs[i], want[i]) << "gemm_scalar ta=" << ta << " tb=" << tb << " i=" << i;
    }
  }
}

// K = 0: the empty sum leaves C = beta·C, and beta = 0 overwrites NaN with 0.
TEST(Gemm, EmptyReduction) {
  const float A[1] = {kNaN}, B[1] = {kNaN};
  for (auto fn : {&gemm, &gemm_scalar}) {
    float C0[] = {kNaN, kNaN, kNaN, kNaN, kNaN, kNaN};
    fn(false, false, 2, 3, 0, 1.f, A, 1, B, 3, 0.f, C0, 3);
    for (float x : C0) EXPECT_EQ(x, 0.f);
    float C1[] = {1, 2, 3, 4, 5, 6};
    fn(false, false, 2, 3, 0, 1.f, A, 1, B, 3, 0.5f, C1, 3);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(C1[i], 0.5f * float(i + 1));
  }
}

// Runs gemm on a fixed problem with `threads` OpenMP threads and returns C.
std::vector<float> run_with_threads(const Case& c, float beta, int threads) {
  Rng rng(7);
  Mat A(c.ta ? c.K : c.M, c.ta ? c.M : c.K, c.pad, kNaN, rng);
  Mat B(c.tb ? c.N : c.K, c.tb ? c.K : c.N, c.pad, kNaN, rng);
  Mat C(c.M, c.N, c.pad, -7.f, rng);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  gemm(c.ta, c.tb, c.M, c.N, c.K, 1.f, A.v.data(), A.ld, B.v.data(), B.ld, beta, C.v.data(), C.ld);
  omp_set_num_threads(saved);
  return C.v;
}

// Bitwise identical results for 1 and 2 threads, on the transformer shapes where oneDNN's own
// threading was measured to differ (NT 1024×512×2048 splits K), on weight-gradient shapes, and on
// odd sizes that leave ragged last panels. (Where the AVX2 GEMM runs, a thread's panels are one call, in chunks of
// 512 rows: 1100 × 1030 × 1030 packs op(B), over 2^20 floats, pass by pass in each chunk; the others pack it whole;
// 130 × 520 × 300, wider than tall, is cut into column panels there.)
TEST(Gemm, BitwiseIdenticalAcrossThreadCounts) {
  const Case cases[] = {{false, true, 1024, 512, 2048, 0},  {false, false, 1024, 1536, 512, 0},
                        {true, false, 512, 512, 1024, 0},   {true, false, 2048, 512, 1024, 0},
                        {true, true, 777, 555, 1333, 3},    {false, true, 40, 900, 700, 1},
                        {false, true, 1100, 1030, 1030, 2}, {true, false, 130, 520, 300, 1}};
  for (const Case& c : cases) {
    for (float beta : {0.f, 1.f}) {
      const std::vector<float> one = run_with_threads(c, beta, 1);
      const std::vector<float> two = run_with_threads(c, beta, 2);
      EXPECT_TRUE(bitwise_equal(one, two, c.str() + " beta=" + std::to_string(beta)));
    }
  }
}

// gemm called from inside a caller's parallel region (e.g. one call per attention head) must give
// the same bits as a top-level call.
TEST(Gemm, SameResultInsideCallerParallelRegion) {
  const Case c{false, true, 300, 257, 513, 0};
  const std::vector<float> top = run_with_threads(c, 0.f, 2);
  std::vector<std::vector<float>> inner(2);
#pragma omp parallel for num_threads(2) schedule(static)
  for (int r = 0; r < 2; ++r) inner[r] = run_with_threads(c, 0.f, 2);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(bitwise_equal(top, inner[r], "caller's thread " + std::to_string(r)));
}

// gemm_bias is, bit for bit, "set every row of C to the bias, then gemm with alpha = beta = 1" —
// the unfused composition — for 1 and 2 threads, on row-paneled, column-paneled (M < 128), serial
// and empty-reduction shapes with padded C (the padding must stay untouched); C starts as NaN, which
// must not leak in; a null bias is gemm with beta = 0.
TEST(GemmBias, BitwiseThePresetThenAccumulateComposition) {
  const Case cases[] = {{false, true, 1024, 1536, 512, 0}, {false, true, 40, 900, 700, 2},
                        {false, false, 65, 130, 257, 1},   {true, true, 17, 33, 9, 3},
                        {false, true, 5, 7, 0, 1}};
  for (const Case& c : cases) {
    Rng rng(11);
    Mat A(c.ta ? c.K : c.M, c.ta ? c.M : c.K, c.pad, kNaN, rng);
    Mat B(c.tb ? c.N : c.K, c.tb ? c.K : c.N, c.pad, kNaN, rng);
    Mat bias(1, c.N, 0, 0.f, rng);
    Mat want(c.M, c.N, c.pad, -7.f, rng);
    for (int64_t i = 0; i < c.M; ++i)
      std::memcpy(&want.at(i, 0), bias.v.data(), sizeof(float) * c.N);
    gemm(c.ta, c.tb, c.M, c.N, c.K, 1.f, A.v.data(), A.ld, B.v.data(), B.ld, 1.f, want.v.data(),
         want.ld);
    Mat plain(c.M, c.N, c.pad, -7.f, rng);
    gemm(c.ta, c.tb, c.M, c.N, c.K, 1.f, A.v.data(), A.ld, B.v.data(), B.ld, 0.f, plain.v.data(),
         plain.ld);
    // NaN where C's elements are, the padding as in want and plain.
    auto garbage_c = [&] {
      Mat m(c.M, c.N, c.pad, -7.f, rng);
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) m.at(i, j) = kNaN;
      return m;
    };
    const int saved = omp_get_max_threads();
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      Mat got = garbage_c();
      gemm_bias(c.ta, c.tb, c.M, c.N, c.K, A.v.data(), A.ld, B.v.data(), B.ld, bias.v.data(),
                got.v.data(), got.ld);
      EXPECT_TRUE(bitwise_equal(got.v, want.v, c.str() + " threads=" + std::to_string(threads)));
      Mat nobias = garbage_c();
      gemm_bias(c.ta, c.tb, c.M, c.N, c.K, A.v.data(), A.ld, B.v.data(), B.ld, nullptr,
                nobias.v.data(), nobias.ld);
      EXPECT_TRUE(bitwise_equal(nobias.v, plain.v, c.str() + " threads=" + std::to_string(threads) + " (no bias)"));
    }
    omp_set_num_threads(saved);
  }
}

}  // namespace
}  // namespace tfm::kernels
