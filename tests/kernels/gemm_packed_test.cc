// tests/kernels/gemm_packed_test.cc — gemm_packed (oneDNN matmul on packed weights, f32 and bf16)
// and its scalar twin against a double reference, the bf16 rounding rule, padded strides, the
// packed copy's independence from W, and bitwise thread-count independence; int8 against its
// scalar twin bit for bit (its sums are exact int32, so every path must give the same bits; its
// accuracy bound is tested on the Linear, tests/ops/inference_test.cc).
//
// Tolerance. For one output c_ij = Σ_k â_ik ŵ_jk + b_j, where â, ŵ are the inputs as the precision
// rounds them (f32: unchanged; bf16: float_to_bf16), every product â·ŵ is exact in float32 (bf16
// significands have 8 bits, their product 16), and any order of the K sums plus the bias add
// rounds at most K + 1 times, so
//   |ĉ − c| ≤ γ_{K+1} · (Σ_k |â_ik ŵ_jk| + |b_j|),   γ_n = n·u/(1 − n·u), u = 2^-24,
// against c computed in double from the same rounded inputs. That holds for the scalar twin and
// for oneDNN alike (f32: FMA or separate multiply-add, either within the bound; bf16: AMX/AVX512-BF16
// dot products accumulate in float32). The inputs are in [−1, 1] and never subnormal, so the
// bf16 units' flush-to-zero of subnormals plays no part.
#include "kernels/gemm_packed.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/gemm_bf16.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace tfm::kernels {
namespace {

using testing::bitwise_equal;
using testing::close_abs;
using testing::Rng;

double gamma_f(int64_t n) {
  const double u = FLT_EPSILON / 2.0;
  return double(n) * u / (1.0 - double(n) * u);
}

float from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

TEST(Bf16, RoundsToNearestEvenAndKeepsSpecials) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xC000);
  // 1 + 2^-8 is halfway between bf16 1 (0x3F80) and 1 + 2^-7 (0x3F81): ties to the even 0x3F80.
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808000u)), 0x3F80);
  // 1 + 3·2^-8 is halfway between 0x3F81 and 0x3F82: ties to the even 0x3F82.
  EXPECT_EQ(float_to_bf16(from_bits(0x3F818000u)), 0x3F82);
  // Just above and below the halfway point.
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808001u)), 0x3F81);
  EXPECT_EQ(float_to_bf16(from_bits(0x3F817FFFu)), 0x3F81);
  // Overflow rounds to inf; inf stays inf; NaN stays NaN, even one whose payload is in the low bits
  // only (adding the rounding bias to it would otherwise produce inf).
  EXPECT_EQ(float_to_bf16(FLT_MAX), 0x7F80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7F800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // Widening is exact: every bf16 round-trips.
  for (uint32_t h = 0; h < 0x10000u; h += 7) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(float_to_bf16(f), h);
    }
  }
  // convert_rows_to_bf16 agrees with the scalar rule on a strided block.
  std::vector<float> src = {1.0f, from_bits(0x3F818000u), 9.f, -0.5f, 3.14159f, 9.f};
  std::vector<uint16_t> dst(4);
  convert_rows_to_bf16(src.data(), 3, 2, 2, dst.data());
  EXPECT_EQ(dst[0], 0x3F80);
  EXPECT_EQ(dst[1], 0x3F82);
  EXPECT_EQ(dst[2], float_to_bf16(-0.5f));
  EXPECT_EQ(dst[3], float_to_bf16(3.14159f));
}

// The dispatched conversion (AVX-512 body on this CPU) is bitwise the scalar twin on every kind of
// float: random bit patterns (NaNs with any payload, ±inf, denormals, halfway cases), dense and
// strided blocks, widths that are not multiples of 16; and the AVX2 rounding of rows (widened back to float).
TEST(Bf16, ConvertRowsMatchesScalarTwinBitwise) {
  Rng rng(12345);
  const uint32_t specials[] = {0x7F800000u, 0xFF800000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FC00000u, 0x00000001u,
                               0x807FFFFFu, 0x3F808000u, 0x3F818000u, 0x7F7FFFFFu, 0x7F7F8000u, 0x00000000u};
  for (int64_t K : {1, 15, 16, 17, 100}) {
    for (int64_t lds : {K, K + 3}) {
      const int64_t m = 7;
      std::vector<float> src(static_cast<size_t>(m * lds));
      for (size_t i = 0; i < src.size(); ++i)
        src[i] = from_bits(i % 5 == 0 ? specials[(i / 5) % std::size(specials)] : rng.bits());
      std::vector<uint16_t> fast(static_cast<size_t>(m * K), 0xAAAA), slow(fast.size(), 0x5555);
      convert_rows_to_bf16(src.data(), lds, m, K, fast.data());
      convert_rows_to_bf16_scalar(src.data(), lds, m, K, slow.data());
      ASSERT_TRUE(bitwise_equal(fast, slow, "K " + std::to_string(K) + " lds " + std::to_string(lds), {m, K}));
      if (!cpu_has_avx2()) continue;
      // The AVX2 products' rounding of their source rows: the same values, widened back to float.
      std::vector<float> widened(fast.size(), -7.0f), want(fast.size());
      round_rows_to_bf16_avx2(src.data(), lds, m, K, widened.data());
      for (size_t i = 0; i < want.size(); ++i) want[i] = bf16_to_float(slow[i]);
      ASSERT_TRUE(bitwise_equal(widened, want, "AVX2 K " + std::to_string(K) + " lds " + std::to_string(lds)));
    }
  }
}

