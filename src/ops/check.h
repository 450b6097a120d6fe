// src/ops/check.h — argument checks at the op boundary: each names the tensor and prints expected
// against actual. Kernels below this line trust their arguments.
#pragma once

#include <stdexcept>
#include <string>

#include "tfm/tensor.h"

namespace tfm::ops {

// Throws std::invalid_argument unless ok. The message is a literal, or a callable that builds it: only
// on failure, since the checks run on every call of an op (some once per id or target of a batch), where
// building a message of shapes and numbers each time cost more than the small ops they guard.
inline void check(bool ok, const char* msg) {
  if (!ok) throw std::invalid_argument(msg);
}
template <class Message>
inline void check(bool ok, Message&& message) {
  if (!ok) [[unlikely]]
    throw std::invalid_argument(std::string(message()));
}
inline void check_float(const Tensor& t, const char* op, const char* name) {
  check(t.defined(), [&] { return std::string(op) + ": " + name + " is undefined"; });
  check(t.dtype() == DType::FLOAT32,
        [&] { return std::string(op) + ": " + name + " must be Float32, got " + describe(t); });
}
inline void check_shape(const Tensor& t, const Shape& expected, const char* op, const char* name) {
  check(t.shape() == expected, [&] {
    return std::string(op) + ": " + name + " expected shape " + shape_str(expected) + ", got " + shape_str(t.shape());
  });
}

}  // namespace tfm::ops
