// tests/kernels/attention_test.cc — attention kernels (src/kernels/attention*.cc):
//   * the AVX-512 flash kernel against its scalar twin, forward (o, lse) and backward (dq, dk, dv),
//     over head widths, lengths, mask kinds and the three memory layouts; the sgemm bodies of CPUs
//     without AVX-512 (attention_gemm.cc) over the same sweeps, on every CPU, and the dispatching entry
//     points, whichever body they take on this one;
//   * the double-precision reference (attention_scalar.h) against central finite differences;
//   * a hand-checkable L = S = 1 case; fully masked rows; the vector exp in ulp;
//   * bitwise equality of the fast kernel for 1 and 2 threads (both backward threading schemes).
// To cover a new feature: add a MaskKind (and its setup in make_case), it then runs in every sweep.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/attention_scalar.h"
#include "kernels/gemm_bf16.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace tfm::kernels {
namespace {

using testing::bitwise_equal;
using testing::close_rel;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kEps = 1.1920928955078125e-07;  // float machine epsilon, 2^-23

enum class Layout { BATCH_FIRST, SEQ_FIRST, PACKED };
enum class MaskKind { NONE, MASK_2D, MASK_3D, KEY_PADDING, CAUSAL, CAUSAL_FULLY_MASKED, DROPOUT };

const char* layout_name(Layout l) {
  return l == Layout::BATCH_FIRST ? "batch_first" : l == Layout::SEQ_FIRST ? "seq_first" : "packed";
}
const char* mask_name(MaskKind m) {
  switch (m) {
    case MaskKind::NONE: return "none";
    case MaskKind::MASK_2D: return "mask2d";
    case MaskKind::MASK_3D: return "mask3d";
    case MaskKind::KEY_PADDING: return "kpm";
    case MaskKind::CAUSAL: return "causal";
    case MaskKind::CAUSAL_FULLY_MASKED: return "causal+fully_masked_rows";
    case MaskKind::DROPOUT: return "dropout0.3+kpm";
  }
  return "?";
}

// One attention problem with its own buffers; params() points an AttentionParams at them.
struct Case {
  int64_t B, H, L, S, Dh, Dv;  // Dv: value and output head width
  Layout layout;
  MaskKind kind;
  std::vector<float> qbuf, kbuf, vbuf;  // q, k, v storage (packed: all three in qbuf, (B, L, 2E + Ev))
  std::vector<float> mask, kpm;         // (L,S) or (B·H,L,S); (B,S)
  std::vector<float> dout;              // o's layout
  AttentionParams p;                    // strides and flags; pointers set by bind()
  std::vector<int64_t> dead_rows;       // (bh·L + i) of rows with every key masked