struct Problem {
  int64_t M, N, K, pad;  // pad: extra columns in A's and C's rows and W's rows
  bool bias;
  std::string str() const {
    return "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
           " pad=" + std::to_string(pad) + (bias ? " bias" : "");
  }
};

float rounded(float x, MatmulPrecision p) {
  return p == MatmulPrecision::MATMUL_BF16 ? bf16_to_float(float_to_bf16(x)) : x;
}

// Checks C (M, N at ldc) against the double reference on the rounded inputs within
// γ_{K+1}·(Σ|â ŵ| + |b|); the padding of C must still hold `sentinel`.
void expect_within_bound(const Problem& pb, MatmulPrecision prec, const std::vector<float>& A,
                         const std::vector<float>& W, const std::vector<float>& b,
                         const std::vector<float>& C, float sentinel, const std::string& what) {
  const int64_t ld = pb.K + pb.pad, ldc = pb.N + pb.pad;
  std::vector<float> got, padding;
  std::vector<double> exact, tol;
  for (int64_t i = 0; i < pb.M; ++i) {
    for (int64_t j = 0; j < pb.N; ++j) {
      double e = pb.bias ? double(b[j]) : 0.0, mag = pb.bias ? std::fabs(double(b[j])) : 0.0;
      for (int64_t k = 0; k < pb.K; ++k) {
        const double p = double(rounded(A[i * ld + k], prec)) * double(rounded(W[j * ld + k], prec));
        e += p;
        mag += std::fabs(p);
      }
      got.push_back(C[i * ldc + j]);
      exact.push_back(e);
      tol.push_back(gamma_f(pb.K + 1) * mag + FLT_MIN);
    }
    padding.insert(padding.end(), C.begin() + i * ldc + pb.N, C.begin() + (i + 1) * ldc);
  }
  EXPECT_TRUE(close_abs(got, exact, tol, what + " " + pb.str(), {pb.M, pb.N}));
  EXPECT_TRUE(bitwise_equal(padding, std::vector<float>(padding.size(), sentinel),
                            what + " " + pb.str() + ": padding of C"));
}

// Odd sizes, single rows (decoding), sizes above the serial threshold with a ragged last panel,
// and the transformer's own widths.
const Problem kProblems[] = {
    {1, 1, 1, 0, false},    {1, 17, 3, 2, true},     {5, 33, 70, 3, true},   {16, 64, 64, 0, false},
    {17, 100, 33, 1, true}, {100, 130, 257, 4, true}, {300, 96, 128, 0, true}, {1000, 70, 40, 5, false},
    {520, 200, 512, 0, true}, {129, 1536, 512, 0, true},
    // Few rows and a weight large enough for column slabs (packed_column_slabs), one ragged.
    {1, 1000, 300, 1, true}, {3, 2100, 520, 2, true}, {16, 1536, 512, 0, false}};

std::vector<float> random_matrix(int64_t rows, int64_t cols, int64_t ld, Rng& rng) {
  // Padding is NaN: reading it would poison the result.
  std::vector<float> m(static_cast<size_t>(std::max<int64_t>(rows * ld, 1)), std::numeric_limits<float>::quiet_NaN());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) m[i * ld + j] = rng.uniform(-1.f, 1.f);
  return m;
}

