// src/kernels/gemm_packed.h — y = x·Wᵀ (+ b) against a weight packed once, for inference.
//
// Training multiplies by a weight that changes every step, so kernels::gemm (kernels.h) takes
// plain row-major operands. Inference multiplies the same weights again and again, so it pays to
// reorder each weight once into the GEMM backend's blocked layout (oneDNN's matmul primitive with
// `format_tag::any` weights; on CPUs with AVX2 but not AVX-512, f32 and bf16 weights go to a layout and
// kernel of our own instead, gemm_packed_avx2.cc, below) and, when asked, to round it to bfloat16 so the matmul runs on
// AVX512-BF16 / AMX tiles. bench/bench_gemm.cc times both against dnnl_sgemm on plain operands
// (the figures are in bench/RESULTS.md, "Design measurements behind the kernels").
//
// Precisions (the scalar twin gemm_packed_scalar is their specification):
//   MATMUL_F32:  C = A·Wᵀ (+ b) in float32, like kernels::gemm (only the summation order differs).
//   MATMUL_BF16: C = bf16(A)·bf16(W)ᵀ (+ b): A and W rounded to bfloat16 (round to nearest even,
//                NaN stays NaN), products exact in float32, sums in float32 — what
//                torch.autocast("cpu", torch.bfloat16) computes for a Linear, except that the
//                output stays float32 (PyTorch's is bfloat16, one more rounding).
//   MATMUL_INT8: C = dequantize(u8(A)·s8(W)ᵀ) + b: W quantized once per output row, symmetric
//                (kernels::quantize_rows_s8, scale max|W_n|/127); each panel's rows of A quantized
//                per row, asymmetric, to uint8 (quantize_rows_u8); int32 sums of u8·s8 products — the
//                operand kinds VNNI's vpdpbusd and AMX-INT8 multiply natively, so oneDNN needs no
//                compensation of its own; the activations' zero point is removed in the float32
//                dequantization (dequantize_rows, with Σ_k q_w per output column kept at pack
//                time), where the bias is added. The int32 sums are exact, so the oneDNN path,
//                the portable loop and the scalar twin agree bit for bit. oneDNN runs it only where
//                kernels::cpu_has_int8_dot(); elsewhere the AVX2 products (below) compute the same bits,
//                and a plain int32 loop without AVX2 or under TFM_FORCE_SCALAR.
//
// Determinism: C is cut into fixed row panels chosen from (M, N, K) only, each panel one
// single-threaded oneDNN call (or the fallback), so results are bitwise identical for any thread
// count, as for kernels::gemm. A product of a few rows (decoding) reads the whole weight for little
// arithmetic, and one thread cannot draw the memory bandwidth two can, so such products are cut by
// columns instead: up to kRowKernelRows rows run in the row kernel below (blocks of columns over the
// threads, each output one sum in a fixed order); other products of at most 16 rows (one panel)
// with a large weight run as column slabs fixed at pack time from the weight's shape and precision
// (about 1 MiB of weight each, whole blocks of oneDNN's layout, each slab one oneDNN call).
// The AVX2 products (below) go further: every output is one fma chain in a fixed order, so a product's
// rows do not depend on the panels, the column split or the other rows at all.
//
// Unlike the rest of the kernel layer this allocates (the packed copy, oneDNN primitives cached per
// panel height; gemm_packed_scalar, the TFM_FORCE_SCALAR path, its rounded or quantized operands on
// every call) and may fail to find a oneDNN implementation; it never throws: a weight oneDNN
// cannot pack falls back to kernels::gemm on a plain (rounded) copy, with the same numbers up to
// summation order.
#pragma once

#include <cstdint>
#include <memory>

