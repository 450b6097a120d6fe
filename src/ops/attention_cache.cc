// src/ops/attention_cache.cc — KVCache and the single-query attention of incremental decoding,
// over the flash-attention kernel with strides into the cache buffers.
#include "tfm/ops/attention_cache.h"

#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "ops/check.h"
#include "tfm/autograd.h"

namespace tfm::ops {
namespace {

void check_inference(std::initializer_list<const Tensor*> ts, const char* op) {
  check(!needs_grad(ts), [&] { return std::string(op) + ": inference only; run it under NoGradGuard"; });
}

// (N, 1, C) query source with columns [col, col + E).
void check_query(const AttentionInput& q, int64_t E, const char* op) {
  check_float(q.src, op, "query");
  check(q.src.dim() == 3 && q.src.size(1) == 1 && q.col >= 0 && q.col + E <= q.src.size(2), [&] {
    return std::string(op) + ": query must be (N, 1, C ≥ col + " + std::to_string(E) + "), got " + describe(q.src) +
           " with col " + std::to_string(q.col);
  });
}

}  // namespace

void KVCache::reset(int64_t N, int64_t capacity, int64_t Ek, int64_t Ev) {
  check(N >= 0 && capacity >= 1 && Ek >= 1 && Ev >= 1, "KVCache::reset: bad sizes");
  k = Tensor::empty({N, capacity, Ek});
  v = Tensor::empty({N, capacity, Ev});
  length = 0;
}

void KVCache::append(const Tensor& src, int64_t k_col, int64_t v_col) {
  check(k.defined(), "KVCache::append: cache not reset");
  const int64_t N = k.size(0), cap = k.size(1), E = k.size(2), Ev = v.size(2);
  check_float(src, "KVCache::append", "src");
  check(src.dim() == 3 && src.size(0) == N && src.size(1) >= 1 && k_col >= 0 && v_col >= 0 &&
            k_col + E <= src.size(2) && v_col + Ev <= src.size(2),
        [&] {
          return "KVCache::append: src " + describe(src) + " does not fit " + std::to_string(N) + " rows of keys " +
                 std::to_string(E) + " and values " + std::to_string(Ev) + " wide";
        });
  const int64_t T = src.size(1);
  if (length + T > cap) {  // grow: double the capacity until the new positions fit, keep [0, length)
    int64_t bigger_cap = cap;
    while (length + T > bigger_cap) bigger_cap *= 2;
    KVCache bigger;
    bigger.reset(N, bigger_cap, E, Ev);
    for (int64_t n = 0; n < N; ++n) {
      std::memcpy(bigger.k.data() + n * bigger_cap * E, k.data() + n * cap * E, sizeof(float) * length * E);
      std::memcpy(bigger.v.data() + n * bigger_cap * Ev, v.data() + n * cap * Ev, sizeof(float) * length * Ev);
    }
    bigger.length = length;
    *this = bigger;
  }
  const int64_t C = src.size(2), capacity = k.size(1);
  const float* s = src.data();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < T; ++t) {
      const float* row = s + (n * T + t) * C;
      std::memcpy(k.data() + (n * capacity + length + t) * E, row + k_col, sizeof(float) * E);
      std::memcpy(v.data() + (n * capacity + length + t) * Ev, row + v_col, sizeof(float) * Ev);
    }
  length += T;
}

void KVCache::select_rows(const std::vector<int64_t>& rows) {
  check(k.defined(), "KVCache::select_rows: cache not reset");
  const int64_t N = k.size(0), cap = k.size(1), E = k.size(2), Ev = v.size(2);
  Tensor nk = Tensor::empty({static_cast<int64_t>(rows.size()), cap, E});
  Tensor nv = Tensor::empty({static_cast<int64_t>(rows.size()), cap, Ev});
  for (size_t r = 0; r < rows.size(); ++r) {
    check(rows[r] >= 0 && rows[r] < N, [&] {
      return "KVCache::select_rows: row " + std::to_string(rows[r]) + " out of range [0, " + std::to_string(N) + ")";
    });
    const int64_t r_out = static_cast<int64_t>(r);
    std::memcpy(nk.data() + r_out * cap * E, k.data() + rows[r] * cap * E, sizeof(float) * length * E);
    std::memcpy(nv.data() + r_out * cap * Ev, v.data() + rows[r] * cap * Ev, sizeof(float) * length * Ev);
  }
  k = nk;
  v = nv;
}