  int64_t E() const { return H * Dh; }   // q and k row width
  int64_t Ev() const { return H * Dv; }  // v and o row width
  std::string name() const {
    std::ostringstream os;
    os << "B=" << B << " H=" << H << " L=" << L << " S=" << S << " Dh=" << Dh << " Dv=" << Dv << " "
       << layout_name(layout) << " " << mask_name(kind);
    return os.str();
  }
};

// Strides for a (rows, B, E)-style layout; `row` is the distance between consecutive d-vectors.
void set_strides(Case& c) {
  AttentionParams& p = c.p;
  const int64_t E = c.E(), Ev = c.Ev();
  switch (c.layout) {
    case Layout::BATCH_FIRST:  // q (B,L,E), o (B,L,Ev); k (B,S,E), v (B,S,Ev)
      p.q_sb = c.L * E;
      p.o_sb = c.L * Ev;
      p.q_sl = p.k_sl = E;
      p.o_sl = p.v_sl = Ev;
      p.k_sb = c.S * E;
      p.v_sb = c.S * Ev;
      break;
    case Layout::SEQ_FIRST:  // q (L,B,E), o (L,B,Ev); k (S,B,E), v (S,B,Ev)
      p.q_sb = p.k_sb = E;
      p.o_sb = p.v_sb = Ev;
      p.q_sl = p.k_sl = c.B * E;
      p.o_sl = p.v_sl = c.B * Ev;
      break;
    case Layout::PACKED:  // qkv (B,L,2E+Ev), L == S; o (B,L,Ev)
      p.q_sb = p.k_sb = p.v_sb = c.L * (2 * E + Ev);
      p.q_sl = p.k_sl = p.v_sl = 2 * E + Ev;
      p.o_sb = c.L * Ev;
      p.o_sl = Ev;
      break;
  }
}

int64_t q_elems(const Case& c) {
  return c.layout == Layout::PACKED ? c.B * c.L * (2 * c.E() + c.Ev()) : c.B * c.L * c.E();
}
int64_t k_elems(const Case& c) { return c.layout == Layout::PACKED ? 0 : c.B * c.S * c.E(); }
int64_t v_elems(const Case& c) { return c.layout == Layout::PACKED ? 0 : c.B * c.S * c.Ev(); }
int64_t o_elems(const Case& c) { return c.B * c.L * c.Ev(); }

// Dv = 0: the value heads as wide as the query/key heads (Dv = Dh, AttentionParams::Dv left 0).
Case make_case(int64_t B, int64_t H, int64_t L, int64_t S, int64_t Dh, Layout layout, MaskKind kind,
               uint64_t seed, int64_t Dv = 0) {
  Case c{B, H, L, S, Dh, Dv > 0 ? Dv : Dh, layout, kind, {}, {}, {}, {}, {}, {}, {}, {}};
  AttentionParams& p = c.p;
  p.B = B, p.H = H, p.L = L, p.S = S, p.Dh = Dh, p.Dv = Dv;
  p.scale = 1.0f / std::sqrt(static_cast<float>(Dh));
  set_strides(c);
  c.qbuf = testing::random_values(q_elems(c), seed + 1);
  c.kbuf = testing::random_values(k_elems(c), seed + 2);
  c.vbuf = testing::random_values(v_elems(c), seed + 3);
  c.dout = testing::random_values(o_elems(c), seed + 4);
  // Additive masks: values in [−1, 1), and about one element in seven set to −inf.
  auto additive = [&](int64_t n, uint64_t s) {
    std::vector<float> m = testing::random_values(n, s);
    const std::vector<float> u = testing::random_values(n, s + 100, 0.0f, 1.0f);
    for (int64_t i = 0; i < n; ++i)
      if (u[i] < 1.0f / 7.0f) m[i] = -kInf;
    return m;
  };
  switch (kind) {
    case MaskKind::NONE: break;
    case MaskKind::MASK_2D:
      c.mask = additive(L * S, seed + 5);
      p.mask_sbh = 0;
      break;
    case MaskKind::MASK_3D:
      c.mask = additive(B * H * L * S, seed + 5);
      p.mask_sbh = L * S;
      break;
    case MaskKind::KEY_PADDING:
      c.kpm = additive(B * S, seed + 6);
      break;
    case MaskKind::CAUSAL: p.causal = true; break;
    case MaskKind::CAUSAL_FULLY_MASKED:
      // Causal, key 0 of batch 0 padded: query 0 of batch 0 sees only key 0, so it has no key left.
      // And the 2-D mask blocks every key of query row L/2 (for all b, h).
      p.causal = true;
      c.kpm.assign(B * S, 0.0f);
      c.kpm[0] = -kInf;
      c.mask.assign(L * S, 0.0f);
      for (int64_t j = 0; j < S; ++j) c.mask[(L / 2) * S + j] = -kInf;
      for (int64_t bh = 0; bh < B * H; ++bh) {
        if (bh / H == 0) c.dead_rows.push_back(bh * L + 0);
        if (!(bh / H == 0 && L / 2 == 0)) c.dead_rows.push_back(bh * L + L / 2);
      }
      break;
    case MaskKind::DROPOUT:
      c.kpm = additive(B * S, seed + 6);
      p.dropout_p = 0.3f;
      p.seed = 0x5EED0000 + seed;
      // Every other case puts 2³² (where dropout_hash's key changes) in the middle of the counters.
      p.offset = (seed / 10) % 2 == 0
                     ? 12345
                     : (uint64_t{1} << 32) - static_cast<uint64_t>(B * H * L * S / 2) - 7;
      break;
  }
  return c;
}

// Points p at the case's inputs and at the given outputs.
AttentionParams bind(const Case& c, float* o, float* lse) {
  AttentionParams p = c.p;
  const int64_t E = c.E();
  p.q = c.qbuf.data();
  p.k = c.layout == Layout::PACKED ? c.qbuf.data() + E : c.kbuf.data();
  p.v = c.layout == Layout::PACKED ? c.qbuf.data() + 2 * E : c.vbuf.data();
  p.mask = c.mask.empty() ? nullptr : c.mask.data();
  p.kpm = c.kpm.empty() ? nullptr : c.kpm.data();
  p.o = o;
  p.lse = lse;
  return p;
}

// Results of one forward + backward. Outputs are pre-filled with NaN so that an element the
// kernel forgets to overwrite shows up.
struct Result {
  std::vector<float> o, lse, dq, dk, dv;  // dq holds all of dqkv for the packed layout
};

// Which code computes: the twin, the entry points (the flash kernel with AVX-512, the bodies below without),
// or the bodies for CPUs without AVX-512 called directly (attention_forward_avx2, attention_backward_gemm: any
// CPU with AVX2).
enum class Body { SCALAR, DISPATCH, AVX2_GEMM };

Result run(const Case& c, Body body, const Result* forward_from = nullptr) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Result r;
  r.o.assign(o_elems(c), nan);
  r.lse.assign(c.B * c.H * c.L, nan);
  AttentionParams p = bind(c, r.o.data(), r.lse.data());
  switch (body) {
    case Body::SCALAR:
      attention_forward_scalar(p);
      break;
    case Body::DISPATCH:
      attention_forward(p);
      break;
    case Body::AVX2_GEMM:
      attention_forward_avx2(p);
      break;
  }
  // The backward reads o and lse: use forward_from's when given, so both backwards see the same.
  Result in = forward_from ? *forward_from : r;
  p.o = in.o.data();
  p.lse = in.lse.data();
  r.dq.assign(q_elems(c), nan);
  r.dk.assign(k_elems(c), nan);
  r.dv.assign(v_elems(c), nan);
  const int64_t E = c.E();
  float* dq = r.dq.data();
  float* dk = c.layout == Layout::PACKED ? dq + E : r.dk.data();
  float* dv = c.layout == Layout::PACKED ? dq + 2 * E : r.dv.data();
  switch (body) {
    case Body::SCALAR:
      attention_backward_scalar(p, c.dout.data(), dq, dk, dv);
      break;
    case Body::DISPATCH:
      attention_backward(p, c.dout.data(), dq, dk, dv);
      break;
    case Body::AVX2_GEMM:
      attention_backward_gemm(p, c.dout.data(), dq, dk, dv);
      break;
  }
  return r;
}

// Tolerances, relative to the largest magnitude of the reference output. Both kernels compute in
// float with different summation orders and exp implementations, so each can be off by its own
// first-order rounding bound:
//   * a score s = scale·Σ_d q_d k_d (|q|,|k| < 1, scale = 1/√Dh) has absolute error ≤ Dh·eps·√Dh·…
//     — we use Dh·eps·|s|max with |s|max ≤ √Dh (+1 for the mask);
//   * p = exp(s − lse) inherits that absolute error as relative error, plus ≈ S·eps from the sum
//     of S exponentials in lse and 2 ulp from exp;
//   * o = Σ_j p_j v_j adds S·eps·max|v| from the accumulation.
// So |Δo| / max|o| ≲ 2 (twins) · eps · (Dh·(√Dh+1) + 2S + 4) / (max|o| / max|v|). max|o| is a
// weighted mean of |v| ≤ 1 and can be small; we take max|o|/max|v| ≥ 1/8, valid for the random
// data used here (checked by the observed errors, which sit 10-100× below the bound).
// The gradients chain one more product of the same kind (dp = ⟨do, v⟩ over Dh, dq/dk over S or L
// terms, dv over L), and ds = p·(dp − D) cancels; we allow 4× the forward bound.
// dq and dk can cancel completely (one key: ds = p·(dp − D) = 0 exactly, so they are pure rounding
// noise), so their errors are measured relative to max(max|ref|, scale·max|dv_ref|): dv_j = Σ_i
// p_ij do_i is the same family of products p_ij·(do·v-sized terms) before the cancellation, and
// q, k, v are O(1) in these tests.
double forward_bound(const Case& c) {
  const double dh = static_cast<double>(c.Dh);
  return 2.0 * kEps * (dh * (std::sqrt(dh) + 1.0) + 2.0 * std::max(c.S, c.L) + 4.0) * 8.0;
}
double backward_bound(const Case& c) { return 4.0 * forward_bound(c); }

