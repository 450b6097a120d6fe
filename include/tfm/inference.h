// tfm/inference.h — InferenceMode: the scope to run a trained model in.
//
// PyTorch analog: `with torch.inference_mode():` (no autograd recording), plus, for
// Precision::BFLOAT16, `with torch.autocast("cpu", dtype=torch.bfloat16):` restricted to the
// matmuls of Linear layers (attention, LayerNorm, softmax, activations stay float32); for
// Precision::INT8, `torch.ao.quantization.quantize_dynamic(model, dtype=torch.qint8)` applied to every
// Linear (PyTorch's own quantizes nn.Linear modules only, which inside nn.TransformerEncoderLayer
// are the feed-forward ones), with per-row rather than per-tensor scales.
//
// Inside the scope every Linear weight is packed on first use — reordered into the GEMM backend's
// blocked layout and, for BFloat16, rounded to bfloat16 — and the packed copy is reused by every
// later call with the same weight until the outermost scope ends (like autocast's weight cache).
// What it buys: faster Linear layers from float32 packing, and bfloat16 faster again on AVX512-BF16,
// more where AMX tiles exist (the figures are in bench/RESULTS.md, "Design measurements behind the
// kernels").
//
// Numbers:
//   Float32  — the same float32 math as outside the scope; only the GEMM's summation order
//              differs (results agree to float32 rounding, not bitwise).
//   BFloat16 — each Linear computes bf16(x)·bf16(W)ᵀ + b with float32 sums: inputs and weights
//              carry 8 significant bits (relative rounding ≤ 2^-8). Documented tolerance against the
//              float64 reference: docs/bf16.md.
//   Int8     — each Linear's weight is quantized once per output row, symmetric (scale max|W_n|/127),
//              its input per row at run time (asymmetric uint8, scale (max − min)/255); int32 sums,
//              dequantized and the bias added in float32 (VNNI / AMX-INT8 through oneDNN; AVX2's exact
//              int16 products without them; a portable loop with the same bits elsewhere, see
//              int8_matmul_accelerated). Inference only.
//              Tolerance and accuracy: docs/int8.md.
// Results stay bitwise identical for any thread count in every precision.
//
// Contract: weights must not be modified while a scope is alive (the cache is not invalidated; the
// packed copies hold the weights' storage alive until the scope ends). Scopes are per thread and
// nest; an inner scope's precision applies until it ends, and the cache belongs to the outermost.
//
//   tfm::InferenceMode scope(tfm::Precision::BFLOAT16);
//   tfm::Tensor y = layer.forward(x);
#pragma once

#include <memory>
#include <string>

#include "tfm/autograd.h"
#include "tfm/enum_names.h"

namespace tfm {

enum class Precision { FLOAT32, BFLOAT16, INT8 };
template <>
struct EnumNames<Precision> {
  static constexpr const char* noun = "precision";
  static constexpr std::array<std::pair<Precision, std::string_view>, 5> names{{{Precision::FLOAT32, "f32"},
                                                                               {Precision::BFLOAT16, "bf16"},
                                                                               {Precision::INT8, "int8"},
                                                                               {Precision::FLOAT32, "float32"},
                                                                               {Precision::BFLOAT16, "bfloat16"}}};
};

// True when Precision::INT8's matmuls run on this CPU's vector integer products: its int8 dot-product
// instructions (AVX512-VNNI or AMX-INT8, through oneDNN), or else AVX2's exact int16 products; false when
// they take the portable loop (same numbers, much slower) — a CPU without AVX2, or TFM_FORCE_SCALAR. For
// front ends to say so.
bool int8_matmul_accelerated();

// Packed Linear weights kept beyond one scope. An InferenceMode opened with a cache packs into it
// (instead of the outermost scope's own cache) and leaves what it packed there when it ends, so a
// module called many times packs each weight once (tfm::LoadedModule holds one per module). The
// contract is the scope's, for as long as the cache holds a weight: the weight must not change
// (clear() after changing it). A cache belongs to one thread at a time.
class PackedWeightCache {
 public:
  PackedWeightCache();
  ~PackedWeightCache();
  PackedWeightCache(const PackedWeightCache&) = delete;
  PackedWeightCache& operator=(const PackedWeightCache&) = delete;
  size_t size() const;  // packed weights held
  void clear();         // drops them, and the weights' storage they keep alive

 private:
  friend class InferenceMode;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class InferenceMode {
 public:
  explicit InferenceMode(Precision precision = Precision::FLOAT32);
  // A scope whose packed weights go into, and are reused from, `cache` (see PackedWeightCache);
  // scopes nested inside it use the same cache.
  InferenceMode(Precision precision, PackedWeightCache& cache);
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

  // Number of packed weights in the cache the innermost scope packs into (for tests and diagnostics).
  static size_t cached_weights();
  // The innermost active scope's precision on this thread; Float32 when no scope is active. A
  // library function that opens its own scope passes this on, so a caller's bf16 scope holds.
  static Precision current_precision();

 private:
  NoGradGuard no_grad_;
  Precision previous_precision_;
  bool outermost_;
};

}  // namespace tfm
