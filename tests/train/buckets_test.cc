// tests/train/buckets_test.cc — the bucketed gradient exchange (src/train/buckets.h) in one process:
// the bucket and chunk layout on a hand-checked case, and the driver (stage, callbacks during the
// last part's backward, fold) against the plain left fold of the parts' gradients, bit for bit.
// Across processes the same driver runs under mpirun in tests/mpi/buckets_test.cc.
#include <gtest/gtest.h>

#include "tfm/models/model.h"
#include "train/buckets.h"

namespace tfm::train {
namespace {

// Parameters of 10, 40000, 5, 20000 and 3 elements (offsets 0, 10, 40010, 40015, 60015, 60018),
// buckets closed once they hold 20005 elements, cut from the end, P = 3:
//   bucket 0: parameters 4, 3 (20003, not yet 20005), 2 (20008: closed), flat
//     [40010, 60018); block starts 40010, 40015, 56399 (= 40015 + 16384), 60015 and the end 60018;
//     targets 40010 + 20008/3 = 46679 → 40015 (6664 away, 56399 is 9720), 40010 + 40016/3 = 53348 → 56399;
//   bucket 1: parameter 1 (40000: closed at once), [10, 40010); starts 10, 16394, 32778, end 40010; targets 13343 →
//     16394, 26676 → 32778;
//   bucket 2: parameter 0, [0, 10): targets 3 → 0 (nearer than 10), 6 → 10 (4 away, 0 is 6).
TEST(Buckets, LayoutFromTheLastParameterWithChunksOnBlockStarts) {
  const std::vector<int64_t> offsets = {0, 10, 40010, 40015, 60015, 60018};
  const std::vector<Bucket> b = make_buckets(offsets, 20005, 3);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].first, 2);
  EXPECT_EQ(b[0].end, 5);
  EXPECT_EQ(b[0].bounds, (std::vector<int64_t>{40010, 40015, 56399, 60018}));
  EXPECT_EQ(b[1].first, 1);
  EXPECT_EQ(b[1].end, 2);
  EXPECT_EQ(b[1].bounds, (std::vector<int64_t>{10, 16394, 32778, 40010}));
  EXPECT_EQ(b[2].first, 0);
  EXPECT_EQ(b[2].end, 1);
  EXPECT_EQ(b[2].bounds, (std::vector<int64_t>{0, 0, 10, 10}));
  // One bucket for everything, one process: the whole vector is rank 0's chunk.
  const std::vector<Bucket> one = make_buckets(offsets, 1 << 30, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].bounds, (std::vector<int64_t>{0, 60018}));
  EXPECT_THROW(make_buckets(offsets, 0, 2), std::invalid_argument);
}

data::TokenBatch rows(std::vector<std::vector<int32_t>> src, std::vector<std::vector<int32_t>> tgt) {
  data::TokenBatch b;
  b.B = static_cast<int64_t>(src.size()), b.S = 4, b.T = 5;
  for (size_t r = 0; r < src.size(); ++r) {
    for (int64_t s = 0; s < b.S; ++s) b.src.push_back(s < static_cast<int64_t>(src[r].size()) ? src[r][s] : 0);
    const int64_t n = static_cast<int64_t>(tgt[r].size());
    for (int64_t i = 0; i < b.T; ++i) {
      b.tgt_in.push_back(i == 0 ? 1 : i <= n ? tgt[r][i - 1] : 0);
      b.tgt_out.push_back(i < n ? tgt[r][i] : i == n ? 2 : 0);
    }
  }
  return b;
}

// Three parts of a tiny seq2seq model in one process (local = G = 3), buckets of 2 kB: the parts'
// gradients staged, the last one through the backward's callbacks, folded, against
// acc = (g₀ + g₁) + g₂ computed from the parts' saved gradients.
TEST(BucketedExchange, OneProcessFoldEqualsThePartsLeftFoldBitForBit) {
  ModelConfig c;
  c.arch = Arch::SEQ2SEQ;
  c.d_model = 16, c.nhead = 2, c.num_encoder_layers = c.num_decoder_layers = 1, c.dim_feedforward = 32;
  c.src_vocab_size = c.tgt_vocab_size = 10, c.pad_id = 0, c.bos_id = 1, c.eos_id = 2, c.max_len = 8;
  c.dropout = 0.0f;
  Generator gen{3, 0};
  Model model(c, gen);
  model.train();
  const std::vector<Tensor> params = model.parameters();
  std::vector<int64_t> offsets{0};
  for (const auto& p : params) offsets.push_back(offsets.back() + p.numel());
  const int64_t N = offsets.back();
  Comm single;
  BucketedExchange ex(params, offsets, 3, 2048, single);
  ASSERT_GE(ex.buckets().size(), 3u);
  const std::vector<data::TokenBatch> parts = {rows({{3, 4, 5}, {7}}, {{5, 4}, {3, 7, 8}}),
                                               rows({{9, 8, 7, 6}}, {{6, 7, 8, 9}}),
                                               rows({{4, 4}, {5, 3, 3}}, {{4}, {3, 3, 5}})};
  std::vector<std::vector<float>> grads;  // per part: the flat gradient
  for (int64_t j = 0; j < 3; ++j) {
    for (auto p : params) p.zero_grad();
    Tensor loss = model.loss(parts[static_cast<size_t>(j)], 0.1f, 11);
    if (j < 2) {
      loss.backward();
      ex.stage_part(j, /*empty=*/false);
    } else {
      loss.backward(Tensor(), [&](const Tensor& leaf) { ex.on_grad_final(leaf); });
      EXPECT_EQ(ex.started(), ex.buckets().size()) << "every bucket starts during the backward";
      ex.finish_last(/*empty=*/false);
    }
    std::vector<float> flat(static_cast<size_t>(N), 0.0f);
    for (size_t i = 0; i < params.size(); ++i)
      if (params[i].grad().defined())
        std::copy(params[i].grad().data(), params[i].grad().data() + params[i].numel(), flat.begin() + offsets[i]);
    grads.push_back(std::move(flat));
  }
  std::vector<float> acc(static_cast<size_t>(N), -1.0f);
  ex.fold(acc.data(), /*timed_first=*/true);
  EXPECT_EQ(ex.started(), 0u);  // ready for the next step
  for (int64_t i = 0; i < N; ++i) {
    const size_t k = static_cast<size_t>(i);
    const float expected = (grads[0][k] + grads[1][k]) + grads[2][k];
    ASSERT_EQ(acc[k], expected) << "element " << i;
  }
  // An empty last part contributes zeros: finish_last alone starts every bucket.
  for (auto p : params) p.zero_grad();
  ex.stage_part(0, false);
  ex.stage_part(1, false);
  ex.finish_last(/*empty=*/true);
  ex.fold(acc.data(), true);
  for (int64_t i = 0; i < N; ++i) ASSERT_EQ(acc[static_cast<size_t>(i)], 0.0f + 0.0f + 0.0f) << "element " << i;
}

}  // namespace
}  // namespace tfm::train
