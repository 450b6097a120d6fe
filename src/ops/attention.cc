// src/ops/attention.cc — multi-head attention over projected q, k, v: mask normalisation
// (PyTorch's bool/float, 2-D/3-D, key padding, causal rules) and the flash-attention kernels.
#include "tfm/ops/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <tuple>

#include "kernels/kernels.h"
#include "ops/packed_linear.h"
#include "tfm/autocast.h"
#include "ops/check.h"
#include "tfm/autograd.h"

namespace tfm::ops {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A Bool mask becomes additive 0 / −inf; a Float32 mask is used as is.
Tensor to_additive(const Tensor& m) {
  if (m.dtype() == DType::FLOAT32) return m;
  Tensor f = Tensor::empty(m.shape());
  const uint8_t* b = m.data_bool();
  float* p = f.data();
  for (int64_t i = 0; i < m.numel(); ++i) p[i] = b[i] ? kNegInf : 0.0f;
  return f;
}

struct Layout {
  int64_t B, L, S;
  AttentionHeads heads;
  bool batch_first;
};

// Strides of (b, i) for a (B, T, C) / (T, B, C) source with row width C.
void strides(const Layout& lo, int64_t C, int64_t T, int64_t& sb, int64_t& sl) {
  if (lo.batch_first) {
    sb = T * C;
    sl = C;
  } else {
    sb = C;
    sl = lo.B * C;
  }
}

struct AttentionNode : Node {
  Layout lo{};
  int64_t q_col = 0, k_col = 0, v_col = 0;
  int q_src = 0, k_src = 0, v_src = 0;  // index into inputs of each role's source
  Tensor mask, kpm;                     // additive forms (undefined when absent)
  int64_t mask_sbh = 0;
  bool causal = false;
  float dropout_p = 0;
  uint64_t seed = 0, offset = 0;
  bool bf16 = false;  // bfloat16 products (Autocast(BFLOAT16)), the same in the backward as in the forward
  Tensor out, lse;  // saved forward output (B, L, H·Dv) / (L, B, H·Dv) and (B, H, L) log-sum-exp
  const char* name() const override { return "attention"; }

  kernels::AttentionParams params(const float* q, const float* k, const float* v) const {
    kernels::AttentionParams p;
    p.B = lo.B;
    p.H = lo.heads.num_heads;
    p.L = lo.L;
    p.S = lo.S;
    p.Dh = lo.heads.head_dim;
    p.Dv = lo.heads.v_head_dim;
    strides(lo, inputs[q_src].size(-1), lo.L, p.q_sb, p.q_sl);
    strides(lo, inputs[k_src].size(-1), lo.S, p.k_sb, p.k_sl);
    strides(lo, inputs[v_src].size(-1), lo.S, p.v_sb, p.v_sl);
    p.q = q + q_col;
    p.k = k + k_col;
    p.v = v + v_col;
    strides(lo, lo.heads.v_width(), lo.L, p.o_sb, p.o_sl);
    p.mask = mask.defined() ? mask.data() : nullptr;
    p.mask_sbh = mask_sbh;
    p.kpm = kpm.defined() ? kpm.data() : nullptr;
    p.causal = causal;
    p.scale = lo.heads.scale;
    p.dropout_p = dropout_p;
    p.seed = seed;
    p.offset = offset;
    p.bf16 = bf16;
    return p;
  }

  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    // One gradient buffer per distinct source; each role's kernel output lands in its column block.
    // A source whose columns the roles' blocks tile exactly (the packed (.., 2·H·Dh + H·Dv)
    // self-attention projection, the key/value one, or a single role) is fully overwritten by the
    // kernel: no zero fill.
    const int64_t wq = lo.heads.qk_width(), wv = lo.heads.v_width();
    std::vector<Tensor> grads(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::array<std::pair<int64_t, int64_t>, 3> blocks{};  // [col, col + width) of each role reading source i
      size_t n = 0;
      for (auto [src, col, w] : {std::tuple{q_src, q_col, wq}, std::tuple{k_src, k_col, wq}, std::tuple{v_src, v_col, wv}})
        if (src == static_cast<int>(i)) blocks[n++] = {col, col + w};
      std::sort(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(n));
      int64_t end = 0;
      bool full = true;
      for (size_t r = 0; r < n; ++r) {
        full = full && blocks[r].first == end;
        end = blocks[r].second;
      }
      full = full && end == inputs[i].size(-1);
      grads[i] = full ? Tensor::empty(inputs[i].shape()) : Tensor::zeros(inputs[i].shape());
    }
    kernels::AttentionParams p =
        params(inputs[q_src].data(), inputs[k_src].data(), inputs[v_src].data());
    p.o = const_cast<float*>(out.data());
    p.lse = const_cast<float*>(lse.data());
    kernels::attention_backward(p, dy.data(), grads[q_src].data() + q_col, grads[k_src].data() + k_col,
                                grads[v_src].data() + v_col);
    for (size_t i = 0; i < inputs.size(); ++i)
      if (din[i]) accumulate_grad(din[i], grads[i]);
  }
};