// o_n = Σ_{j<length} softmax_j(scale·q_n·k_nj) v_nj per head.
Tensor attention_step(const AttentionInput& q, const KVCache& cache, const AttentionHeads& heads) {
  const char* op = "attention_step";
  const int64_t Ek = heads.qk_width(), Ev = heads.v_width();
  check(heads.num_heads > 0 && heads.head_dim > 0 && heads.v_head_dim > 0,
        [&] { return std::string(op) + ": num_heads, head_dim and v_head_dim must be positive"; });
  check_query(q, Ek, op);
  check(cache.k.defined() && cache.k.size(0) == q.src.size(0) && cache.k.size(2) == Ek && cache.v.size(2) == Ev &&
            cache.length >= 1,
        [&] { return std::string(op) + ": cache does not match query " + describe(q.src); });
  check_inference({&q.src}, op);
  const int64_t N = q.src.size(0), C = q.src.size(2), cap = cache.k.size(1);
  Tensor out = Tensor::empty({N, 1, Ev});
  kernels::AttentionParams p;
  p.B = N;
  p.H = heads.num_heads;
  p.L = 1;
  p.S = cache.length;
  p.Dh = heads.head_dim;
  p.Dv = heads.v_head_dim;
  p.q = q.src.data() + q.col;
  p.q_sb = C;
  p.q_sl = C;
  p.k = cache.k.data();
  p.k_sb = cap * Ek;
  p.k_sl = Ek;
  p.v = cache.v.data();
  p.v_sb = cap * Ev;
  p.v_sl = Ev;
  p.o = out.data();
  p.o_sb = Ev;
  p.o_sl = Ev;
  p.scale = heads.scale;
  if (N > 0) kernels::attention_forward(p);
  return out;
}

Tensor attention_memory(const AttentionInput& q, const AttentionInput& k, const AttentionInput& v,
                        const std::vector<int64_t>& row_source, const std::vector<int64_t>& memory_len,
                        const AttentionHeads& heads, bool batch_first) {
  const char* op = "attention_memory";
  const int64_t Ek = heads.qk_width(), Ev = heads.v_width();
  check(heads.num_heads > 0 && heads.head_dim > 0 && heads.v_head_dim > 0,
        [&] { return std::string(op) + ": num_heads, head_dim and v_head_dim must be positive"; });
  check_query(q, Ek, op);
  check_float(k.src, op, "key");
  check_float(v.src, op, "value");
  check(k.src.dim() == 3 && v.src.dim() == 3 && k.src.size(0) == v.src.size(0) && k.src.size(1) == v.src.size(1) &&
            k.col >= 0 && v.col >= 0 && k.col + Ek <= k.src.size(2) && v.col + Ev <= v.src.size(2),
        [&] {
          return std::string(op) + ": key " + describe(k.src) + " and value " + describe(v.src) +
                 " do not fit widths " + std::to_string(Ek) + " and " + std::to_string(Ev);
        });
  check_inference({&q.src, &k.src, &v.src}, op);
  const int64_t N = q.src.size(0), C = q.src.size(2);
  const int64_t Bm = k.src.size(batch_first ? 0 : 1), S = k.src.size(batch_first ? 1 : 0);
  // Memory row b, key j: element (b, j) of k.src starts at b·k_b + j·k_j (likewise v).
  const int64_t Ck = k.src.size(2), Cv = v.src.size(2);
  const int64_t k_b = batch_first ? S * Ck : Ck, k_j = batch_first ? Ck : Bm * Ck;
  const int64_t v_b = batch_first ? S * Cv : Cv, v_j = batch_first ? Cv : Bm * Cv;
  check(static_cast<int64_t>(row_source.size()) == N && static_cast<int64_t>(memory_len.size()) == Bm, [&] {
    return std::string(op) + ": row_source needs " + std::to_string(N) + " entries and memory_len " +
           std::to_string(Bm);
  });
  Tensor out = Tensor::zeros({N, 1, Ev});
  int64_t n0 = 0;
  while (n0 < N) {
    const int64_t b = row_source[static_cast<size_t>(n0)];
    check(b >= 0 && b < Bm, [&] { return std::string(op) + ": row_source " + std::to_string(b) + " out of range"; });
    const int64_t len = memory_len[static_cast<size_t>(b)];
    check(len >= 0 && len <= S, [&] { return std::string(op) + ": memory_len " + std::to_string(len) + " exceeds S"; });
    int64_t n1 = n0 + 1;
    while (n1 < N && row_source[static_cast<size_t>(n1)] == b) ++n1;
    if (len > 0) {  // an empty memory leaves the zeros (all keys masked)
      kernels::AttentionParams p;
      p.B = n1 - n0;
      p.H = heads.num_heads;
      p.L = 1;
      p.S = len;
      p.Dh = heads.head_dim;
      p.Dv = heads.v_head_dim;
      p.q = q.src.data() + n0 * C + q.col;
      p.q_sb = C;
      p.q_sl = C;
      p.k = k.src.data() + b * k_b + k.col;  // every row of the group reads the same memory
      p.k_sb = 0;
      p.k_sl = k_j;
      p.v = v.src.data() + b * v_b + v.col;
      p.v_sb = 0;
      p.v_sl = v_j;
      p.o = out.data() + n0 * Ev;
      p.o_sb = Ev;
      p.o_sl = Ev;
      p.scale = heads.scale;
      kernels::attention_forward(p);
    }
    n0 = n1;
  }
  return out;
}

}  // namespace tfm::ops
