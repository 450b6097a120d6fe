// tfm/named_tensors.h — NamedTensors: tensors by name, in insertion order. The one container of
// named tensors in tfm: a module's state_dict and named_parameters, an optimizer's state, what
// io::load_safetensors reads and io::save_safetensors writes, and the named inputs and outputs of
// a loaded module (tfm/models/forward.h).
//
// Order is insertion order (a state_dict lists parameters as PyTorch registers them, a loaded file
// as its header lists them), lookup is by name, and a name appears at most once: insert() throws
// on a duplicate instead of replacing, so two tensors can never silently share a key. Iteration
// yields (name, tensor) pairs like std::map's: the name is const, the tensor may be reassigned.
//
//   tfm::NamedTensors in{{"src", x}, {"src_key_padding_mask", pad}};
//   in.insert("is_causal", flag);
//   for (const auto& [name, t] : in) ...;
//   const tfm::Tensor& src = in.at("src");  // throws std::invalid_argument naming the key if absent
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tfm/tensor.h"

namespace tfm {

class NamedTensors {
 public:
  using value_type = std::pair<const std::string, Tensor>;
  using iterator = std::vector<value_type>::iterator;
  using const_iterator = std::vector<value_type>::const_iterator;

  NamedTensors() = default;
  // Inserts in the order given; throws std::invalid_argument on a duplicate name.
  NamedTensors(std::initializer_list<std::pair<std::string, Tensor>> items);
  NamedTensors(const NamedTensors& other);
  NamedTensors(NamedTensors&& other) noexcept = default;
  NamedTensors& operator=(const NamedTensors& other);
  NamedTensors& operator=(NamedTensors&& other) noexcept = default;

  // Appends (name, t). Throws std::invalid_argument "duplicate tensor name 'x'" if `name` is
  // present; the container is then unchanged.
  void insert(std::string name, Tensor t);
  // Removes `name`; returns false when it was absent. Later entries keep their order.
  bool erase(const std::string& name);
  void clear();

  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // The tensor called `name`; throws std::invalid_argument "no tensor 'x' (N tensors: a, b, ...)".
  Tensor& at(const std::string& name);
  const Tensor& at(const std::string& name) const;
  // The entry called `name`, or end().
  iterator find(const std::string& name);
  const_iterator find(const std::string& name) const;

  std::vector<std::string> names() const;  // in order
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }

 private:
  std::vector<value_type> items_;                  // in insertion order
  std::unordered_map<std::string, size_t> index_;  // name -> position in items_
};

}  // namespace tfm