// Roles that read one tensor share a source (one gradient buffer, each role's block written into it by
// the kernel, which overwrites) when their column blocks are disjoint. A role whose block overlaps
// another's on that tensor (attention of x with itself: query and key both x's columns) gets a source
// of its own: its gradient is then added to the other's, not written over it.
struct RoleBlock {
  int src;
  int64_t col, end;
};
int source_index(std::vector<Tensor>& sources, std::vector<RoleBlock>& taken, const Tensor& t, int64_t col,
                 int64_t width) {
  for (size_t i = 0; i < sources.size(); ++i) {
    if (!sources[i].same(t)) continue;
    bool overlaps = false;
    for (const RoleBlock& r : taken)
      overlaps = overlaps || (r.src == static_cast<int>(i) && col < r.end && r.col < col + width);
    if (overlaps) continue;
    taken.push_back({static_cast<int>(i), col, col + width});
    return static_cast<int>(i);
  }
  sources.push_back(t);
  taken.push_back({static_cast<int>(sources.size() - 1), col, col + width});
  return static_cast<int>(sources.size() - 1);
}

}  // namespace

// One 64×64 score tile is where packing the operands into bf16 pairs stops costing more than the faster products
// save (bench/RESULTS.md, "Attention's products in bf16: from one score tile up", has the measurements).
bool bf16_attention_pays(int64_t L, int64_t S) { return L * S > 64 * 64; }

