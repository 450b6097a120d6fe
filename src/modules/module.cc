// src/modules/module.cc — parameter registry, state_dict I/O and train/eval for every Module.
#include "tfm/modules/module.h"

#include <set>
#include <stdexcept>
#include "quote.h"

namespace tfm {

void Module::register_parameter(const std::string& name, Tensor& t) {
  if (!t.defined()) return;  // absent optional parameter (bias=false)
  t.requires_grad_(true);
  params_.emplace_back(name, &t);
}
void Module::register_module(const std::string& name, Module& m) { children_.emplace_back(name, &m); }

void Module::visit_parameters(const std::function<void(const std::string&, Tensor&)>& fn, const std::string& prefix) {
  for (auto& [name, t] : params_) fn(prefix + name, *t);
  // A child registered under no name adds its keys without a prefix (a handle's implementation).
  for (auto& [name, m] : children_) m->visit_parameters(fn, name.empty() ? prefix : prefix + name + ".");
}

NamedTensors Module::named_parameters() {
  NamedTensors out;
  visit_parameters([&](const std::string& k, Tensor& t) { out.insert(k, t); });
  return out;
}
std::vector<Tensor> Module::parameters() {
  std::vector<Tensor> out;
  visit_parameters([&](const std::string&, Tensor& t) { out.push_back(t); });
  return out;
}
NamedTensors Module::state_dict() { return named_parameters(); }
int64_t Module::num_parameters() {
  int64_t n = 0;
  visit_parameters([&](const std::string&, Tensor& t) { n += t.numel(); });
  return n;
}

void Module::load_state_dict(const NamedTensors& state, const std::string& source, bool assign) {
  std::set<std::string> used;
  visit_parameters([&](const std::string& k, Tensor& t) {
    auto it = state.find(k);
    if (it == state.end()) throw std::invalid_argument(source + ": missing key " + quote_name(k) + " (expected " + describe(t) + ")");
    const Tensor& v = it->second;
    if (!v.defined() || v.dtype() != DType::FLOAT32 || v.shape() != t.shape())
      throw std::invalid_argument(source + ": key " + quote_name(k) + " has " + describe(v) + ", expected " + describe(t));
    if (assign)
      t.set_(v);
    else
      t.copy_(v);
    used.insert(k);
  });
  for (auto& [k, v] : state)
    if (!used.count(k)) throw std::invalid_argument(source + ": unexpected key " + quote_name(k) + " (" + describe(v) + ")");
}

void Module::zero_grad() {
  visit_parameters([](const std::string&, Tensor& t) { t.zero_grad(); });
}

bool Module::any_training() const {
  if (training_) return true;
  for (const auto& [name, m] : children_)
    if (m->any_training()) return true;
  return false;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, m] : children_) m->train(on);
}

}  // namespace tfm