TEST(GemmPacked, FastAndScalarTwinWithinBoundOfDoubleReference) {
  Rng rng(77);
  const float sentinel = -7.0f;
  for (const auto prec : {MatmulPrecision::MATMUL_F32, MatmulPrecision::MATMUL_BF16}) {
    const std::string name = prec == MatmulPrecision::MATMUL_BF16 ? "bf16" : "f32";
    for (const Problem& pb : kProblems) {
      const int64_t ld = pb.K + pb.pad, ldc = pb.N + pb.pad;
      const std::vector<float> A = random_matrix(pb.M, pb.K, ld, rng);
      std::vector<float> W = random_matrix(pb.N, pb.K, ld, rng);
      const std::vector<float> b = random_matrix(1, pb.N, pb.N, rng);
      const auto packed = pack_weight(W.data(), pb.N, pb.K, ld, prec);
      // The fast path really is the one expected (a silent fallback would still pass the bound): on AVX-512,
      // oneDNN's for f32, and for bf16 (oneDNN 2.6 has bf16 matmuls from avx512_core on); with AVX2 alone, the
      // AVX2 products' own layout for both (the Avx2* tests below).
      const bool avx2 = !force_scalar() && prec != MatmulPrecision::MATMUL_INT8 && cpu_has_avx2() && !cpu_has_avx512();
      const bool onednn = !force_scalar() && !avx2 && (prec == MatmulPrecision::MATMUL_F32 || cpu_has_avx512());
      EXPECT_EQ(packed_by_onednn(*packed), onednn) << name << " " << pb.str();
      std::vector<float> C(static_cast<size_t>(pb.M * ldc), sentinel), Cs = C;
      for (int64_t i = 0; i < pb.M; ++i)
        for (int64_t j = 0; j < pb.N; ++j) C[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();  // overwritten
      gemm_packed(pb.M, A.data(), ld, *packed, pb.bias ? b.data() : nullptr, C.data(), ldc);
      expect_within_bound(pb, prec, A, W, b, C, sentinel, name + " gemm_packed");
      gemm_packed_scalar(pb.M, pb.N, pb.K, A.data(), ld, W.data(), ld, pb.bias ? b.data() : nullptr,
                         Cs.data(), ldc, prec);
      expect_within_bound(pb, prec, A, W, b, Cs, sentinel, name + " gemm_packed_scalar");
      // The packed copy does not refer to W: scribbling over W changes nothing.
      std::vector<float> C2(C.size(), sentinel);
      std::fill(W.begin(), W.end(), 1e30f);
      gemm_packed(pb.M, A.data(), ld, *packed, pb.bias ? b.data() : nullptr, C2.data(), ldc);
      EXPECT_TRUE(bitwise_equal(C, C2, name + " " + pb.str() + ": W overwritten after packing"));
    }
  }
}

TEST(GemmPacked, Int8EqualsScalarTwinBitwise) {
  Rng rng(78);
  const float sentinel = -7.0f;
  for (const Problem& pb : kProblems) {
    const int64_t ld = pb.K + pb.pad, ldc = pb.N + pb.pad;
    const std::vector<float> A = random_matrix(pb.M, pb.K, ld, rng);
    std::vector<float> W = random_matrix(pb.N, pb.K, ld, rng);
    const std::vector<float> b = random_matrix(1, pb.N, pb.N, rng);
    const auto packed = pack_weight(W.data(), pb.N, pb.K, ld, MatmulPrecision::MATMUL_INT8);
    // oneDNN exactly where the CPU has int8 dot products, else the AVX2 products where there is AVX2 (a silent
    // fallback would pass too).
    EXPECT_EQ(packed_by_onednn(*packed), cpu_has_int8_dot()) << pb.str();
    EXPECT_EQ(packed_for_avx2(*packed), cpu_has_avx2() && !cpu_has_int8_dot()) << pb.str();
    std::vector<float> C(static_cast<size_t>(pb.M * ldc), sentinel), Cs = C;
    gemm_packed(pb.M, A.data(), ld, *packed, pb.bias ? b.data() : nullptr, C.data(), ldc);
    gemm_packed_scalar(pb.M, pb.N, pb.K, A.data(), ld, W.data(), ld, pb.bias ? b.data() : nullptr, Cs.data(),
                       ldc, MatmulPrecision::MATMUL_INT8);
    EXPECT_TRUE(bitwise_equal(C, Cs, "int8 " + pb.str()));
    std::fill(W.begin(), W.end(), 1e30f);  // the packed copy does not refer to W
    std::vector<float> C2(C.size(), sentinel);
    gemm_packed(pb.M, A.data(), ld, *packed, pb.bias ? b.data() : nullptr, C2.data(), ldc);
    EXPECT_TRUE(bitwise_equal(C, C2, "int8 " + pb.str() + ": W overwritten after packing"));
  }
}

TEST(GemmPacked, Bf16DiffersFromF32ByTheRoundingOfItsInputs) {
  // Guards against a bf16 path that silently computes in float32 (it would pass the bound above
  // only if the rounding were skipped on both sides; here the two must differ measurably).
  Rng rng(5);
  const int64_t M = 64, N = 64, K = 256;
  const std::vector<float> A = random_matrix(M, K, K, rng), W = random_matrix(N, K, K, rng);
  std::vector<float> c32(M * N), c16(M * N);
  gemm_packed(M, A.data(), K, *pack_weight(W.data(), N, K, K, MatmulPrecision::MATMUL_F32), nullptr, c32.data(), N);
  gemm_packed(M, A.data(), K, *pack_weight(W.data(), N, K, K, MatmulPrecision::MATMUL_BF16), nullptr, c16.data(), N);
  double max_diff = 0;
  for (int64_t i = 0; i < M * N; ++i) max_diff = std::max(max_diff, std::fabs(double(c32[i]) - c16[i]));
  EXPECT_GT(max_diff, 1e-4);  // bf16 rounding (2^-9 relative) of 256 products of size ~1/3
  EXPECT_LT(max_diff, 0.5);
}

TEST(GemmPacked, FewRowsOfALargeWeightTakeColumnSlabs) {
  // Where oneDNN packs, a large weight is cut into an even count of slabs (a fallback to one call
  // would pass the bounds above unseen); small weights and the scalar path keep one call.
  Rng rng(9);
  const std::vector<float> W = random_matrix(2100, 520, 520, rng);
  const auto f32 = pack_weight(W.data(), 2100, 520, 520, MatmulPrecision::MATMUL_F32);
  const auto bf16 = pack_weight(W.data(), 2100, 520, 520, MatmulPrecision::MATMUL_BF16);
  const auto small = pack_weight(W.data(), 64, 520, 520, MatmulPrecision::MATMUL_F32);
  EXPECT_EQ(packed_column_slabs(*small), 0);
  if (force_scalar()) {
    EXPECT_EQ(packed_column_slabs(*f32), 0);
    return;
  }
  // The layouts with whole column blocks one after another: oneDNN's AVX-512 kernels' (a CPU with
  // AVX-512 but not AVX512-BF16 runs bf16 on a plain layout: no slabs). Five rows: fewer take the row
  // kernel where it reads the layout (RowKernelEqualsItsTwinBitwise).
  const std::vector<float> A = random_matrix(5, 520, 520, rng);
  std::vector<float> C(5 * 2100);
  if (cpu_has_avx512()) {
    EXPECT_EQ(packed_column_slabs(*f32), 6);  // 4.4 MB: ⌈4.4 / 2⌉ pairs of about 1 MiB
    gemm_packed(5, A.data(), 520, *f32, nullptr, C.data(), 2100);
    EXPECT_EQ(gemm_packed_slab_runs(*f32), 1);  // the call took them
    gemm_packed(17, random_matrix(17, 520, 520, rng).data(), 520, *f32, nullptr,
                std::vector<float>(17 * 2100).data(), 2100);
    EXPECT_EQ(gemm_packed_slab_runs(*f32), 1);  // more than 16 rows: row panels
  }
  if (cpu_has_bf16_dot()) {
    EXPECT_EQ(packed_column_slabs(*bf16), 4);  // 2.2 MB
    gemm_packed(5, A.data(), 520, *bf16, nullptr, C.data(), 2100);
    EXPECT_EQ(gemm_packed_slab_runs(*bf16), 1);
  }
  if (cpu_has_int8_dot()) {
    const auto int8 = pack_weight(W.data(), 2100, 520, 520, MatmulPrecision::MATMUL_INT8);
    EXPECT_EQ(packed_column_slabs(*int8), 2);
    gemm_packed(5, A.data(), 520, *int8, nullptr, C.data(), 2100);
    EXPECT_EQ(gemm_packed_slab_runs(*int8), 1);
  }
  // Three column blocks make two slabs, not three (two threads would share three unevenly).
  const std::vector<float> narrow = random_matrix(130, 4096, 4096, rng);
  if (cpu_has_avx512()) {
    EXPECT_EQ(packed_column_slabs(*pack_weight(narrow.data(), 130, 4096, 4096, MatmulPrecision::MATMUL_F32)), 2);
  }
}

TEST(GemmPacked, PrimitivesOfManyRowCountsStayBoundedAndRecomputeTheSame) {
  // A service's batches: a new row count at nearly every call. The weight keeps the primitives it used
  // last (at most 32); one dropped and made again computes the same bits.
  Rng rng(13);
  const int64_t N = 96, K = 80;
  const std::vector<float> W = random_matrix(N, K, K, rng);
  const std::vector<float> bias = random_matrix(1, N, N, rng);
  for (const MatmulPrecision p :
       {MatmulPrecision::MATMUL_F32, MatmulPrecision::MATMUL_BF16, MatmulPrecision::MATMUL_INT8}) {
    SCOPED_TRACE(static_cast<int>(p));
    const auto w = pack_weight(W.data(), N, K, K, p);
    const std::vector<float> A = random_matrix(300, K, K, rng);
    std::vector<float> first(5 * N), again(5 * N), c(300 * N);
    gemm_packed(5, A.data(), K, *w, bias.data(), first.data(), N);
    for (int64_t M = 6; M <= 300; ++M) gemm_packed(M, A.data(), K, *w, bias.data(), c.data(), N);
    EXPECT_LE(gemm_packed_cached_primitives(*w), size_t{32});
    if (packed_by_onednn(*w)) {
      EXPECT_GT(gemm_packed_cached_primitives(*w), size_t{8});  // it does keep some
    }
    gemm_packed(5, A.data(), K, *w, bias.data(), again.data(), N);
    EXPECT_EQ(first, again);
  }
}

TEST(GemmPacked, ColumnSlabsComputeWhatTheWholeWeightComputes) {
  // A 21-row product runs as row panels of 16 and 5 (no slabs), its last five rows through the whole
  // weight's five-row primitive; the same rows alone go through the slabs: the same bits, since each
  // slab is the whole layout's own blocks.
  Rng rng(10);
  const int64_t N = 2100, K = 520;
  ASSERT_EQ(gemm_packed_panel_rows(21, N, K), 16);
  const std::vector<float> A = random_matrix(21, K, K, rng), W = random_matrix(N, K, K, rng),
                           b = random_matrix(1, N, N, rng);
  for (const auto prec : {MatmulPrecision::MATMUL_F32, MatmulPrecision::MATMUL_BF16, MatmulPrecision::MATMUL_INT8}) {
    const auto packed = pack_weight(W.data(), N, K, K, prec);
    std::vector<float> c21(21 * N), c5(5 * N);
    gemm_packed(21, A.data(), K, *packed, b.data(), c21.data(), N);
    gemm_packed(5, A.data() + 16 * K, K, *packed, b.data(), c5.data(), N);
    // The five-row product really took the slabs, where the layout has them.
    EXPECT_EQ(gemm_packed_slab_runs(*packed), packed_column_slabs(*packed) > 0 ? 1 : 0);
    EXPECT_TRUE(bitwise_equal(c5, std::vector<float>(c21.begin() + 16 * N, c21.end()),
                              "precision " + std::to_string(int(prec))));
  }
}

TEST(GemmPacked, RowKernelEqualsItsTwinBitwise) {
  // Products of at most kRowKernelRows rows run in the row kernel where it reads oneDNN's layout (f32
  // wherever oneDNN packs on AVX-512; bf16 where the CPU has bf16 dot products, whose layout pairs k; int8
  // where it has int8 dot products, k in fours): each f32 or bf16 output one fma chain, k ascending, so the
  // kernel equals gemm_rows_scalar bit for bit; int8 sums are exact, equal to gemm_packed_scalar's int8
  // twin — odd K (the last pair or four part padding), a ragged last block of columns, padded strides, with
  // and without bias, small weights (the calling thread) and large ones (the blocks over the threads), one
  // to four rows.
  Rng rng(11);
  struct Shape { int64_t N, K, pad; bool bias; };
  const Shape shapes[] = {{1, 1, 0, true}, {17, 3, 2, false}, {64, 64, 0, true}, {100, 37, 3, true},
                          {130, 257, 1, false}, {2100, 520, 0, true}, {1000, 777, 5, true}};
  for (const auto prec : {MatmulPrecision::MATMUL_F32, MatmulPrecision::MATMUL_BF16, MatmulPrecision::MATMUL_INT8}) {
    const bool expect_kernel = cpu_has_avx512() && !force_scalar() &&
                               (prec == MatmulPrecision::MATMUL_F32 ||
                                (prec == MatmulPrecision::MATMUL_BF16 ? cpu_has_bf16_dot() : cpu_has_int8_dot()));
    for (const Shape& sh : shapes) {
      const int64_t ld = sh.K + sh.pad, ldc = sh.N + sh.pad;
      const std::vector<float> W = random_matrix(sh.N, sh.K, ld, rng), b = random_matrix(1, sh.N, sh.N, rng);
      const auto packed = pack_weight(W.data(), sh.N, sh.K, ld, prec);
      const std::string what = std::string(prec == MatmulPrecision::MATMUL_F32    ? "f32"
                                           : prec == MatmulPrecision::MATMUL_BF16 ? "bf16"
                                                                                  : "int8") + " N=" +
                               std::to_string(sh.N) + " K=" + std::to_string(sh.K);
      EXPECT_EQ(packed_for_row_kernel(*packed), expect_kernel) << what;
      for (int64_t M = 1; M <= kRowKernelRows; ++M) {
        const std::vector<float> A = random_matrix(M, sh.K, ld, rng);
        std::vector<float> C(static_cast<size_t>(M * ldc), -7.0f), Cs = C;
        const int64_t runs = gemm_packed_row_kernel_runs(*packed);
        gemm_packed(M, A.data(), ld, *packed, sh.bias ? b.data() : nullptr, C.data(), ldc);
        EXPECT_EQ(gemm_packed_row_kernel_runs(*packed), runs + (expect_kernel ? 1 : 0)) << what;
        if (!expect_kernel) continue;
        if (prec == MatmulPrecision::MATMUL_INT8)
          gemm_packed_scalar(M, sh.N, sh.K, A.data(), ld, W.data(), ld, sh.bias ? b.data() : nullptr, Cs.data(), ldc,
                             prec);
        else
          gemm_rows_scalar(M, sh.N, sh.K, A.data(), ld, W.data(), ld, sh.bias ? b.data() : nullptr, Cs.data(), ldc,
                           prec);
        EXPECT_TRUE(bitwise_equal(C, Cs, what + " M=" + std::to_string(M)));  // padding of C untouched too
      }
    }
  }
  // More rows than kRowKernelRows take oneDNN's panels (or the slabs).
  const std::vector<float> W = random_matrix(64, 64, 64, rng);
  const auto packed = pack_weight(W.data(), 64, 64, 64, MatmulPrecision::MATMUL_F32);
  std::vector<float> C(5 * 64);
  gemm_packed(5, random_matrix(5, 64, 64, rng).data(), 64, *packed, nullptr, C.data(), 64);
  EXPECT_EQ(gemm_packed_row_kernel_runs(*packed), 0);
}

// The row kernel's bodies on blocks of 16, 32, 48 and 64 columns (oneDNN picks 64 for the reference panel
// on the CPUs CI runs on; an AMX machine may pick 32 or 48), on a weight laid out here by PackedRows'
// formula: f32 and bf16 against gemm_rows_scalar bit for bit, int8's int32 sums against a plain loop. The
// padding (K to a whole K block, N to a whole column block) is NaN for f32 and bf16, whose kernels must not
// read it into a kept output, and zero for int8, as oneDNN leaves it (the kernel reads whole fours of k).
TEST(GemmPacked, RowKernelBodiesOnEveryColumnBlock) {
  if (!cpu_has_avx512() || force_scalar()) GTEST_SKIP() << "no AVX-512 row kernel";
  Rng rng(12);
  for (const int64_t nb : {16, 32, 48, 64})
    for (const auto& [N, K] : {std::array<int64_t, 2>{70, 37}, {16, 64}, {131, 5}}) {
      const std::vector<float> W = random_matrix(N, K, K, rng), b = random_matrix(1, N, N, rng);
      const int64_t blocks = (N + nb - 1) / nb;
      for (const int64_t group : {1, 2, 4}) {
        if (group == 4 && !cpu_has_int8_dot()) continue;
        const int64_t kpad = (K + 16 * group - 1) / (16 * group) * (16 * group), stride = kpad * nb;
        std::vector<float> wf(static_cast<size_t>(blocks * stride), std::numeric_limits<float>::quiet_NaN());
        std::vector<uint16_t> wh(wf.size(), uint16_t{0x7FC0});  // bf16 NaN
        std::vector<int8_t> wq(wf.size(), int8_t{0});
        std::vector<int8_t> q(static_cast<size_t>(N * K));
        std::vector<float> scale(static_cast<size_t>(N));
        quantize_rows_s8(W.data(), N, K, K, q.data(), scale.data());
        for (int64_t n = 0; n < N; ++n)
          for (int64_t k = 0; k < K; ++k) {
            const size_t at = static_cast<size_t>((n / nb) * stride + (k / group) * nb * group + (n % nb) * group + k % group);
            wf[at] = W[n * K + k];
            wh[at] = float_to_bf16(W[n * K + k]);
            wq[at] = q[n * K + k];
          }
        const void* data = group == 1 ? static_cast<const void*>(wf.data())
                           : group == 2 ? static_cast<const void*>(wh.data()) : static_cast<const void*>(wq.data());
        const PackedRows rows{data, N, K, nb, group, stride};
        const std::string what = "n_block " + std::to_string(nb) + " group " + std::to_string(group) + " N=" +
                                 std::to_string(N) + " K=" + std::to_string(K);
        for (int64_t M = 1; M <= kRowKernelRows; ++M) {
          const std::vector<float> A = random_matrix(M, K, K, rng);
          if (group == 4) {
            const int64_t K4 = (K + 3) / 4 * 4;
            std::vector<uint8_t> qa(static_cast<size_t>(M * K4), 0);
            for (size_t i = 0; i < qa.size(); ++i)
              if (static_cast<int64_t>(i) % K4 < K) qa[i] = static_cast<uint8_t>(rng.uniform(0.f, 255.99f));
            std::vector<int32_t> acc(static_cast<size_t>(M * N), -1), want(acc.size(), 0);
            gemm_rows_s8_avx512vnni(rows, M, qa.data(), K4, acc.data(), N, 0, blocks);
            for (int64_t i = 0; i < M; ++i)
              for (int64_t n = 0; n < N; ++n)
                for (int64_t k = 0; k < K; ++k) want[i * N + n] += int32_t(qa[i * K4 + k]) * int32_t(q[n * K + k]);
            EXPECT_EQ(acc, want) << what << " M=" << M;
            continue;
          }
          std::vector<float> a = A;  // bf16: the rows as the kernel takes them, rounded
          if (group == 2)
            for (float& x : a) x = bf16_to_float(float_to_bf16(x));
          std::vector<float> C(static_cast<size_t>(M * N), -7.0f), Cs = C;
          gemm_rows_avx512(rows, M, a.data(), K, b.data(), C.data(), N, 0, blocks);
          gemm_rows_scalar(M, N, K, A.data(), K, W.data(), K, b.data(), Cs.data(), N,
                           group == 1 ? MatmulPrecision::MATMUL_F32 : MatmulPrecision::MATMUL_BF16);
          EXPECT_TRUE(bitwise_equal(C, Cs, what + " M=" + std::to_string(M)));
        }
      }
    }
}

// The AVX2 body (run wherever the CPU has AVX2, so AVX-512 machines test it too) on pack_rows16's layout,
// against gemm_rows_scalar bit for bit: f32 and bf16 (the weight rounded at packing, the rows by the caller),
// one to 20 rows and a panel of 130 (tiles of 6 rows and their remainders), K across the passes of 256 k
// (1, 255, 256, 257, 600), a ragged last block of columns, padded strides (C's padding untouched), with and
// without bias, and a share of the blocks [b0, b1) (the other columns untouched).
TEST(GemmPacked, Avx2BodyEqualsTheRowTwinBitwise) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 (or TFM_FORCE_SCALAR)";
  Rng rng(13);
  struct Shape {
    int64_t N, K, pad;
    bool bias;
  };
  const Shape shapes[] = {{1, 1, 0, true},    {16, 255, 1, false}, {17, 256, 0, true},
                          {40, 257, 3, true}, {33, 600, 2, false}, {100, 7, 0, true}};
  for (const bool bf16 : {false, true})
    for (const Shape& sh : shapes) {
      const int64_t ld = sh.K + sh.pad, ldc = sh.N + sh.pad, blocks = (sh.N + 15) / 16;
      const std::vector<float> W = random_matrix(sh.N, sh.K, ld, rng), b = random_matrix(1, sh.N, sh.N, rng);
      std::vector<float> packed(static_cast<size_t>(blocks * 16 * sh.K), std::numeric_limits<float>::quiet_NaN());
      pack_rows16(W.data(), sh.N, sh.K, ld, bf16, packed.data());
      const PackedRows rows{packed.data(), sh.N, sh.K, 16, 1, 16 * sh.K};
      const auto prec = bf16 ? MatmulPrecision::MATMUL_BF16 : MatmulPrecision::MATMUL_F32;
      for (const int64_t M : {1, 2, 5, 6, 7, 13, 20, 130, 150}) {  // 150: two of the kernel's blocks of rows
        const std::string what = std::string(bf16 ? "bf16" : "f32") + " M=" + std::to_string(M) +
                                 " N=" + std::to_string(sh.N) + " K=" + std::to_string(sh.K);
        std::vector<float> A = random_matrix(M, sh.K, ld, rng), a = A;
        if (bf16)
          for (float& x : a) x = bf16_to_float(float_to_bf16(x));
        std::vector<float> C(static_cast<size_t>(M * ldc), -7.0f), Cs = C;
        gemm_packed_avx2(rows, M, a.data(), ld, sh.bias ? b.data() : nullptr, C.data(), ldc, 0, blocks);
        gemm_rows_scalar(M, sh.N, sh.K, A.data(), ld, W.data(), ld, sh.bias ? b.data() : nullptr, Cs.data(), ldc, prec);
        EXPECT_TRUE(bitwise_equal(C, Cs, what));
        if (blocks < 2) continue;
        std::vector<float> part(C.size(), -7.0f);  // blocks [1, blocks): columns from 16 on
        gemm_packed_avx2(rows, M, a.data(), ld, sh.bias ? b.data() : nullptr, part.data(), ldc, 1, blocks);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t n = 0; n < ldc; ++n)
            ASSERT_EQ(std::bit_cast<uint32_t>(part[i * ldc + n]),
                      std::bit_cast<uint32_t>(n >= 16 && n < sh.N ? C[i * ldc + n] : -7.0f))
                << what << " blocks from 1, row " << i << " column " << n;
        // Block [0, 1) alone: columns 0–15, and nothing of the block after it.
        std::vector<float> first(C.size(), -7.0f);
        gemm_packed_avx2(rows, M, a.data(), ld, sh.bias ? b.data() : nullptr, first.data(), ldc, 0, 1);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t n = 0; n < ldc; ++n)
            ASSERT_EQ(std::bit_cast<uint32_t>(first[i * ldc + n]),
                      std::bit_cast<uint32_t>(n < 16 ? C[i * ldc + n] : -7.0f))
                << what << " block 0 alone, row " << i << " column " << n;
      }
    }
}

