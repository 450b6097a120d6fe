// tfm/tensor.h — the Tensor: a reference-counted handle to shaped, contiguous storage, plus the
// autograd metadata (requires_grad, grad, grad_fn) of the define-by-run tape in tfm/autograd.h.
//
// Dtypes: Float32 for all math; Bool (one byte, 0/1) for masks. Tensors are always contiguous and
// row-major; a view (reshape, narrow along dim 0) shares storage at an element offset.
// Copying a Tensor copies the handle (like torch.Tensor in Python): use clone() for a deep copy.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tfm {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "(2, 3, 4)"
int64_t shape_numel(const Shape& s);    // throws on negative dims or int64 overflow

enum class DType : uint8_t { FLOAT32, BOOL };
const char* dtype_name(DType t);

class Node;
struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() == false

  static Tensor empty(const Shape& shape, DType dtype = DType::FLOAT32);  // uninitialized
  static Tensor zeros(const Shape& shape, DType dtype = DType::FLOAT32);
  static Tensor full(const Shape& shape, float value);
  static Tensor from_vector(const Shape& shape, const std::vector<float>& values);
  static Tensor from_bool(const Shape& shape, const std::vector<uint8_t>& values);
  // A Float32 tensor over memory tfm does not own, without copying: data holds numel(shape)
  // floats, 4-byte aligned (null only when numel is 0). `owner` (any shared_ptr: a mapped file, a
  // buffer, or null when the memory outlives every use) is kept alive by this tensor and by every
  // view, reshape, narrow0 and detach sharing its storage, and released with the last of them; the
  // allocator never frees or caches `data`. Writes through the tensor (copy_, fill_, an optimizer
  // step) go to that memory. clone() makes an owned copy. Throws std::invalid_argument on a null
  // or misaligned pointer.
  static Tensor from_external(const Shape& shape, float* data, std::shared_ptr<void> owner);

  bool defined() const { return impl_ != nullptr; }
  DType dtype() const;
  const Shape& shape() const;
  int64_t dim() const;
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;

  float* data();  // Float32 only (throws otherwise)
  const float* data() const;
  uint8_t* data_bool();  // Bool only
  const uint8_t* data_bool() const;
  float item() const;  // single-element Float32 tensor

  // Views share storage. reshape: same numel (one dim may be -1). narrow0: rows [start, start+len)
  // of dim 0. Both are recorded on the autograd tape when needed.
  Tensor reshape(const Shape& shape) const;
  Tensor narrow0(int64_t start, int64_t length) const;
  Tensor clone() const;   // deep copy, no autograd history
  Tensor detach() const;  // shares storage, no autograd history, requires_grad false
  void copy_(const Tensor& src);  // element copy, same shape and dtype; not recorded
  // PyTorch's Tensor.set_(source) for same-shaped tensors: this handle's target now views source's
  // storage (no copy); every handle of the same target sees it, views taken before keep the old
  // storage. Same shape and dtype (throws otherwise); not recorded. Module::load_state_dict's assign.
  void set_(const Tensor& source);
  void fill_(float value);
  bool same(const Tensor& other) const { return impl_ == other.impl_; }  // same handle target

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);  // leaves only
  bool is_leaf() const;                    // no grad_fn
  Tensor grad() const;                     // accumulated gradient of a leaf (undefined if none)
  Tensor& mutable_grad();                  // the slot the engine accumulates into
  void zero_grad();                        // drops the gradient (as set_to_none=True)
  const std::shared_ptr<Node>& grad_fn() const;
  void set_grad_fn(std::shared_ptr<Node> fn);  // used by ops; marks requires_grad
  // Backpropagate from this tensor: d(sum(self ⊙ grad_output)) into every leaf's grad.
  // grad_output may be undefined for a single-element tensor (then 1). Frees the tape behind it.
  void backward(const Tensor& grad_output = Tensor()) const;
  // The same backward, calling on_grad_final(leaf) once for every leaf requiring grad that the tape
  // reaches, as soon as its grad is final: right after the last node, in execution order, that has
  // the leaf among its inputs (whether or not a gradient reached that node). Leaves whose final node
  // is the same are reported in the order of that node's inputs; the order is a function of the
  // graph alone. leaf.grad() may be undefined (no gradient reached it). The callback may read the
  // leaf's grad but must not write it nor run autograd. A data-parallel step uses it to send a
  // layer's gradients while the backward of the layers below it still runs.
  void backward(const Tensor& grad_output, const std::function<void(const Tensor& leaf)>& on_grad_final) const;

  TensorImpl* impl() const { return impl_.get(); }
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::string describe(const Tensor& t);  // "Float32(2, 3)" for messages

}  // namespace tfm