namespace tfm::kernels {

enum class MatmulPrecision : uint8_t { MATMUL_F32, MATMUL_BF16, MATMUL_INT8 };

class PackedWeight;  // opaque; defined in gemm_packed.cc

// Packs W (N, K), row-major at stride ldw ≥ K, for products x·Wᵀ. W is copied: the packed weight
// does not refer to it afterwards. N, K ≥ 1.
std::shared_ptr<const PackedWeight> pack_weight(const float* W, int64_t N, int64_t K, int64_t ldw,
                                                MatmulPrecision precision);

// An int8 weight packed from its integers: the weight q[n][k] · scale[n] (q (N, K) at stride ldq ≥ K, scale
// (N) finite ≥ 0) for MATMUL_INT8, without quantizing. The same packed weight as pack_weight of those
// values when (q, scale) is what quantize_rows_s8 gives for them (a stored int8 weight at quantize's fixed
// point, tfm/models/quantize.h). q and scale are copied.
std::shared_ptr<const PackedWeight> pack_weight_int8(const int8_t* q, int64_t ldq, const float* scale, int64_t N,
                                                     int64_t K);

// C (M, N) = A (M, K) · Wᵀ + bias (N, broadcast over rows; nullptr for none). A at stride lda ≥ K,
// C at stride ldc ≥ N; C is overwritten (may hold garbage) and must not alias A. M ≥ 0.
void gemm_packed(int64_t M, const float* A, int64_t lda, const PackedWeight& W, const float* bias,
                 float* C, int64_t ldc);

// The scalar twin: rounds A and W as the precision says, then gemm_scalar (one float accumulator
// per output, k ascending) and adds the bias; for int8, quantizes both (the scalar twins), sums
// int32 products and dequantizes with dequantize_rows_scalar. W is the plain (N, K) weight at
// stride ldw.
void gemm_packed_scalar(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                        const float* W, int64_t ldw, const float* bias, float* C, int64_t ldc,
                        MatmulPrecision precision);

// True when W lives in oneDNN's blocked layout (false: TFM_FORCE_SCALAR, or no oneDNN support and
// the plain fallback, or int8 without cpu_has_int8_dot(), or f32 and bf16 in the AVX2 products' own
// layout, packed_for_avx2). For tests and diagnostics.
bool packed_by_onednn(const PackedWeight& W);

// The column slabs a product of at most 16 rows is cut into (0: none, one call): a function of the
// weight's shape and precision only, where the blocked layout allows them. For tests and diagnostics.
int64_t packed_column_slabs(const PackedWeight& W);
// How many products with W have run as column slabs so far (a call shape whose slab primitives are not
// the whole weight's implementation runs whole). For tests and diagnostics.
int64_t gemm_packed_slab_runs(const PackedWeight& W);

// The oneDNN primitives W keeps (one per row count, strides and columns it was called with, at most
// the last 32 used): a service's batches of ever new sizes leave it bounded. For tests and diagnostics.
size_t gemm_packed_cached_primitives(const PackedWeight& W);

// Row panels for M output rows: a function of the shape only. Exposed for the tests.
int64_t gemm_packed_panel_rows(int64_t M, int64_t N, int64_t K);

// The row kernel: a product of at most kRowKernelRows rows (decoding: one token per sequence) reads the
// whole weight for 2·M flops a weight element, so it is bound by memory, and oneDNN's kernels, built
// for tall panels, read the weight well below the rate a plain loop does (bench/RESULTS.md, "Decoding:
// the row kernel"). Where oneDNN's layout is one this kernel reads (PackedRows below) and the CPU has
// AVX-512 (and VNNI for int8), such products run here, the blocks of columns spread over the threads
// when the weight is large.
//
// What it computes — the specification is gemm_rows_scalar for f32 and bf16:
//   C[i, n] = Σ_k a[i, k]·w[n, k] (+ bias[n]), one float accumulator per output, k ascending, each
//   step one fused multiply-add (std::fma); bf16 rounds a and w first (float_to_bf16), so every product is
//   exact and only the sums round. The bias is added once, after the sum (no bias: the sum itself).
// Each output is that one sum whatever M, the thread count or the columns' split, so the row kernel
// equals its twin bit for bit; it differs from oneDNN's taller panels only in summation order. int8
// computes what every int8 path does (exact int32 sums, dequantize_rows): the same bits as the panels.
constexpr int64_t kRowKernelRows = 4;

// A weight in the blocked layout the row kernel reads: for each block of n_block output columns (the
// last one zero-padded), ⌈K/group⌉ runs of n_block·group elements, the group consecutive k of one
// column side by side: element (n, k) at
//   (n / n_block)·stride + (k / group)·n_block·group + (n % n_block)·group + k % group,
// where stride, the elements from one block of columns to the next, is n_block times K padded as oneDNN
// pads it (to 16 for "BA16a64b" f32, to 32 for "BA16a64b2a" bf16).
// f32: group 1, data float; bf16: group 2, data bfloat16 bits (uint16_t); int8: group 4, data int8_t.
// n_block ∈ {16, 32, 48, 64}.
struct PackedRows {
  const void* data;
  int64_t N, K, n_block, group, stride;
};

// The AVX-512 body (gemm_packed_avx512.cc; call only when cpu_has_avx512()): the columns of blocks
// [b0, b1) of C (m, N) = a (m, K) · Wᵀ (+ bias), 1 ≤ m ≤ kRowKernelRows. For bf16, a holds values
// already rounded to bfloat16 (as floats). Single-threaded.
void gemm_rows_avx512(const PackedRows& w, int64_t m, const float* a, int64_t lda, const float* bias, float* C,
                      int64_t ldc, int64_t b0, int64_t b1);

// The int8 body (gemm_rows_vnni_avx512.cc; call only when cpu_has_int8_dot()): the int32 sums
// acc (m, N) = qa (m, K) · Wᵀ of u8 activation rows (quantize_rows_u8; each row zero-padded to a multiple of
// 4 bytes, lda ≥ that) and the s8 weight, for the columns of blocks [b0, b1); dequantize_rows turns them
// into C. Exact int32 sums, so bitwise those of gemm_packed_scalar's int8 twin. Single-threaded.
void gemm_rows_s8_avx512vnni(const PackedRows& w, int64_t m, const uint8_t* qa, int64_t lda, int32_t* acc,
                             int64_t ldacc, int64_t b0, int64_t b1);

// CPUs with AVX2 but without AVX-512 (gemm_packed_avx2.cc) run every f32 and bf16 product — any number of
// rows — on a layout of their own instead of oneDNN's (oneDNN 2.6's matmul is slow there, and has no bf16:
// bench/RESULTS.md): PackedRows with n_block 16, group 1 and stride 16·K, the floats of a bf16 weight rounded
// (pack_rows16), read by gemm_packed_avx2, whose outputs are each one k-ascending fma chain — the row
// kernel's specification, so every such product equals gemm_rows_scalar bit for bit, for any rows (a NaN's
// payload aside: which of two NaN operands a multiply-add passes on is the instruction's choice).
//
// W (N, K) at stride ldw into that layout at out (⌈N/16⌉·16·K floats; the last block's missing columns
// zero), each value rounded to bfloat16 when round_bf16.
void pack_rows16(const float* W, int64_t N, int64_t K, int64_t ldw, bool round_bf16, float* out);
// C (m, N) = a (m, K) · Wᵀ (+ bias) for the columns of blocks [b0, b1), any m ≥ 0, W in pack_rows16's
// layout; for bf16, a holds values already rounded to bfloat16 (as floats). Single-threaded; call only
// when cpu_has_avx2().
void gemm_packed_avx2(const PackedRows& w, int64_t m, const float* a, int64_t lda, const float* bias, float* C,
                      int64_t ldc, int64_t b0, int64_t b1);
// The rows of src (m, K at stride lds) rounded to bfloat16 and widened back to float into dst (m, K dense):
// bf16_to_float(float_to_bf16(x)) for every x, bit for bit (the AVX2 bf16 products' source rows).
void round_rows_to_bf16_avx2(const float* src, int64_t lds, int64_t m, int64_t K, float* dst);
// int8 where the CPU has AVX2 but no int8 dot product (cpu_has_int8_dot() false; AVX-512 CPUs without VNNI
// too): PackedRows with n_block 16, group 2, int8 data and stride 16·K2 (K2 = K rounded up to even), read by
// gemm_packed_s8_avx2 (vpmaddwd on int16: exact, where AVX2's u8·s8 instruction saturates).
//
// The quantized weight q (N, K) at stride ldq into that layout at out (⌈N/16⌉·16·K2 bytes; missing columns
// and the padding k zero).
void pack_rows16_s8(const int8_t* q, int64_t N, int64_t K, int64_t ldq, int8_t* out);
// The quantized rows qa (m, K, dense: quantize_rows_u8's layout) widened to int16 into dst (m, K2, dense, the
// padding k zero): the int8 product's source rows.
void widen_rows_u8_avx2(const uint8_t* qa, int64_t m, int64_t K, int16_t* dst);
// The exact int32 sums acc (m, N) = a (m, K) · Wᵀ of widened rows (widen_rows_u8_avx2, at stride lda ≥ K2) and a
// weight in pack_rows16_s8's layout, for the columns of blocks [b0, b1), any m ≥ 0; dequantize_rows turns them
// into C. Single-threaded; call only when cpu_has_avx2().
void gemm_packed_s8_avx2(const PackedRows& w, int64_t m, const int16_t* a, int64_t lda, int32_t* acc, int64_t ldacc,
                         int64_t b0, int64_t b1);
// Whether W is in pack_rows16's or pack_rows16_s8's layout (the AVX2 products). For tests and diagnostics.
bool packed_for_avx2(const PackedWeight& W);

// The scalar twin of the f32 and bf16 bodies (the specification above), on the plain weight W (N, K) at
// stride ldw; precision f32 or bf16. The int8 body's twin is gemm_packed_scalar's int8 path.
void gemm_rows_scalar(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* W,
                      int64_t ldw, const float* bias, float* C, int64_t ldc, MatmulPrecision precision);

// How many products with W the row kernel ran (0 where its layout is not one the kernel reads). For tests
// and diagnostics.
int64_t gemm_packed_row_kernel_runs(const PackedWeight& W);
// Whether products of at most kRowKernelRows rows with W run in the row kernel. For tests and diagnostics.
bool packed_for_row_kernel(const PackedWeight& W);

// bfloat16 as used above: the top 16 bits of the float32 after rounding to nearest even; a NaN stays
// that NaN made quiet (sign and top 7 payload bits kept, the quiet bit 0x0040 set), ±inf stays ±inf,
// overflow rounds to ±inf.
uint16_t float_to_bf16(float x);
float bf16_to_float(uint16_t h);
// dst[i*K + k] = float_to_bf16(src[i*lds + k]) for an (m, K) block. Single-threaded (callers run it
// per panel). Runs the AVX-512 body when cpu_has_avx512(), bitwise equal to the scalar twin.
void convert_rows_to_bf16(const float* src, int64_t lds, int64_t m, int64_t K, uint16_t* dst);
void convert_rows_to_bf16_scalar(const float* src, int64_t lds, int64_t m, int64_t K, uint16_t* dst);
// The AVX-512 body: 16 lanes at once with the same integer rounding (gemm_packed_avx512.cc, compiled
// with AVX-512 flags; call only when cpu_has_avx512()).
void convert_rows_to_bf16_avx512(const float* src, int64_t lds, int64_t m, int64_t K, uint16_t* dst);

}  // namespace tfm::kernels