// Where the AVX2 products run (f32 and bf16: AVX2 without AVX-512; int8: AVX2 without an int8 dot product),
// every product is its twin's, bit for bit, for any rows (f32, bf16: gemm_rows_scalar; int8:
// gemm_packed_scalar's exact sums): a row gives the same bits alone, in a few rows (the columns over the
// threads) and in a tall product (row panels), on one thread or two. Elsewhere the weight is not in that
// layout.
TEST(GemmPacked, Avx2ProductsAreTheRowTwinsForAnyRows) {
  Rng rng(14);
  // 2.2 MB of f32 weight, 542 KB of int8: a few rows split the columns over the threads in every precision; K odd.
  const int64_t N = 1800, K = 301;
  const std::vector<float> W = random_matrix(N, K, K, rng), b = random_matrix(1, N, N, rng);
  for (const auto prec : {MatmulPrecision::MATMUL_F32, MatmulPrecision::MATMUL_BF16, MatmulPrecision::MATMUL_INT8}) {
    const bool int8 = prec == MatmulPrecision::MATMUL_INT8;
    const auto packed = pack_weight(W.data(), N, K, K, prec);
    const bool avx2 = cpu_has_avx2() && (int8 ? !cpu_has_int8_dot() : !cpu_has_avx512());
    EXPECT_EQ(packed_for_avx2(*packed), avx2);
    if (!avx2) continue;
    EXPECT_FALSE(packed_by_onednn(*packed));
    const int64_t M = 300;
    const std::vector<float> A = random_matrix(M, K, K, rng);
    std::vector<float> want(static_cast<size_t>(M * N));
    if (int8)
      gemm_packed_scalar(M, N, K, A.data(), K, W.data(), K, b.data(), want.data(), N, prec);
    else
      gemm_rows_scalar(M, N, K, A.data(), K, W.data(), K, b.data(), want.data(), N, prec);
    const int saved = omp_get_max_threads();
    for (const int threads : {1, 2}) {
      omp_set_num_threads(threads);
      for (const int64_t m : {int64_t{1}, int64_t{3}, int64_t{16}, int64_t{17}, M}) {
        std::vector<float> C(static_cast<size_t>(m * N));
        gemm_packed(m, A.data(), K, *packed, b.data(), C.data(), N);
        const std::vector<float> head(want.begin(), want.begin() + m * N);
        EXPECT_TRUE(bitwise_equal(C, head, "rows " + std::to_string(m) + ", threads " + std::to_string(threads)));
      }
    }
    omp_set_num_threads(saved);
  }
}

