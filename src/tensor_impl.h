// src/tensor_impl.h — what a Tensor handle points to. Internal: ops and I/O may use it, users may not.
#pragma once

#include <memory>

#include "tfm/autograd.h"
#include "tfm/tensor.h"

namespace tfm {

// 64-byte aligned bytes. Either owned (freed on destruction) or borrowed from a keeper
// (e.g. a memory-mapped file) that outlives every tensor pointing into it.
struct Storage {
  void* ptr = nullptr;
  size_t bytes = 0;
  std::shared_ptr<void> keeper;  // set for borrowed memory; null when owned
  ~Storage();
};
std::shared_ptr<Storage> allocate_storage(size_t bytes);

struct TensorImpl {
  Shape shape;
  DType dtype = DType::Float32;
  int64_t numel = 0;
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  bool requires_grad = false;
  Tensor grad;                     // leaves: accumulated gradient
  std::shared_ptr<Node> grad_fn;   // non-leaves: the node that produced this tensor
};

// A tensor that views `bytes` owned by `keeper` (zero-copy loading). ptr must be 4-byte aligned
// for Float32.
Tensor tensor_from_borrowed(const Shape& shape, DType dtype, void* ptr, std::shared_ptr<void> keeper);

}  // namespace tfm
