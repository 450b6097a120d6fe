// src/tensor.cc — Tensor storage, views and the autograd engine (topological backward).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "kernels/kernels.h"
#include "tensor_impl.h"
#include "tfm/autograd.h"

namespace tfm {

// ---- shapes ---------------------------------------------------------------------------------------
std::string shape_str(const Shape& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  if (s.size() == 1) r += ",";
  return r + ")";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + shape_str(s));
    if (d != 0 && n > INT64_MAX / d) throw std::overflow_error("shape " + shape_str(s) + " overflows int64");
    n *= d;
  }
  return n;
}

const char* dtype_name(DType t) { return t == DType::FLOAT32 ? "Float32" : "Bool"; }
static size_t dtype_size(DType t) { return t == DType::FLOAT32 ? 4 : 1; }

// ---- storage --------------------------------------------------------------------------------------
// The block cache. Sizes are rounded up to a size class (multiples of 64 B up to 4 KiB, then four
// classes per power of two, so at most 25% slack) and freed blocks wait in a per-class free list.
// One mutex guards it: tensors are created and destroyed by the op layer on the calling thread,
// never inside the kernels' parallel loops, so it is uncontended.
namespace {

size_t size_class(size_t bytes) {
  if (bytes <= 4096) return bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  int top = 63 - __builtin_clzll(static_cast<unsigned long long>(bytes));  // 2^top ≤ bytes
  size_t step = size_t(1) << (top - 2);
  return (bytes + step - 1) / step * step;
}

class BlockCache {
 public:
  void* get(size_t cls) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= cls;
        ++hits_;
        return p;
      }
      ++mallocs_;
    }
    void* p = std::aligned_alloc(64, cls);
    if (!p) {  // memory may be tied up in idle blocks: release them and try once more
      release_all();
      p = std::aligned_alloc(64, cls);
      if (!p) throw std::bad_alloc();
    }
    return p;
  }
  // Called from ~Storage, so it never throws: when the free list cannot grow (out of memory while
  // an allocation failure unwinds), the block goes back to the system instead.
  void put(void* p, size_t cls) noexcept {
    try {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_ + cls <= limit_) {
        free_[cls].push_back(p);
        cached_ += cls;
        return;
      }
    } catch (...) {
    }
    std::free(p);
  }
  void release_all() {
    std::unordered_map<size_t, std::vector<void*>> drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      drop.swap(free_);
      cached_ = 0;
    }
    for (auto& [cls, v] : drop)
      for (void* p : v) std::free(p);
  }
  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {hits_, mallocs_, cached_};
  }

 private:
  static size_t read_limit() {
    const char* v = std::getenv("TFM_ALLOC_CACHE_MB");
    if (!v || !*v) return size_t(2048) << 20;
    return static_cast<size_t>(std::strtoull(v, nullptr, 10)) << 20;
  }
  std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  size_t limit_ = read_limit();
  uint64_t hits_ = 0, mallocs_ = 0;
};

// Never destroyed: tensors in other static objects may be freed after main returns.
BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache();
  return *cache;
}

}  // namespace

Storage::~Storage() {
  if (!keeper && ptr) block_cache().put(ptr, capacity);
}

std::shared_ptr<Storage> allocate_storage(size_t bytes) {
  auto s = std::make_shared<Storage>();
  const size_t cls = size_class(bytes);
  s->ptr = block_cache().get(cls);
  s->bytes = bytes;
  s->capacity = cls;
  return s;
}

AllocatorStats allocator_stats() { return block_cache().stats(); }
void allocator_release_cache() { block_cache().release_all(); }

static std::shared_ptr<TensorImpl> make_impl(const Shape& shape, DType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->numel = shape_numel(shape);
  impl->storage = allocate_storage(static_cast<size_t>(impl->numel) * dtype_size(dtype));
  return impl;
}

Tensor tensor_from_borrowed(const Shape& shape, DType dtype, void* ptr, std::shared_ptr<void> keeper, bool file_pages) {
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->numel = shape_numel(shape);
  impl->storage = std::make_shared<Storage>();
  impl->storage->ptr = ptr;
  impl->storage->bytes = static_cast<size_t>(impl->numel) * dtype_size(dtype);
  impl->storage->keeper = std::move(keeper);
  impl->storage->file_pages = file_pages;
  return Tensor(std::move(impl));
}