// The AVX2 int8 body (gemm_packed_s8_avx2) against the exact int32 sums, on pack_rows16_s8's layout: weights and
// rows at the ends of their ranges (±127, 0 and 255: every product and pair sum at its largest), one to 20 rows
// and a panel of 130, K odd and even across the passes of 512 k (1, 2, 511, 512, 513, 1201), a ragged last
// block of columns, a padded stride of acc (its padding untouched), and a share of the blocks [b0, b1) (the
// other columns untouched).
TEST(GemmPacked, Avx2Int8BodyIsTheExactSum) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 (or TFM_FORCE_SCALAR)";
  Rng rng(15);
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {16, 2}, {17, 511}, {40, 512}, {33, 513}, {100, 1201}};
  for (const auto& [N, K] : shapes) {
    const int64_t K2 = K + (K & 1), blocks = (N + 15) / 16, ldq = K + 3, ldacc = N + 2;
    std::vector<int8_t> q(static_cast<size_t>(N * ldq), int8_t{99});  // padding never read
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        q[n * ldq + k] = static_cast<int8_t>(n % 5 == 0 ? (k % 2 ? 127 : -127) : rng.uniform_int(-127, 127));
    std::vector<int8_t> packed(static_cast<size_t>(blocks * 16 * K2), int8_t{55});
    pack_rows16_s8(q.data(), N, K, ldq, packed.data());
    const PackedRows rows{packed.data(), N, K, 16, 2, 16 * K2};
    for (const int64_t M : {1, 2, 5, 6, 7, 13, 20, 130}) {
      const std::string what = "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
      std::vector<uint8_t> qa(static_cast<size_t>(M * K));
      for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k)
          qa[i * K + k] = static_cast<uint8_t>(i % 3 == 0 ? 255 : rng.uniform_int(0, 255));
      std::vector<int16_t> a(static_cast<size_t>(M * K2), int16_t{-1});
      widen_rows_u8_avx2(qa.data(), M, K, a.data());
      std::vector<int32_t> acc(static_cast<size_t>(M * ldacc), -7), part = acc;
      gemm_packed_s8_avx2(rows, M, a.data(), K2, acc.data(), ldacc, 0, blocks);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t n = 0; n < ldacc; ++n) {
          int32_t want = -7;
          if (n < N) {
            want = 0;
            for (int64_t k = 0; k < K; ++k) want += int32_t(qa[i * K + k]) * int32_t(q[n * ldq + k]);
          }
          ASSERT_EQ(acc[i * ldacc + n], want) << what << " row " << i << " column " << n;
        }
      if (blocks < 2) continue;
      gemm_packed_s8_avx2(rows, M, a.data(), K2, part.data(), ldacc, 1, blocks);  // columns from 16 on
      for (int64_t i = 0; i < M; ++i)
        for (int64_t n = 0; n < ldacc; ++n)
          ASSERT_EQ(part[i * ldacc + n], n >= 16 && n < N ? acc[i * ldacc + n] : -7)
              << what << " blocks from 1, row " << i << " column " << n;
    }
  }
}