// With AttentionParams::bf16 both kernels multiply the same bfloat16-rounded operands with exact products
// and float sums (vdpbf16ps adds the pair's two products one after the other, the odd one first, and treats
// denormals as zero: differences of summation order and of denormals, inside the bounds above). Beyond that:
//   * the forward's probabilities are rounded at different points: the fast kernel rounds
//     e = exp(s − m_running)·keep before dividing by the row sum l, the twin p·keep = exp(s − lse)·keep. Each
//     is within u_b = 2⁻⁸ relative of the exact value, so per element
//       |Δo_id| ≤ 2·u_b·Σ_j p_ij·keep_ij·|bf16(v_jd)| ≤ 2·u_b/(1 − u_b)·o_abs_id,
//     o_abs being the twin's output on |v| (it rounds each of those terms down by at most u_b), on top of
//     the float bound (bf16_output_close);
//   * in the backward both round at the same points (the test hands both the reference's o and lse), so
//     only a value the two compute with a float-level difference that straddles a bfloat16 rounding
//     boundary (p·keep, scale·ds) can differ by one bfloat16 step: one term of one sum moved by u_b of
//     itself. That is rare and small next to the float bound, which holds for the gradients as it is:
//     backward_bound (the sweep checks it on every shape, and would not pass a lost or misplaced operand).
// lse is summed from unrounded exponentials: the float bound holds for it.
constexpr double kUb = 1.0 / 256;

// Per-element check of the bf16 forward: |got − want| ≤ 2·u_b/(1 − u_b)·o_abs + fb·max|want|.
::testing::AssertionResult bf16_output_close(const std::vector<float>& got, const std::vector<float>& want,
                                             const std::vector<float>& o_abs, double fb) {
  double max_want = 0;
  for (float w : want) max_want = std::max(max_want, std::fabs(double(w)));
  for (size_t i = 0; i < want.size(); ++i) {
    const double bound = 2 * kUb / (1 - kUb) * std::fabs(double(o_abs[i])) + fb * max_want;
    const double err = std::fabs(double(got[i]) - double(want[i]));
    if (!(err <= bound))
      return ::testing::AssertionFailure() << "o[" << i << "]: " << got[i] << " vs " << want[i] << ", error " << err
                                           << " > bound " << bound << " (o_abs " << o_abs[i] << ")";
  }
  return ::testing::AssertionSuccess();
}

// The case with |v| in place of v (the packed layout holds v in the last Ev columns of each qbuf row).
Case with_abs_v(Case c) {
  if (c.layout == Layout::PACKED) {
    const int64_t row = 2 * c.E() + c.Ev();
    for (size_t r = 0; r < c.qbuf.size(); r += static_cast<size_t>(row))
      for (int64_t d = 2 * c.E(); d < row; ++d) c.qbuf[r + static_cast<size_t>(d)] = std::fabs(c.qbuf[r + static_cast<size_t>(d)]);
  } else {
    for (float& x : c.vbuf) x = std::fabs(x);
  }
  return c;
}

void check_dead_rows(const Case& c, const Result& r, const char* who) {
  const int64_t E = c.E();
  for (int64_t row : c.dead_rows) {
    const int64_t bh = row / c.L, i = row % c.L, b = bh / c.H, h = bh % c.H;
    EXPECT_EQ(r.lse[row], -kInf) << who << " lse of fully masked row " << row;
    for (int64_t d = 0; d < c.Dv; ++d)
      EXPECT_EQ(r.o[b * c.p.o_sb + i * c.p.o_sl + h * c.Dv + d], 0.0f) << who << " o row " << row;
    for (int64_t d = 0; d < c.Dh; ++d) {
      const float g = r.dq[b * c.p.q_sb + i * c.p.q_sl + h * c.Dh + d];
      EXPECT_EQ(g, 0.0f) << who << " dq row " << row;
    }
  }
  (void)E;
}

// One case through `body` against the twin: o and lse within forward_bound, dq, dk, dv within backward_bound
// (the backward on the twin's o and lse), fully masked rows exactly 0.
void compare_with_twin(const Case& c, Body body) {
  SCOPED_TRACE(c.name() + (c.p.bf16 ? " bf16" : ""));
  const Result ref = run(c, Body::SCALAR);
  const Result fast = run(c, body, &ref);  // fast backward on the reference's o and lse
  const double fb = forward_bound(c), bb = backward_bound(c);
  if (c.p.bf16) {
    ASSERT_TRUE(bf16_output_close(fast.o, ref.o, run(with_abs_v(c), Body::SCALAR).o, fb));
  } else {
    ASSERT_TRUE(close_rel(fast.o, ref.o, fb, "o"));
  }
  ASSERT_TRUE(close_rel(fast.lse, ref.lse, fb, "lse"));
  double dv_max = 0;
  const std::vector<float>& dv_ref = c.layout == Layout::PACKED ? ref.dq : ref.dv;
  for (float g : dv_ref) dv_max = std::max(dv_max, std::fabs(double(g)));
  const double floor = std::max(c.p.scale * dv_max, testing::kTinyMagnitude);
  ASSERT_TRUE(close_rel(fast.dq, ref.dq, bb, "dq", floor));
  ASSERT_TRUE(close_rel(fast.dk, ref.dk, bb, "dk", floor));
  ASSERT_TRUE(close_rel(fast.dv, ref.dv, bb, "dv"));
  check_dead_rows(c, ref, "scalar");
  check_dead_rows(c, fast, "fast");
}

// Fast vs scalar for every (Dh, L, S, layout) with the given mask kind. The default lengths run
// the kernel on the caller's strided rows; `long_lens` (L·S ≥ 256²) take its path that first copies
// each head's rows into contiguous blocks.
const int64_t kShortDhs[] = {1, 3, 8, 16, 17, 64};
const int64_t kShortLens[] = {1, 5, 16, 33, 100};
const int64_t kLongDhs[] = {17, 64};
const int64_t kLongLens[] = {257, 300};

// dv_of(Dh): the value head width to pair with Dh (null: Dv = Dh).
// bf16: both run with AttentionParams::bf16 (the fast kernel's vdpbf16ps path against the twin's rounding).
template <size_t ND, size_t NL>
// body: DISPATCH (the entry points: the flash kernel, or without AVX-512 the other bodies) or AVX2_GEMM.
void sweep(MaskKind kind, const int64_t (&dhs)[ND], const int64_t (&lens)[NL], int64_t B,
           int64_t (*dv_of)(int64_t) = nullptr, bool bf16 = false, Body body = Body::DISPATCH) {
  if (body == Body::DISPATCH && force_scalar()) GTEST_SKIP() << "TFM_FORCE_SCALAR: nothing to compare";
  if (body == Body::AVX2_GEMM && !cpu_has_avx2()) GTEST_SKIP() << "no AVX2 (or TFM_FORCE_SCALAR)";
  if (bf16 && !cpu_has_bf16_dot()) GTEST_SKIP() << "no AVX512-BF16 (or TFM_FORCE_SCALAR): nothing to compare";
  uint64_t seed = 1000 * static_cast<uint64_t>(kind) + 100 * NL;
  for (int64_t Dh : dhs)
    for (int64_t L : lens)
      for (int64_t S : lens)
        for (Layout layout : {Layout::BATCH_FIRST, Layout::SEQ_FIRST, Layout::PACKED}) {
          if (layout == Layout::PACKED && L != S) continue;  // packed qkv is self-attention
          const int64_t H = (Dh == 64 ? 2 : 3);
          Case c = make_case(B, H, L, S, Dh, layout, kind, seed += 10, dv_of ? dv_of(Dh) : 0);
          c.p.bf16 = bf16;
          compare_with_twin(c, body);
          if (::testing::Test::HasFatalFailure()) return;
        }
}