Tensor tensor_from_int8_rows(std::shared_ptr<const Int8Rows> rows) {
  auto impl = make_impl({rows->rows, rows->cols}, DType::FLOAT32);
  impl->storage->int8_rows = rows;
  impl->storage->fill = [rows](void* ptr) {
    kernels::dequantize_rows_s8(rows->q, rows->rows, rows->cols, rows->cols, rows->scale, static_cast<float*>(ptr));
  };
  return Tensor(std::move(impl));
}

const void* storage_address(const Tensor& t) {
  const TensorImpl* impl = t.impl();
  if (!impl || !impl->storage) return nullptr;
  return static_cast<const char*>(impl->storage->ptr) + impl->offset * static_cast<int64_t>(dtype_size(impl->dtype));
}

bool materialized(const Tensor& t) {
  const TensorImpl* impl = t.impl();
  return !impl || !impl->storage || !impl->storage->fill || impl->storage->is_filled.load(std::memory_order_acquire);
}

size_t drop_file_pages(const Tensor& t) {
  const TensorImpl* impl = t.impl();
  if (!impl || !impl->storage || !impl->storage->file_pages || impl->numel == 0) return 0;
  return drop_mapped_pages(storage_address(t), static_cast<size_t>(impl->numel) * dtype_size(impl->dtype));
}

size_t drop_mapped_pages(const void* p, size_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t end = begin + bytes;
  const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;  // whole pages only
  if (last <= first) return 0;
  // Read-only private file pages: dropping them loses nothing. A failure (not expected) only keeps them.
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) return 0;
  return last - first;
}

static Tensor wrap(std::shared_ptr<TensorImpl> impl) { return Tensor(std::move(impl)); }

// The public face of tensor_from_borrowed: same storage (keeper set, so ~Storage never hands the
// block to the cache and accumulate_grad never adopts it as a gradient), plus argument checks.
Tensor Tensor::from_external(const Shape& shape, float* data, std::shared_ptr<void> owner) {
  const int64_t n = shape_numel(shape);
  if (n > 0 && data == nullptr)
    throw std::invalid_argument("from_external: null data for shape " + shape_str(shape));
  if (reinterpret_cast<uintptr_t>(data) % alignof(float) != 0)
    throw std::invalid_argument("from_external: data is not " + std::to_string(alignof(float)) +
                                "-byte aligned");
  // Storage tells borrowed from owned by a non-null keeper, so the keeper must test true even when
  // the owner is empty or holds a null pointer: the aliasing constructor shares owner's control
  // block (none if empty) and points at data (or a sentinel when data is null).
  static char sentinel;
  void* mark = data != nullptr ? static_cast<void*>(data) : static_cast<void*>(&sentinel);
  return tensor_from_borrowed(shape, DType::FLOAT32, data, std::shared_ptr<void>(std::move(owner), mark));
}

static TensorImpl& need(const TensorImpl* impl, const char* what) {
  if (!impl) throw std::logic_error(std::string(what) + ": undefined tensor");
  return *const_cast<TensorImpl*>(impl);
}

Tensor Tensor::empty(const Shape& shape, DType dtype) { return wrap(make_impl(shape, dtype)); }
Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.impl_->storage->ptr, 0, t.impl_->storage->bytes);
  return t;
}
Tensor Tensor::full(const Shape& shape, float value) {
  Tensor t = empty(shape);
  t.fill_(value);
  return t;
}
Tensor Tensor::from_vector(const Shape& shape, const std::vector<float>& values) {
  Tensor t = empty(shape);
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw std::invalid_argument("from_vector: " + std::to_string(values.size()) + " values for shape " +
                                shape_str(shape));
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}
Tensor Tensor::from_bool(const Shape& shape, const std::vector<uint8_t>& values) {
  Tensor t = empty(shape, DType::BOOL);
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw std::invalid_argument("from_bool: " + std::to_string(values.size()) + " values for shape " +
                                shape_str(shape));
  for (size_t i = 0; i < values.size(); ++i) t.data_bool()[i] = values[i] ? 1 : 0;
  return t;
}

DType Tensor::dtype() const { return need(impl_.get(), "dtype").dtype; }
const Shape& Tensor::shape() const { return need(impl_.get(), "shape").shape; }
int64_t Tensor::dim() const { return static_cast<int64_t>(shape().size()); }
int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  int64_t i = d < 0 ? d + n : d;
  if (i < 0 || i >= n)
    throw std::out_of_range("size(" + std::to_string(d) + ") of a tensor of shape " + shape_str(shape()));
  return shape()[static_cast<size_t>(i)];
}
int64_t Tensor::numel() const { return need(impl_.get(), "numel").numel; }