Tensor attention(const AttentionInput& q, const AttentionInput& k, const AttentionInput& v,
                 const AttentionHeads& heads, bool batch_first, const AttentionMasks& masks, float dropout_p,
                 bool training, Generator& gen) {
  const char* op = "attention";
  check_float(q.src, op, "query");
  check_float(k.src, op, "key");
  check_float(v.src, op, "value");
  check(q.src.dim() == 3 && k.src.dim() == 3 && v.src.dim() == 3, [&] {
    return std::string(op) + ": query, key and value must be 3-D, got " + describe(q.src) + ", " + describe(k.src) +
           ", " + describe(v.src);
  });
  check(heads.num_heads > 0 && heads.head_dim > 0 && heads.v_head_dim > 0, [&] {
    return std::string(op) + ": num_heads, head_dim and v_head_dim must be positive, got " +
           std::to_string(heads.num_heads) + ", " + std::to_string(heads.head_dim) + ", " +
           std::to_string(heads.v_head_dim);
  });
  Layout lo{};
  lo.batch_first = batch_first;
  lo.heads = heads;
  const int64_t H = heads.num_heads;
  lo.B = batch_first ? q.src.size(0) : q.src.size(1);
  lo.L = batch_first ? q.src.size(1) : q.src.size(0);
  lo.S = batch_first ? k.src.size(1) : k.src.size(0);
  auto check_src = [&](const AttentionInput& in, int64_t T, int64_t width, const char* name) {
    const int64_t b = batch_first ? in.src.size(0) : in.src.size(1);
    const int64_t t = batch_first ? in.src.size(1) : in.src.size(0);
    check(b == lo.B && t == T && in.col >= 0 && in.col + width <= in.src.size(2), [&] {
      return std::string(op) + ": " + name + " " + describe(in.src) + " (columns from " + std::to_string(in.col) +
             ") does not fit batch " + std::to_string(lo.B) + ", length " + std::to_string(T) + ", width " +
             std::to_string(width);
    });
  };
  check_src(q, lo.L, heads.qk_width(), "query");
  check_src(k, lo.S, heads.qk_width(), "key");
  check_src(v, lo.S, heads.v_width(), "value");

  auto node = std::make_shared<AttentionNode>();
  node->lo = lo;
  node->q_col = q.col;
  node->k_col = k.col;
  node->v_col = v.col;
  node->causal = masks.is_causal;
  if (masks.attn_mask.defined()) {
    const Tensor& m = masks.attn_mask;
    if (m.dim() == 2) {
      check(m.size(0) == lo.L && m.size(1) == lo.S, [&] {
        return "attn_mask: expected shape " + shape_str({lo.L, lo.S}) + ", got " + shape_str(m.shape());
      });
      node->mask_sbh = 0;
    } else {
      check(m.dim() == 3 && m.size(0) == lo.B * H && m.size(1) == lo.L && m.size(2) == lo.S, [&] {
        return "attn_mask: expected shape " + shape_str({lo.L, lo.S}) + " or " + shape_str({lo.B * H, lo.L, lo.S}) +
               ", got " + shape_str(m.shape());
      });
      node->mask_sbh = lo.L * lo.S;
    }
    node->mask = to_additive(m);
  }
  if (masks.key_padding_mask.defined()) {
    const Tensor& m = masks.key_padding_mask;
    check(m.dim() == 2 && m.size(0) == lo.B && m.size(1) == lo.S, [&] {
      return "key_padding_mask: expected shape " + shape_str({lo.B, lo.S}) + ", got " + shape_str(m.shape());
    });
    node->kpm = to_additive(m);
  }
  // Under Autocast(BFLOAT16) the products QKᵀ and PV (and their backward) take bfloat16 operands, as
  // PyTorch's autocast runs them, where that pays (bf16_attention_pays); an InferenceMode scope inside keeps them
  // float32.
  node->bf16 = Autocast::current_precision() == Precision::BFLOAT16 && !inference_scope_active() &&
               bf16_attention_pays(lo.L, lo.S);
  const bool train_dropout = training && dropout_p > 0.0f;
  node->dropout_p = train_dropout ? dropout_p : 0.0f;
  if (train_dropout) {
    node->seed = gen.seed;
    node->offset = gen.take(static_cast<uint64_t>(lo.B * H * lo.L * lo.S));
  }

  std::vector<Tensor> sources;
  std::vector<RoleBlock> taken;
  node->q_src = source_index(sources, taken, q.src, q.col, heads.qk_width());
  node->k_src = source_index(sources, taken, k.src, k.col, heads.qk_width());
  node->v_src = source_index(sources, taken, v.src, v.col, heads.v_width());
  node->inputs = sources;

  const int64_t Ev = heads.v_width();
  Tensor out = Tensor::empty(batch_first ? Shape{lo.B, lo.L, Ev} : Shape{lo.L, lo.B, Ev});
  const bool grad = needs_grad({&q.src, &k.src, &v.src});
  Tensor lse = grad ? Tensor::empty({lo.B, H, lo.L}) : Tensor();
  kernels::AttentionParams p = node->params(q.src.data(), k.src.data(), v.src.data());
  p.o = out.data();
  p.lse = grad ? lse.data() : nullptr;
  kernels::attention_forward(p);
  if (grad) {
    node->out = out.detach();
    node->lse = lse;
    record(out, node);
  }
  return out;
}

namespace {

// append_positions' backward: dx = dy's first S positions, drow = Σ_b dy[b, S] (b in order).
struct AppendPositionsNode : Node {
  int64_t B = 0, S = 0, n = 0, W = 0;
  bool batch_first = false;
  const char* name() const override { return "append_positions"; }
  void backward(const Tensor& dy, const std::vector<Tensor*>& din) override {
    const float* g = dy.data();
    const int64_t T = S + n;
    if (din[0]) {
      Tensor dx = Tensor::empty(inputs[0].shape());
      float* d = dx.data();
      if (batch_first) {
        for (int64_t b = 0; b < B; ++b) std::copy_n(g + b * T * W, S * W, d + b * S * W);
      } else {  // (T, B, W): the first S positions are the first S·B rows
        std::copy_n(g, S * B * W, d);
      }
      accumulate_grad(din[0], dx);
    }
    if (inputs[1].defined() && din[1]) {
      Tensor dr = Tensor::zeros(inputs[1].shape());
      float* d = dr.data();
      for (int64_t b = 0; b < B; ++b) {
        const float* src = g + (batch_first ? b * T + S : S * B + b) * W;
        for (int64_t w = 0; w < W; ++w) d[w] += src[w];
      }
      accumulate_grad(din[1], dr);
    }
  }
};

}  // namespace

