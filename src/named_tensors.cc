// src/named_tensors.cc — NamedTensors (include/tfm/named_tensors.h): a vector of (name, tensor)
// in insertion order plus a name -> position index.
#include "tfm/named_tensors.h"

#include <algorithm>
#include <stdexcept>

#include "quote.h"

namespace tfm {

NamedTensors::NamedTensors(std::initializer_list<std::pair<std::string, Tensor>> items) {
  items_.reserve(items.size());
  for (const auto& [name, t] : items) insert(name, t);
}

NamedTensors::NamedTensors(const NamedTensors& other) : items_(other.items_), index_(other.index_) {}

NamedTensors& NamedTensors::operator=(const NamedTensors& other) {
  if (this != &other) {
    NamedTensors copy(other);  // the names are const in items_, so copy-and-swap, not element assignment
    *this = std::move(copy);
  }
  return *this;
}

void NamedTensors::insert(std::string name, Tensor t) {
  if (index_.count(name)) throw std::invalid_argument("duplicate tensor name " + quote_name(name));
  items_.emplace_back(name, std::move(t));
  try {
    index_.emplace(std::move(name), items_.size() - 1);
  } catch (...) {  // keep items_ and the index in step
    items_.pop_back();
    throw;
  }
}

bool NamedTensors::erase(const std::string& name) {
  const auto it = index_.find(name);
  if (it == index_.end()) return false;
  const size_t at = it->second;
  // Entries hold const names, so the vector cannot shift them by assignment: rebuild it.
  std::vector<value_type> kept;
  kept.reserve(items_.size() - 1);
  for (size_t i = 0; i < items_.size(); ++i)
    if (i != at) kept.emplace_back(items_[i].first, std::move(items_[i].second));
  items_ = std::move(kept);
  index_.erase(it);
  for (auto& [k, pos] : index_)
    if (pos > at) --pos;
  return true;
}

void NamedTensors::clear() {
  items_.clear();
  index_.clear();
}

NamedTensors::iterator NamedTensors::find(const std::string& name) {
  const auto it = index_.find(name);
  return it == index_.end() ? items_.end() : items_.begin() + static_cast<std::ptrdiff_t>(it->second);
}

NamedTensors::const_iterator NamedTensors::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? items_.end() : items_.begin() + static_cast<std::ptrdiff_t>(it->second);
}

const Tensor& NamedTensors::at(const std::string& name) const {
  const auto it = find(name);
  if (it != end()) return it->second;
  std::string list;
  const size_t shown = std::min<size_t>(items_.size(), 10);
  for (size_t i = 0; i < shown; ++i) list += (i ? ", " : "") + quote_name(items_[i].first);
  if (items_.size() > shown) list += ", ...";
  throw std::invalid_argument("no tensor " + quote_name(name) + " (" + std::to_string(items_.size()) + " tensors" +
                              (items_.empty() ? "" : ": " + list) + ")");
}

Tensor& NamedTensors::at(const std::string& name) {
  return const_cast<Tensor&>(static_cast<const NamedTensors&>(*this).at(name));
}

std::vector<std::string> NamedTensors::names() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [name, t] : items_) out.push_back(name);
  return out;
}

}  // namespace tfm