float* Tensor::data() {
  auto& impl = need(impl_.get(), "data");
  if (impl.dtype != DType::FLOAT32) throw std::logic_error("data(): tensor is " + describe(*this));
  impl.storage->materialize();
  return static_cast<float*>(impl.storage->ptr) + impl.offset;
}
const float* Tensor::data() const { return const_cast<Tensor*>(this)->data(); }
uint8_t* Tensor::data_bool() {
  auto& impl = need(impl_.get(), "data_bool");
  if (impl.dtype != DType::BOOL) throw std::logic_error("data_bool(): tensor is " + describe(*this));
  return static_cast<uint8_t*>(impl.storage->ptr) + impl.offset;
}
const uint8_t* Tensor::data_bool() const { return const_cast<Tensor*>(this)->data_bool(); }
float Tensor::item() const {
  if (numel() != 1) throw std::logic_error("item(): tensor of shape " + shape_str(shape()) + " is not a scalar");
  return data()[0];
}

// ---- views ----------------------------------------------------------------------------------------
namespace {
struct ReshapeNode : Node {
  Shape in_shape;
  const char* name() const override { return "reshape"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& din) override {
    if (din[0]) accumulate_grad(din[0], dout.reshape(in_shape));
  }
  void backward_taking(Tensor dout, const std::vector<Tensor*>& din) override {
    if (!din[0]) return;
    Tensor g = dout.reshape(in_shape);
    dout = Tensor();  // g alone holds the storage now, unless someone else does too
    accumulate_grad(din[0], g);
  }
};
// Gradient of rows [start, start+len) of dim 0: scatter into zeros of the full shape.
struct Narrow0Node : Node {
  Shape in_shape;
  int64_t start = 0;
  const char* name() const override { return "narrow0"; }
  void backward(const Tensor& dout, const std::vector<Tensor*>& din) override {
    if (!din[0]) return;
    Tensor* slot = din[0];
    if (!slot->defined()) *slot = Tensor::zeros(in_shape);
    int64_t row = dout.numel() / std::max<int64_t>(1, dout.size(0));
    float* dst = slot->data() + start * row;
    const float* src = dout.data();
    for (int64_t i = 0; i < dout.numel(); ++i) dst[i] += src[i];
  }
};
}  // namespace

Tensor Tensor::reshape(const Shape& shape_in) const {
  auto& impl = need(impl_.get(), "reshape");
  Shape shape = shape_in;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw std::invalid_argument("reshape: more than one -1 in " + shape_str(shape_in));
      infer = static_cast<int64_t>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || impl.numel % known != 0)
      throw std::invalid_argument("reshape: cannot view " + shape_str(impl.shape) + " as " + shape_str(shape_in));
    shape[static_cast<size_t>(infer)] = impl.numel / known;
  }
  if (shape_numel(shape) != impl.numel)
    throw std::invalid_argument("reshape: cannot view " + shape_str(impl.shape) + " as " + shape_str(shape_in));
  auto out = std::make_shared<TensorImpl>();
  out->shape = shape;
  out->dtype = impl.dtype;
  out->numel = impl.numel;
  out->storage = impl.storage;
  out->offset = impl.offset;
  Tensor t = wrap(out);
  if (needs_grad({this})) {
    auto node = std::make_shared<ReshapeNode>();
    node->in_shape = impl.shape;
    node->inputs = {*this};
    record(t, node);
  }
  return t;
}

Tensor Tensor::narrow0(int64_t start, int64_t length) const {
  auto& impl = need(impl_.get(), "narrow0");
  if (impl.shape.empty() || start < 0 || length < 0 || start + length > impl.shape[0])
    throw std::out_of_range("narrow0(" + std::to_string(start) + ", " + std::to_string(length) +
                            ") of shape " + shape_str(impl.shape));
  int64_t row = impl.shape[0] ? impl.numel / impl.shape[0] : 0;
  auto out = std::make_shared<TensorImpl>();
  out->shape = impl.shape;
  out->shape[0] = length;
  out->dtype = impl.dtype;
  out->numel = length * row;
  out->storage = impl.storage;
  out->offset = impl.offset + start * row;
  Tensor t = wrap(out);
  if (needs_grad({this})) {
    auto node = std::make_shared<Narrow0Node>();
    node->in_shape = impl.shape;
    node->start = start;
    node->inputs = {*this};
    record(t, node);
  }
  return t;
}

Tensor Tensor::clone() const {
  auto& impl = need(impl_.get(), "clone");
  Tensor t = empty(impl.shape, impl.dtype);
  t.copy_(*this);
  return t;
}