TEST(AttentionKernel, FastMatchesScalarNoMask) { sweep(MaskKind::NONE, kShortDhs, kShortLens, 2); }
TEST(AttentionKernel, FastMatchesScalarMask2D) { sweep(MaskKind::MASK_2D, kShortDhs, kShortLens, 2); }
TEST(AttentionKernel, FastMatchesScalarMask3D) { sweep(MaskKind::MASK_3D, kShortDhs, kShortLens, 2); }
TEST(AttentionKernel, FastMatchesScalarKeyPadding) { sweep(MaskKind::KEY_PADDING, kShortDhs, kShortLens, 2); }
TEST(AttentionKernel, FastMatchesScalarCausal) { sweep(MaskKind::CAUSAL, kShortDhs, kShortLens, 2); }
TEST(AttentionKernel, FastMatchesScalarCausalFullyMaskedRows) { sweep(MaskKind::CAUSAL_FULLY_MASKED, kShortDhs, kShortLens, 2); }
TEST(AttentionKernel, FastMatchesScalarDropout) { sweep(MaskKind::DROPOUT, kShortDhs, kShortLens, 2); }

// The packed-operand path (long sequences), every mask kind.
TEST(AttentionKernel, FastMatchesScalarLongSequences) {
  for (MaskKind kind : {MaskKind::NONE, MaskKind::MASK_2D, MaskKind::MASK_3D, MaskKind::KEY_PADDING,
                        MaskKind::CAUSAL, MaskKind::CAUSAL_FULLY_MASKED, MaskKind::DROPOUT}) {
    SCOPED_TRACE(static_cast<int>(kind));
    sweep(kind, kLongDhs, kLongLens, 1);
  }
}

// Value heads of another width than the query/key heads (Dv ≠ Dh), narrower and wider, on every
// mask kind, on the strided and (long sequences) the packed-operand paths. Dv = 29 (Dh 8) takes each of the AVX2
// forward's column paths in one row: a block of 16, 8 columns, then 5 one at a time.
int64_t other_dv(int64_t Dh) { return Dh == 16 ? 7 : Dh == 17 ? 40 : Dh == 64 ? 5 : Dh == 8 ? 29 : Dh + 2; }
TEST(AttentionKernel, FastMatchesScalarValueHeadWidth) {
  for (MaskKind kind : {MaskKind::NONE, MaskKind::MASK_3D, MaskKind::KEY_PADDING, MaskKind::CAUSAL_FULLY_MASKED,
                        MaskKind::DROPOUT}) {
    SCOPED_TRACE(static_cast<int>(kind));
    sweep(kind, kShortDhs, kShortLens, 2, other_dv);
  }
  const int64_t dhs[] = {17};
  sweep(MaskKind::CAUSAL, dhs, kLongLens, 1, other_dv);
}

// The bodies of CPUs without AVX-512 against the twin on CPUs with AVX-512 too: every mask kind, the short and
// the long lengths (L·S ≥ 256²: more than one query tile), Dv ≠ Dh. Without AVX-512 the entry points run these
// bodies, so the FastMatchesScalar* sweeps above already are this test.
TEST(AttentionKernel, Avx2GemmBodiesMatchScalar) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 (or TFM_FORCE_SCALAR)";
  if (!cpu_has_avx512()) GTEST_SKIP() << "the entry points run the AVX2 bodies: FastMatchesScalar*";
  for (MaskKind kind : {MaskKind::NONE, MaskKind::MASK_2D, MaskKind::MASK_3D, MaskKind::KEY_PADDING, MaskKind::CAUSAL,
                        MaskKind::CAUSAL_FULLY_MASKED, MaskKind::DROPOUT}) {
    SCOPED_TRACE(mask_name(kind));
    sweep(kind, kShortDhs, kShortLens, 2, nullptr, false, Body::AVX2_GEMM);
    sweep(kind, kLongDhs, kLongLens, 1, nullptr, false, Body::AVX2_GEMM);
  }
  for (MaskKind kind : {MaskKind::KEY_PADDING, MaskKind::CAUSAL_FULLY_MASKED, MaskKind::DROPOUT})
    sweep(kind, kShortDhs, kShortLens, 2, other_dv, false, Body::AVX2_GEMM);
}

// The sgemm backward's tiles hold at most 64·1024 scores: with S = 5000 a tile has 13 query rows, so 40
// rows take four tiles, the last one short (the backward adds each tile into dk, dv in turn).
TEST(AttentionKernel, Avx2GemmBodiesMatchScalarOnShortTilesOfLongRows) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 (or TFM_FORCE_SCALAR)";
  uint64_t seed = 555;
  for (MaskKind kind : {MaskKind::MASK_3D, MaskKind::CAUSAL_FULLY_MASKED, MaskKind::DROPOUT})
    for (Layout layout : {Layout::BATCH_FIRST, Layout::SEQ_FIRST}) {
      const Case c = make_case(2, 2, 40, 5000, 8, layout, kind, seed += 10);
      compare_with_twin(c, Body::AVX2_GEMM);
      if (HasFatalFailure()) return;
    }
}