// An empty sum (K = 0), in whichever layout this CPU packs (oneDNN's, the AVX2 one, the plain copy): every output
// is the twin's 0 + bias, never what the buffer held, and packing does not reach oneDNN (whose primitive
// creation divides by zero there).
TEST(GemmPacked, EmptySumIsTheBias) {
  const std::vector<float> b = {1.5f, -0.0f, -2.0f}, none;
  for (const auto prec : {MatmulPrecision::MATMUL_F32, MatmulPrecision::MATMUL_BF16, MatmulPrecision::MATMUL_INT8}) {
    const auto packed = pack_weight(none.data(), 3, 0, 0, prec);
    EXPECT_FALSE(packed_by_onednn(*packed));
    for (const bool with_bias : {false, true}) {
      std::vector<float> C(6, std::numeric_limits<float>::quiet_NaN()), want(6);
      gemm_packed(2, none.data(), 0, *packed, with_bias ? b.data() : nullptr, C.data(), 3);
      gemm_packed_scalar(2, 3, 0, none.data(), 0, none.data(), 0, with_bias ? b.data() : nullptr, want.data(), 3, prec);
      EXPECT_TRUE(bitwise_equal(C, want, with_bias ? "bias" : "no bias"));
    }
  }
}

TEST(GemmPacked, PanelsAreAFunctionOfTheShapeOnly) {
  EXPECT_EQ(gemm_packed_panel_rows(1, 512, 512), 1);
  EXPECT_EQ(gemm_packed_panel_rows(16, 512, 512), 16);
  EXPECT_EQ(gemm_packed_panel_rows(1024, 2048, 512), 128);  // 8 panels
  EXPECT_EQ(gemm_packed_panel_rows(100, 512, 512), 64);     // 64 + 36
  EXPECT_EQ(gemm_packed_panel_rows(8, 8, 8), 8);            // below the serial threshold
}