Tensor Tensor::detach() const {
  auto& impl = need(impl_.get(), "detach");
  auto out = std::make_shared<TensorImpl>();
  out->shape = impl.shape;
  out->dtype = impl.dtype;
  out->numel = impl.numel;
  out->storage = impl.storage;
  out->offset = impl.offset;
  return wrap(out);
}

void Tensor::set_(const Tensor& source) {
  auto& impl = need(impl_.get(), "set_");
  if (!source.defined() || source.shape() != impl.shape || source.dtype() != impl.dtype)
    throw std::invalid_argument("set_: destination " + describe(*this) + ", source " + describe(source));
  impl.storage = source.impl_->storage;
  impl.offset = source.impl_->offset;
}

void Tensor::copy_(const Tensor& src) {
  auto& impl = need(impl_.get(), "copy_");
  if (src.shape() != impl.shape || src.dtype() != impl.dtype)
    throw std::invalid_argument("copy_: destination " + describe(*this) + ", source " + describe(src));
  size_t bytes = static_cast<size_t>(impl.numel) * dtype_size(impl.dtype);
  src.impl_->storage->materialize();
  impl.storage->materialize();
  if (impl.storage->int8_rows) impl.storage->int8_rows.reset();  // written: its integers no longer the values
  const char* s = static_cast<const char*>(src.impl_->storage->ptr) + src.impl_->offset * dtype_size(impl.dtype);
  char* d = static_cast<char*>(impl.storage->ptr) + impl.offset * dtype_size(impl.dtype);
  if (bytes == 0 || d == s) return;
  if (d + bytes <= s || s + bytes <= d)
    kernels::copy_bytes(s, d, bytes);
  else
    std::memmove(d, s, bytes);  // overlapping views of one storage
}

void Tensor::fill_(float value) {
  if (dtype() == DType::BOOL) {
    std::memset(data_bool(), value != 0.0f ? 1 : 0, static_cast<size_t>(numel()));
    return;
  }
  float* p = data();
  for (int64_t i = 0; i < numel(); ++i) p[i] = value;
  if (impl_->storage->int8_rows) impl_->storage->int8_rows.reset();  // written: its integers no longer the values
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return std::string(dtype_name(t.dtype())) + shape_str(t.shape());
}

// ---- autograd -------------------------------------------------------------------------------------
bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }
Tensor& Tensor::requires_grad_(bool on) {
  auto& impl = need(impl_.get(), "requires_grad_");
  if (impl.grad_fn) throw std::logic_error("requires_grad_: only leaf tensors can change requires_grad");
  if (on && impl.dtype != DType::FLOAT32) throw std::logic_error("requires_grad_: only Float32 tensors");
  impl.requires_grad = on;
  return *this;
}
bool Tensor::is_leaf() const { return !impl_ || !impl_->grad_fn; }
Tensor Tensor::grad() const { return need(impl_.get(), "grad").grad; }
Tensor& Tensor::mutable_grad() { return need(impl_.get(), "mutable_grad").grad; }
void Tensor::zero_grad() { need(impl_.get(), "zero_grad").grad = Tensor(); }
const std::shared_ptr<Node>& Tensor::grad_fn() const { return need(impl_.get(), "grad_fn").grad_fn; }
void Tensor::set_grad_fn(std::shared_ptr<Node> fn) {
  auto& impl = need(impl_.get(), "set_grad_fn");
  impl.grad_fn = std::move(fn);
  impl.requires_grad = true;
}