// The bodies give the same bits on 1 and 2 threads (the forward splits (b, h, tile), the backward (b, h)).
TEST(AttentionKernel, Avx2GemmBodiesBitwiseAcrossThreadCounts) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 (or TFM_FORCE_SCALAR)";
  const int saved = omp_get_max_threads();
  uint64_t seed = 777;
  for (MaskKind kind : {MaskKind::KEY_PADDING, MaskKind::CAUSAL, MaskKind::DROPOUT})
    for (int64_t L : {1, 70, 300}) {
      const Case c = make_case(2, 3, L, 300, 17, Layout::BATCH_FIRST, kind, seed += 10);
      SCOPED_TRACE(c.name());
      omp_set_num_threads(1);
      const Result one = run(c, Body::AVX2_GEMM);
      omp_set_num_threads(2);
      const Result two = run(c, Body::AVX2_GEMM);
      omp_set_num_threads(saved);
      EXPECT_TRUE(bitwise_equal(one.o, two.o, "o"));
      EXPECT_TRUE(bitwise_equal(one.lse, two.lse, "lse"));
      EXPECT_TRUE(bitwise_equal(one.dq, two.dq, "dq"));
      EXPECT_TRUE(bitwise_equal(one.dk, two.dk, "dk"));
      EXPECT_TRUE(bitwise_equal(one.dv, two.dv, "dv"));
    }
}

// The bfloat16 products (AttentionParams::bf16) against the twin's rounding: odd and even head widths and
// lengths (padded pairs), Dv ≠ Dh, the strided and the packed-operand paths; the mask kinds whose code
// differs (the masks themselves are applied by the code the float32 sweeps test).
TEST(AttentionKernel, Bf16FastMatchesScalar) {
  for (MaskKind kind : {MaskKind::NONE, MaskKind::MASK_3D, MaskKind::CAUSAL_FULLY_MASKED, MaskKind::DROPOUT}) {
    SCOPED_TRACE(static_cast<int>(kind));
    sweep(kind, kShortDhs, kShortLens, 2, nullptr, true);
  }
  sweep(MaskKind::KEY_PADDING, kShortDhs, kShortLens, 2, other_dv, true);
  const int64_t long_dhs[] = {17}, long_lens[] = {257};  // one packed-path shape: the twin is slow there
  sweep(MaskKind::DROPOUT, long_dhs, long_lens, 1, nullptr, true);
  sweep(MaskKind::CAUSAL, long_dhs, long_lens, 1, other_dv, true);
}

// bf16 really rounds: its results differ from the float32 products' by far more than float rounding.
TEST(AttentionKernel, Bf16DiffersFromFloat32ByBf16Rounding) {
  if (!cpu_has_bf16_dot()) GTEST_SKIP() << "no AVX512-BF16 (or TFM_FORCE_SCALAR)";
  Case c = make_case(2, 3, 100, 90, 64, Layout::BATCH_FIRST, MaskKind::KEY_PADDING, 4242);
  const Result f32 = run(c, Body::DISPATCH);
  c.p.bf16 = true;
  const Result bf = run(c, Body::DISPATCH);
  EXPECT_FALSE(close_rel(bf.o, f32.o, forward_bound(c), "o")) << "bf16 changed o by float rounding only";
  for (const auto& [got, want, name] : {std::tuple{&bf.dq, &f32.dq, "dq"}, std::tuple{&bf.dk, &f32.dk, "dk"},
                                        std::tuple{&bf.dv, &f32.dv, "dv"}})
    EXPECT_FALSE(close_rel(*got, *want, 100 * kEps, name)) << "bf16 left " << name << " within 100 float ulps";
}

// Where bfloat16 rounding changes nothing, the bf16 forward is exact up to float rounding: q = 0 makes every
// unmasked score 0, so every probability before the division by the row sum is exp(0) = 1 (bf16-exact) and
// masked ones 0, and v holds multiples of 1/64 (bf16-exact): o_i is the mean of v over the unmasked keys,
// whose float sum is exact, then a reciprocal and a product (2 ulp). Odd and even head widths, value widths and key counts (the
// padded pairs of every operand), key tiles past the first, strided and packed layouts.
TEST(AttentionKernel, Bf16ForwardExactWhereRoundingIsExact) {
  if (!cpu_has_bf16_dot()) GTEST_SKIP() << "no AVX512-BF16 (or TFM_FORCE_SCALAR)";
  uint64_t seed = 31;
  for (int64_t Dh : {1, 3, 17, 64})
    for (int64_t Dv : {1, 5, 17, 64})
      for (int64_t S : {1, 5, 33, 64, 65, 130})
        for (Layout layout : {Layout::BATCH_FIRST, Layout::SEQ_FIRST}) {
          const int64_t L = 7;
          Case c = make_case(2, 2, L, S, Dh, layout, MaskKind::KEY_PADDING, seed += 10, Dv);
          c.p.bf16 = true;
          SCOPED_TRACE(c.name());
          std::fill(c.qbuf.begin(), c.qbuf.end(), 0.0f);
          for (float& x : c.vbuf) x = std::round(x * 64) / 64;
          for (float& m : c.kpm) m = m == -kInf ? -kInf : 0.0f;
          const Result r = run(c, Body::DISPATCH);
          for (int64_t b = 0; b < c.B; ++b)
            for (int64_t h = 0; h < c.H; ++h)
              for (int64_t d = 0; d < Dv; ++d) {
                double sum = 0;
                int64_t n = 0;
                for (int64_t j = 0; j < S; ++j)
                  if (c.kpm[b * S + j] == 0.0f) sum += c.vbuf[b * c.p.v_sb + j * c.p.v_sl + h * Dv + d], ++n;
                const double want = n ? sum / double(n) : 0.0;
                for (int64_t i = 0; i < L; ++i) {
                  const float got = r.o[b * c.p.o_sb + i * c.p.o_sl + h * Dv + d];
                  ASSERT_NEAR(got, want, 2 * std::fabs(want) * kEps) << "b " << b << " h " << h << " i " << i << " d " << d;
                }
              }
        }
}