Tensor append_positions(const Tensor& x, const Tensor& row, int64_t zeros, bool batch_first) {
  const char* op = "append_positions";
  check_float(x, op, "input");
  check(x.dim() == 3, [&] { return std::string(op) + ": input must be 3-D, got " + describe(x); });
  check(zeros >= 0, [&] { return std::string(op) + ": zeros must be ≥ 0, got " + std::to_string(zeros); });
  const int64_t W = x.size(2), B = batch_first ? x.size(0) : x.size(1), S = batch_first ? x.size(1) : x.size(0);
  if (row.defined()) {
    check_float(row, op, "row");
    check(row.numel() == W, [&] {
      return std::string(op) + ": row must hold " + std::to_string(W) + " values (the input's width), got " +
             describe(row);
    });
  }
  const int64_t n = (row.defined() ? 1 : 0) + zeros, T = S + n;
  Tensor y = Tensor::empty(batch_first ? Shape{B, T, W} : Shape{T, B, W});
  const float* px = x.data();
  const float* pr = row.defined() ? row.data() : nullptr;
  float* py = y.data();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      float* dst = py + (batch_first ? b * T + t : t * B + b) * W;
      if (t < S)
        std::copy_n(px + (batch_first ? b * S + t : t * B + b) * W, W, dst);
      else if (t == S && pr)
        std::copy_n(pr, W, dst);
      else
        std::fill_n(dst, W, 0.0f);
    }
  if (needs_grad({&x, &row})) {
    auto node = std::make_shared<AppendPositionsNode>();
    node->B = B;
    node->S = S;
    node->n = n;
    node->W = W;
    node->batch_first = batch_first;
    node->inputs = {x, row};
    record(y, node);
  }
  return y;
}

AttentionMasks pad_key_masks(const AttentionMasks& masks, int64_t L, int64_t S, int64_t n) {
  check(n >= 1, [&] { return "pad_key_masks: n must be ≥ 1, got " + std::to_string(n); });
  const int64_t T = S + n;
  // m's rows of S additive values, each followed by n zeros.
  auto padded = [&](const Tensor& m) {
    const Tensor a = to_additive(m);
    Shape shape = a.shape();
    shape.back() = T;
    Tensor out = Tensor::zeros(shape);
    const int64_t rows = out.numel() / T;  // T ≥ n ≥ 1 (S may be 0)
    for (int64_t r = 0; r < rows; ++r) std::copy_n(a.data() + r * S, S, out.data() + r * T);
    return out;
  };
  AttentionMasks out;
  if (masks.attn_mask.defined()) {
    const Tensor& m = masks.attn_mask;
    check((m.dim() == 2 || m.dim() == 3) && m.size(-2) == L && m.size(-1) == S, [&] {
      return "attn_mask: expected shape " + shape_str({L, S}) + " or (B·H, " + std::to_string(L) + ", " +
             std::to_string(S) + "), got " + shape_str(m.shape());
    });
    out.attn_mask = padded(m);
  } else if (masks.is_causal) {
    out.attn_mask = Tensor::zeros({L, T});
  }
  if (masks.is_causal) {  // key j > query i hidden, for the first S keys only
    float* p = out.attn_mask.data();
    const int64_t matrices = out.attn_mask.dim() == 3 ? out.attn_mask.size(0) : 1;
    for (int64_t k = 0; k < matrices; ++k)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = i + 1; j < S; ++j) p[(k * L + i) * T + j] = kNegInf;
  }
  if (masks.key_padding_mask.defined()) {
    const Tensor& m = masks.key_padding_mask;
    check(m.dim() == 2 && m.size(1) == S, [&] {
      return "key_padding_mask: expected shape (B, " + std::to_string(S) + "), got " + shape_str(m.shape());
    });
    out.key_padding_mask = padded(m);
  }
  return out;
}

}  // namespace tfm::ops
