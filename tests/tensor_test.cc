// tests/tensor_test.cc — Tensor storage (src/tensor.cc): Tensor::from_external, memory the caller
// owns wrapped without a copy (what zero-copy safetensors loading is built on) — views keep the owner
// alive, the last one releases it, clones copy, and the memory never enters the allocator's cache.
// The tape is tested in autograd_test.cc.
// To add a case: a TEST on a small tensor, checking data pointers and values directly.
#include "tfm/tensor.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

#include "tensor_impl.h"

namespace tfm {
namespace {

TEST(FromExternal, WrapsWithoutCopyAndReleasesOwnerWithLastView) {
  bool released = false;
  auto buffer = std::shared_ptr<float[]>(new float[6]{1, 2, 3, 4, 5, 6}, [&](float* p) {
    released = true;
    delete[] p;
  });
  float* raw = buffer.get();
  Tensor t = Tensor::from_external({2, 3}, raw, buffer);
  buffer.reset();
  EXPECT_EQ(t.data(), raw);
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  Tensor row = t.narrow0(1, 1);
  t.data()[4] = 50.0f;  // writes go to the external memory
  EXPECT_EQ(row.data()[1], 50.0f);
  Tensor copy = t.clone();
  EXPECT_NE(copy.data(), raw);
  t = Tensor();
  EXPECT_FALSE(released) << "the narrow0 view must keep the owner alive";
  row = Tensor();
  EXPECT_TRUE(released);
  EXPECT_EQ(copy.data()[4], 50.0f);
}

TEST(FromExternal, NullOwnerAndEmptyTensors) {
  static float values[4] = {1, 2, 3, 4};  // outlives every use: no owner needed
  const size_t cached = allocator_stats().cached_bytes;
  {
    Tensor t = Tensor::from_external({4}, values, nullptr);
    EXPECT_EQ(t.data(), values);
    EXPECT_EQ(t.detach().data()[3], 4.0f);
  }
  EXPECT_EQ(allocator_stats().cached_bytes, cached) << "external memory went to the block cache";
  const Tensor e = Tensor::from_external({0, 3}, nullptr, nullptr);
  EXPECT_EQ(e.numel(), 0);
}

TEST(FromExternal, RejectsNullAndMisalignedData) {
  alignas(8) static char bytes[16] = {};
  EXPECT_THROW(Tensor::from_external({2}, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(Tensor::from_external({2}, reinterpret_cast<float*>(bytes + 2), nullptr), std::invalid_argument);
  EXPECT_THROW(Tensor::from_external({-1}, reinterpret_cast<float*>(bytes), nullptr), std::invalid_argument);
  EXPECT_NO_THROW(Tensor::from_external({2}, reinterpret_cast<float*>(bytes + 4), nullptr));
}

}  // namespace
}  // namespace tfm