// A call with at most 8 query rows (decoding) runs them with the keys in the lanes (forward_rows); with more
// rows they run in tiles of 16·NVQ queries. A row's output and lse must be the same bits either way: a
// call on the first L rows of a case of 40 rows (the same buffers and strides, so the same queries, masks
// and keys) against those rows of the whole case. Every mask kind but dropout (which always takes the
// tiles), key counts within one tile and across several (S = 1, 17, 64, 130), and S = 8200, where the
// tiles first copy K and V into per-head blocks (L·S ≥ 256²) and the rows read them in place; head widths
// off 16.
// Without AVX-512, the AVX2 forward computes each row alone: the same must hold.
TEST(AttentionKernel, RowPathEqualsTilePath) {
  if (!cpu_has_avx512() && !cpu_has_avx2()) GTEST_SKIP() << "no AVX-512 or AVX2 (or TFM_FORCE_SCALAR)";
  // The entry point's body, and the AVX2 forward called directly where the entry point takes the flash kernel.
  std::vector<std::pair<const char*, void (*)(const AttentionParams&)>> bodies = {{"dispatch", attention_forward}};
  if (cpu_has_avx512() && cpu_has_avx2()) bodies.push_back({"avx2", attention_forward_avx2});
  for (const auto& [body_name, forward] : bodies) {
    SCOPED_TRACE(body_name);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    uint64_t seed = 4242;
    for (MaskKind kind : {MaskKind::NONE, MaskKind::MASK_2D, MaskKind::MASK_3D, MaskKind::KEY_PADDING, MaskKind::CAUSAL,
                          MaskKind::CAUSAL_FULLY_MASKED})
      for (int64_t Dh : {3, 17, 64})
        for (int64_t S : {1, 17, 64, 130, 8200})
          for (Layout layout : {Layout::BATCH_FIRST, Layout::SEQ_FIRST}) {
            const int64_t Lbig = 40;
            const Case c = make_case(2, 3, Lbig, S, Dh, layout, kind, seed += 10);
            std::vector<float> o_all(o_elems(c), nan), lse_all(c.B * c.H * Lbig, nan);
            forward(bind(c, o_all.data(), lse_all.data()));
            for (int64_t L : {1, 2, 3, 8}) {
              SCOPED_TRACE(c.name() + " rows " + std::to_string(L));
              std::vector<float> o(o_elems(c), nan), lse(c.B * c.H * L, nan);
              AttentionParams p = bind(c, o.data(), lse.data());
              p.L = L;  // the strides stay the whole case's: rows 0..L-1 are the same memory
              forward(p);
              for (int64_t b = 0; b < c.B; ++b)
                for (int64_t i = 0; i < L; ++i) {
                  const int64_t at = b * c.p.o_sb + i * c.p.o_sl;
                  const std::vector<float> got(o.begin() + at, o.begin() + at + c.Ev());
                  const std::vector<float> want(o_all.begin() + at, o_all.begin() + at + c.Ev());
                  ASSERT_TRUE(bitwise_equal(got, want, "o of b " + std::to_string(b) + " row " + std::to_string(i)));
                  for (int64_t h = 0; h < c.H; ++h) {
                    const float g = lse[(b * c.H + h) * L + i], w = lse_all[(b * c.H + h) * Lbig + i];
                    ASSERT_EQ(std::memcmp(&g, &w, sizeof g), 0)
                        << "lse of b " << b << " h " << h << " row " << i << ": " << g << " vs " << w;
                  }
                }
            }
          }
  }
}

// The AVX2 forward splits the query rows into jobs of 64 rows, or of 192 from 768 rows on: the first 767 rows of an
// 800-row case (64-row jobs; the same buffers and strides) give the bits the whole case gives them (192-row jobs),
// and so does a call on one thread against two.
TEST(AttentionKernel, Avx2ForwardRowsDoNotDependOnTheJobSplit) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "no AVX2 (or TFM_FORCE_SCALAR)";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int saved = omp_get_max_threads();
  uint64_t seed = 5150;
  // Not dropout: its counters count rows of L, so a call on fewer rows draws other masks for the heads after the first.
  for (MaskKind kind : {MaskKind::CAUSAL, MaskKind::KEY_PADDING, MaskKind::MASK_2D}) {
    const int64_t Lbig = 800, L = 767;
    const Case c = make_case(1, 2, Lbig, 300, 24, Layout::BATCH_FIRST, kind, seed += 10);
    SCOPED_TRACE(c.name());
    std::vector<float> o_all(o_elems(c), nan), lse_all(c.B * c.H * Lbig, nan);
    omp_set_num_threads(2);
    attention_forward_avx2(bind(c, o_all.data(), lse_all.data()));
    std::vector<float> o(o_elems(c), nan), lse(c.B * c.H * L, nan);
    AttentionParams p = bind(c, o.data(), lse.data());
    p.L = L;
    omp_set_num_threads(1);
    attention_forward_avx2(p);
    omp_set_num_threads(saved);
    for (int64_t i = 0; i < L; ++i) {
      const int64_t at = i * c.p.o_sl;
      const std::vector<float> got(o.begin() + at, o.begin() + at + c.Ev());
      const std::vector<float> want(o_all.begin() + at, o_all.begin() + at + c.Ev());
      ASSERT_TRUE(bitwise_equal(got, want, "o of row " + std::to_string(i)));
      for (int64_t h = 0; h < c.H; ++h) {
        const float g = lse[h * L + i], w = lse_all[h * Lbig + i];
        ASSERT_EQ(std::memcmp(&g, &w, sizeof g), 0) << "lse of h " << h << " row " << i << ": " << g << " vs " << w;
      }
    }
  }
}

// Under a causal mask the flash kernel computes exactly what it computes for the additive form of that mask (0
// where j ≤ i, −inf above), bit for bit: it leaves out the keys a causal row cannot see (whole key tiles, and on
// the diagonal the triangle's far side), and a left-out key would have added exactly 0 to every sum and chain.
// Not the AVX2 body's backward: its causal tiles have fewer rows than its masked ones, and each tile's dk, dv
// product is added to the sum so far, so the tiling shows in the last bits.
TEST(AttentionKernel, CausalEqualsItsAdditiveMaskBitwise) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512 (or TFM_FORCE_SCALAR): the flash kernel does not run";
  uint64_t seed = 9100;
  for (MaskKind kind : {MaskKind::CAUSAL, MaskKind::DROPOUT})
    for (int64_t L : {1, 16, 17, 40, 64, 100, 150, 300})
      for (int64_t Dh : {17, 32, 64}) {
        Case causal = make_case(2, 3, L, L, Dh, Layout::SEQ_FIRST, kind, seed += 10);
        causal.p.causal = true;
        Case additive = causal;
        additive.p.causal = false;
        additive.mask.assign(L * L, 0.0f);
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = i + 1; j < L; ++j) additive.mask[i * L + j] = -kInf;
        additive.p.mask_sbh = 0;
        SCOPED_TRACE(causal.name() + " causal");
        const Result a = run(causal, Body::DISPATCH), b = run(additive, Body::DISPATCH);
        EXPECT_TRUE(bitwise_equal(a.o, b.o, "o"));
        EXPECT_TRUE(bitwise_equal(a.lse, b.lse, "lse"));
        EXPECT_TRUE(bitwise_equal(a.dq, b.dq, "dq"));
        EXPECT_TRUE(bitwise_equal(a.dk, b.dk, "dk"));
        EXPECT_TRUE(bitwise_equal(a.dv, b.dv, "dv"));
      }
}