namespace {
thread_local bool g_grad_enabled = true;
}
bool grad_enabled() { return g_grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!g_grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void record(Tensor& out, std::shared_ptr<Node> node) { out.set_grad_fn(std::move(node)); }

void accumulate_grad(Tensor* slot, const Tensor& g) {
  if (!slot->defined()) {
    // The slot must own its storage: g may alias a tensor someone else holds (e.g. a reshape of dout).
    // When g's storage has no other holder (a fresh gradient a node just computed, which the node
    // drops after handing it over), the slot takes it without a copy. Contract for nodes: a gradient
    // handed to accumulate_grad is not written afterwards. The engine detaches the user's
    // grad_output, so it is never taken.
    const TensorImpl* gi = g.impl();
    const bool sole = gi && gi->storage && !gi->storage->keeper && gi->offset == 0 && !gi->grad_fn &&
                      gi->storage.use_count() == 1;
    *slot = sole ? g.detach() : g.clone();
    return;
  }
  if (slot->shape() != g.shape())
    throw std::logic_error("accumulate_grad: gradient " + describe(g) + " for slot " + describe(*slot));
  kernels::add_forward(slot->data(), g.data(), slot->data(), g.numel());
}

namespace {

using GradFinal = std::function<void(const Tensor& leaf)>;

// The leaves requiring grad that the nodes of `order` (execution order: order[n - 1] runs first)
// accumulate into, grouped by the step after which each is final: the leaves at
// finals[start[p] .. start[p + 1]) are final once the p-th node to run has run.
struct FinalLeaves {
  std::vector<size_t> start;
  std::vector<Tensor> finals;
};

FinalLeaves final_leaves(const std::vector<Node*>& order) {
  const size_t n = order.size();
  std::unordered_map<const TensorImpl*, size_t> last;  // leaf → the last step that writes to it
  for (size_t p = 0; p < n; ++p)
    for (const Tensor& in : order[n - 1 - p]->inputs)
      if (in.defined() && !in.impl()->grad_fn && in.requires_grad()) last[in.impl()] = p;
  FinalLeaves f;
  f.start.reserve(n + 1);
  for (size_t p = 0; p < n; ++p) {
    f.start.push_back(f.finals.size());
    for (const Tensor& in : order[n - 1 - p]->inputs) {
      if (!in.defined() || in.impl()->grad_fn || !in.requires_grad()) continue;
      auto it = last.find(in.impl());
      if (it == last.end() || it->second != p) continue;
      f.finals.push_back(in);
      last.erase(it);  // reported once, even when the node takes the leaf twice
    }
  }
  f.start.push_back(f.finals.size());
  return f;
}

// Tensor::backward's body; on_grad_final is null on the plain path, which then does nothing more.
void run_backward(const Tensor& self, const Tensor& grad_output, const GradFinal* on_grad_final) {
  const TensorImpl& root = need(self.impl(), "backward");
  if (!root.requires_grad) throw std::logic_error("backward: tensor does not require grad");
  Tensor dout = grad_output.defined() ? grad_output.detach() : Tensor();  // never taken by a slot
  if (!dout.defined()) {
    if (root.numel != 1) throw std::logic_error("backward: grad_output needed for non-scalar " + describe(self));
    dout = Tensor::full(root.shape, 1.0f);
  }
  if (dout.shape() != root.shape)
    throw std::invalid_argument("backward: grad_output " + describe(dout) + " for output " + describe(self));
  if (!root.grad_fn) {  // a leaf: its gradient is grad_output itself
    accumulate_grad(&const_cast<Tensor&>(self).mutable_grad(), dout);
    if (on_grad_final) (*on_grad_final)(self);
    return;
  }
  // Topological order of nodes (depth-first post-order from the root, iterative).
  std::vector<Node*> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<Node*, size_t>> stack{{root.grad_fn.get(), 0}};
  seen.insert(root.grad_fn.get());
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs.size()) {
      const Tensor& in = node->inputs[next++];
      if (in.defined() && in.impl()->grad_fn && !seen.count(in.impl()->grad_fn.get())) {
        seen.insert(in.impl()->grad_fn.get());
        stack.push_back({in.impl()->grad_fn.get(), 0});
      }
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  FinalLeaves finals;
  if (on_grad_final) finals = final_leaves(order);
  std::unordered_map<Node*, Tensor> pending;
  pending[root.grad_fn.get()] = dout;
  std::vector<Tensor*> slots;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = *it;
    auto found = pending.find(node);
    if (found != pending.end()) {  // else no gradient reached this node
      Tensor g = std::move(found->second);
      pending.erase(found);
      slots.assign(node->inputs.size(), nullptr);
      for (size_t i = 0; i < node->inputs.size(); ++i) {
        Tensor& in = node->inputs[i];
        if (!in.defined() || !in.requires_grad()) continue;
        slots[i] = in.impl()->grad_fn ? &pending[in.impl()->grad_fn.get()] : &in.mutable_grad();
      }
      node->backward_taking(std::move(g), slots);
    }
    if (on_grad_final) {
      const size_t p = static_cast<size_t>(it - order.rbegin());
      for (size_t k = finals.start[p]; k < finals.start[p + 1]; ++k) (*on_grad_final)(finals.finals[k]);
    }
  }
  // Free the tape behind the root, as PyTorch does without retain_graph.
  for (Node* node : order) node->inputs.clear();
}

}  // namespace

void Tensor::backward(const Tensor& grad_output) const { run_backward(*this, grad_output, nullptr); }

void Tensor::backward(const Tensor& grad_output, const std::function<void(const Tensor& leaf)>& on_grad_final) const {
  run_backward(*this, grad_output, &on_grad_final);
}

}  // namespace tfm
