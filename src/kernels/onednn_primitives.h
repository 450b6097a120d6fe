// src/kernels/onednn_primitives.h — what the kernels that run oneDNN's matmul primitive share
// (gemm_packed.cc, gemm_bf16.cc): one CPU engine for the process, one stream per thread (a primitive
// executed on it runs on the calling thread when oneDNN's thread budget is 1: gemm_backend.h,
// SerialOmpScope), and grow-only per-thread buffers for scratchpads and rounded operands.
#pragma once

#include <cstddef>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace tfm::kernels::onednn {

inline dnnl::engine& cpu_engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

inline dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(cpu_engine());
  return s;
}

// buf grown to at least n elements (never shrunk: no allocation in the steady state); its data.
template <typename T>
T* thread_buffer(std::vector<T>& buf, size_t n) {
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

}  // namespace tfm::kernels::onednn