// Dropout really drops: with p = 0.3 about 30% of the (bh, i, j) counters are dropped, and the
// fraction kept matches dropout_keep (the same rule both kernels use).
TEST(AttentionKernel, DropoutRateIsP) {
  int64_t kept = 0, n = 200000;
  for (int64_t i = 0; i < n; ++i) kept += dropout_keep(77, 1000 + i, 0.3f);
  const double rate = 1.0 - static_cast<double>(kept) / n;
  // Binomial std dev √(p(1−p)/n) = 0.001; allow 5σ.
  EXPECT_NEAR(rate, 0.3, 0.005);
}

// L = S = 1, one head, Dh = 2, scale = 0.5: q = (1, 2), k = (3, 4), v = (5, −6), do = (1, 1).
//   s = 0.5·(1·3 + 2·4) = 5.5; a softmax over one key is 1, so o = v = (5, −6) and lse = s = 5.5.
//   dv = p·do = (1, 1); dp = ⟨do, v⟩ = −1 = D = ⟨do, o⟩, so ds = 1·(−1 − (−1)) = 0: dq = dk = 0.
TEST(AttentionKernel, HandCheckedSingleKey) {
  const float q[2] = {1, 2}, k[2] = {3, 4}, v[2] = {5, -6}, dout[2] = {1, 1};
  for (bool fast : {false, true}) {
    if (fast && force_scalar()) continue;
    float o[2], lse[1], dq[2], dk[2], dv[2];
    AttentionParams p;
    p.B = p.H = p.L = p.S = 1;
    p.Dh = 2;
    p.q = q, p.k = k, p.v = v, p.o = o, p.lse = lse;
    p.q_sb = p.k_sb = p.v_sb = p.o_sb = 2;
    p.q_sl = p.k_sl = p.v_sl = p.o_sl = 2;
    p.scale = 0.5f;
    if (fast) {
      attention_forward(p);
      attention_backward(p, dout, dq, dk, dv);
    } else {
      attention_forward_scalar(p);
      attention_backward_scalar(p, dout, dq, dk, dv);
    }
    SCOPED_TRACE(fast ? "fast" : "scalar");
    EXPECT_EQ(o[0], 5.0f);
    EXPECT_EQ(o[1], -6.0f);
    EXPECT_EQ(lse[0], 5.5f);
    EXPECT_EQ(dv[0], 1.0f);
    EXPECT_EQ(dv[1], 1.0f);
    for (int d = 0; d < 2; ++d) {
      EXPECT_EQ(dq[d], 0.0f);
      EXPECT_EQ(dk[d], 0.0f);
    }
  }
}

// No keys at all (S = 0): every query row is empty, so o = 0, lse = −inf and dq = 0 — written, not
// left as whatever the buffers held (NaN here), on both paths and with rows enough for two threads.
TEST(AttentionKernel, NoKeysGivesZeroOutputAndGradient) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t L = 300, Dh = 64;
  std::vector<float> q(L * Dh, 0.5f), dout(L * Dh, 1.0f);
  const float none[1] = {nan};
  for (bool fast : {false, true}) {
    if (fast && force_scalar()) continue;
    std::vector<float> o(L * Dh, nan), lse(L, nan), dq(L * Dh, nan);
    AttentionParams p;
    p.B = p.H = 1;
    p.L = L;
    p.S = 0;
    p.Dh = Dh;
    p.q = q.data(), p.k = none, p.v = none, p.o = o.data(), p.lse = lse.data();
    p.q_sb = p.o_sb = L * Dh;
    p.k_sb = p.v_sb = 0;
    p.q_sl = p.k_sl = p.v_sl = p.o_sl = Dh;
    p.scale = 0.125f;
    float dk[1] = {nan}, dv[1] = {nan};
    if (fast) {
      attention_forward(p);
      attention_backward(p, dout.data(), dq.data(), dk, dv);
    } else {
      attention_forward_scalar(p);
      attention_backward_scalar(p, dout.data(), dq.data(), dk, dv);
    }
    SCOPED_TRACE(fast ? "fast" : "scalar");
    for (int64_t i = 0; i < L * Dh; ++i) {
      ASSERT_EQ(o[i], 0.0f) << i;
      ASSERT_EQ(dq[i], 0.0f) << i;
    }
    for (int64_t i = 0; i < L; ++i) ASSERT_EQ(lse[i], -std::numeric_limits<float>::infinity()) << i;
  }
}

// ---- finite differences in double -----------------------------------------------------------------
// loss = Σ o ⊙ w for fixed random w; its gradient w.r.t. q, k, v is attention_backward_scalar<double>
// with dout = w. Central differences with h = 1e-5 have truncation error ~h²·|f'''| ≈ 1e-10 and roundoff
// ~1e-16·|loss|/h ≈ 1e-11, so 1e-7 relative to the largest gradient is a safe bound that still
// catches any wrong term (those are O(1e-2) or larger here).
struct DoubleCase {
  AttentionParams p;
  std::vector<double> q, k, v, mask, kpm, w;
};

double loss_of(const DoubleCase& c) {
  std::vector<double> o(c.p.B * c.p.L * c.p.H * c.p.dv());
  AttentionScalarTensors<double> t;
  t.q = c.q.data(), t.k = c.k.data(), t.v = c.v.data(), t.o = o.data();
  t.mask = c.mask.data(), t.kpm = c.kpm.data();
  attention_forward_scalar<double>(c.p, t);
  double loss = 0;
  for (size_t i = 0; i < o.size(); ++i) loss += o[i] * c.w[i];
  return loss;
}

