// src/ops/check.h — argument checks at the op boundary: each names the tensor and prints expected
// against actual. Kernels below this line trust their arguments.
#pragma once

#include <stdexcept>
#include <string>

#include "tfm/tensor.h"

namespace tfm::ops {

inline void check(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument(msg);
}
inline void check_float(const Tensor& t, const char* op, const char* name) {
  check(t.defined(), std::string(op) + ": " + name + " is undefined");
  check(t.dtype() == DType::FLOAT32,
        std::string(op) + ": " + name + " must be Float32, got " + describe(t));
}
inline void check_shape(const Tensor& t, const Shape& expected, const char* op, const char* name) {
  check(t.shape() == expected, std::string(op) + ": " + name + " expected shape " + shape_str(expected) +
                                   ", got " + shape_str(t.shape()));
}

}  // namespace tfm::ops