TEST(GemmPacked, BitwiseIdenticalForOneAndTwoThreads) {
  Rng rng(9);
  for (const auto prec : {MatmulPrecision::MATMUL_F32, MatmulPrecision::MATMUL_BF16, MatmulPrecision::MATMUL_INT8}) {
    // Row panels (1000, 100 rows), the row kernel (1, 4 rows) and column slabs (5 rows of a weight
    // over 1 MiB, ragged N).
    for (const auto& [M, N, K] : {std::array<int64_t, 3>{1000, 384, 200}, {100, 384, 200}, {1, 2100, 520},
                                  {4, 2100, 520}, {5, 2100, 520}}) {
      const std::vector<float> A = random_matrix(M, K, K, rng), W = random_matrix(N, K, K, rng),
                               b = random_matrix(1, N, N, rng);
      const auto packed = pack_weight(W.data(), N, K, K, prec);
      std::vector<float> c1(M * N), c2(M * N);
      const int saved = omp_get_max_threads();
      omp_set_num_threads(1);
      gemm_packed(M, A.data(), K, *packed, b.data(), c1.data(), N);
      omp_set_num_threads(2);
      gemm_packed(M, A.data(), K, *packed, b.data(), c2.data(), N);
      omp_set_num_threads(saved);
      EXPECT_TRUE(bitwise_equal(c1, c2, "M=" + std::to_string(M)));
    }
  }
}

}  // namespace
}  // namespace tfm::kernels