// Dv: the value head width (0: Dh).
void finite_difference_check(float dropout_p, int64_t Dv = 0) {
  DoubleCase c;
  AttentionParams& p = c.p;
  p.B = 2, p.H = 2, p.L = 4, p.S = 6, p.Dh = 3, p.Dv = Dv;
  const int64_t E = p.H * p.Dh, Ev = p.H * p.dv();
  p.q_sb = p.L * E, p.q_sl = E;  // batch-first
  p.o_sb = p.L * Ev, p.o_sl = Ev;
  p.k_sb = p.S * E, p.k_sl = E;
  p.v_sb = p.S * Ev, p.v_sl = Ev;
  p.scale = 0.6f;
  p.causal = true;
  p.mask_sbh = 0;
  p.dropout_p = dropout_p;
  p.seed = 99;
  auto dvec = [](int64_t n, uint64_t seed) {
    const std::vector<float> f = testing::random_values(n, seed, -1.5f, 1.5f);
    return std::vector<double>(f.begin(), f.end());
  };
  c.q = dvec(p.B * p.L * E, 1);
  c.k = dvec(p.B * p.S * E, 2);
  c.v = dvec(p.B * p.S * Ev, 3);
  c.w = dvec(p.B * p.L * Ev, 4);
  c.mask = dvec(p.L * p.S, 5);
  c.mask[1 * p.S + 0] = -std::numeric_limits<double>::infinity();  // query 1 loses key 0
  c.kpm = dvec(p.B * p.S, 6);
  c.kpm[1 * p.S + 1] = -std::numeric_limits<double>::infinity();  // batch 1 loses key 1
  // batch 1, query 0 sees only key 0 (causal); batch 0, query 1 sees only key 1: both still alive.

  std::vector<double> o(c.w.size()), lse(p.B * p.H * p.L);
  std::vector<double> dq(c.q.size()), dk(c.k.size()), dv(c.v.size());
  AttentionScalarTensors<double> t;
  t.q = c.q.data(), t.k = c.k.data(), t.v = c.v.data(), t.o = o.data();
  t.mask = c.mask.data(), t.kpm = c.kpm.data(), t.lse = lse.data();
  attention_forward_scalar<double>(p, t);
  attention_backward_scalar<double>(p, t, c.w.data(), dq.data(), dk.data(), dv.data());

  const double h = 1e-5;
  auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* name) {
    double gmax = 0;
    std::vector<double> fd(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i];
      x[i] = x0 + h;
      const double up = loss_of(c);
      x[i] = x0 - h;
      const double down = loss_of(c);
      x[i] = x0;
      fd[i] = (up - down) / (2 * h);
      gmax = std::max(gmax, std::fabs(grad[i]));
    }
    EXPECT_GT(gmax, 1e-3) << name << " gradient is trivially zero";
    // max|fd − analytic| ≤ 1e-7·max|analytic|.
    EXPECT_TRUE(close_rel(fd, grad, 1e-7, std::string(name) + ": finite differences vs analytic"));
  };
  check(c.q, dq, "dq");
  check(c.k, dk, "dk");
  check(c.v, dv, "dv");
}

TEST(AttentionReference, GradientMatchesFiniteDifferencesMasksCausal) { finite_difference_check(0.0f); }
TEST(AttentionReference, GradientMatchesFiniteDifferencesWithDropout) { finite_difference_check(0.3f); }
TEST(AttentionReference, GradientMatchesFiniteDifferencesValueHeadWidth) {
  finite_difference_check(0.0f, 5);
  finite_difference_check(0.3f, 1);
}

// ---- vector exp -----------------------------------------------------------------------------------
// Over the range where exp(x) is a normal float, the error is ≤ 2 ulp of the correctly rounded
// result (std::exp in double, rounded): Cody–Waite reduction is exact to ~2^-32, the degree-7
// polynomial is accurate to 5e-9, and Horner with FMA adds < 1 ulp.
TEST(AttentionKernel, VectorExpWithinTwoUlp) {
  if (!cpu_has_avx512()) GTEST_SKIP() << "no AVX-512";
  std::vector<float> x;
  for (float t = -87.0f; t < 88.5f; t += 0.000731f) x.push_back(t);
  std::vector<float> y(x.size());
  attention_exp_avx512(x.data(), y.data(), static_cast<int64_t>(x.size()));
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float ref = static_cast<float>(std::exp(static_cast<double>(x[i])));
    const double ulp = std::nextafter(ref, kInf) - ref;
    const double e = std::fabs(static_cast<double>(y[i]) - ref) / ulp;
    if (e > worst) worst = e, at = i;
  }
  EXPECT_LE(worst, 2.0) << "at x = " << x[at] << ": " << y[at];
  const float special[5] = {-kInf, kInf, 0.0f, -200.0f, std::numeric_limits<float>::quiet_NaN()};
  float out[5];
  attention_exp_avx512(special, out, 5);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], kInf);
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_TRUE(std::isnan(out[4]));
}

// ---- determinism over thread counts ---------------------------------------------------------------
// B·H = 1 with 2 threads uses the backward's two-pass scheme while 1 thread uses the per-head
// scheme (checked with dropout and with causal + fully masked rows); B·H = 3 and 4 use the
// per-head scheme for both (uneven and even split); L·S ≥ 256² (400², 260·300) also packs the
// operands into contiguous per-head blocks first; one and two query rows (decoding) thread from
// B·H·L·S·Dh ≥ 2^16. All must give the same bits. The shapes are above the kernel's threading
// thresholds (B·H·L·S·Dh ≥ 2^21, or 2^16 for at most 16 query rows), so 2 threads really run — but the last,
// for the AVX2 forward's 192-row jobs, which has no threshold (on AVX-512 CPUs it runs on one thread).
TEST(AttentionKernel, BitwiseSameForOneAndTwoThreads) {
  if (force_scalar()) GTEST_SKIP() << "TFM_FORCE_SCALAR: the twin is single-threaded";
  const int saved = omp_get_max_threads();
  struct Shape {
    int64_t B, H, L, S, Dh;
    MaskKind kind;
  };
  const Shape shapes[] = {{1, 1, 200, 170, 64, MaskKind::DROPOUT},
                          {1, 1, 400, 400, 16, MaskKind::CAUSAL_FULLY_MASKED},
                          {1, 3, 197, 300, 17, MaskKind::MASK_3D},
                          {2, 2, 150, 150, 32, MaskKind::CAUSAL},
                          {1, 2, 260, 300, 64, MaskKind::KEY_PADDING},
                          {1, 12, 1, 300, 64, MaskKind::NONE},
                          {3, 4, 2, 150, 32, MaskKind::KEY_PADDING},
                          {1, 1, 800, 40, 16, MaskKind::CAUSAL}};  // AVX2: 192-row jobs from 768 query rows
  uint64_t seed = 777;
  for (const bool bf16 : {false, true})
  for (const Shape& s : shapes) {
    if (bf16 && !cpu_has_bf16_dot()) break;
    Case c = make_case(s.B, s.H, s.L, s.S, s.Dh, Layout::SEQ_FIRST, s.kind, seed += 10);
    c.p.bf16 = bf16;
    SCOPED_TRACE(c.name() + (bf16 ? " bf16" : ""));
    omp_set_num_threads(1);
    const Result one = run(c, Body::DISPATCH);
    omp_set_num_threads(2);
    const Result two = run(c, Body::DISPATCH);
    EXPECT_TRUE(bitwise_equal(one.o, two.o, "o"));
    EXPECT_TRUE(bitwise_equal(one.lse, two.lse, "lse"));
    EXPECT_TRUE(bitwise_equal(one.dq, two.dq, "dq"));
    EXPECT_TRUE(bitwise_equal(one.dk, two.dk, "dk"));
    EXPECT_TRUE(bitwise_equal(one.dv, two.dv, "dv"));
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace tfm::kernels
