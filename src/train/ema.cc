// src/train/ema.cc — the weights' exponential moving average (src/train/ema.h).
#include "train/ema.h"

#include <algorithm>
#include <stdexcept>

namespace tfm::train {

void ema_update(float* avg, const float* w, int64_t n, float a, float b) {
  // Element-wise, so any split over threads gives the sequential loop's bits (as adam_update).
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (int64_t k = 0; k < n; ++k) {
    const float kept = avg[k] * a;
    const float added = w[k] * b;
    avg[k] = kept + added;
  }
}

WeightAverage::WeightAverage(const NamedTensors& params, float decay) : decay_(decay) {
  if (!(decay > 0 && decay < 1)) throw std::invalid_argument("ema: the decay must be in (0, 1), got " + std::to_string(decay));
  for (const auto& [name, p] : params) {
    Tensor copy = p.clone();
    avg_.insert(name, copy);
    tensors_.push_back(copy);
  }
}

double WeightAverage::decay_at(float decay, int64_t t) {
  const double ramp = (1.0 + static_cast<double>(t)) / (10.0 + static_cast<double>(t));
  return std::min(static_cast<double>(decay), ramp);
}

void WeightAverage::update(const std::vector<Tensor>& params) {
  std::vector<ParamRange> all;
  for (size_t i = 0; i < params.size(); ++i) all.push_back(ParamRange{i, 0, params[i].numel(), nullptr});
  update(params, all);
}

void WeightAverage::update(const std::vector<Tensor>& params, const std::vector<ParamRange>& ranges) {
  if (params.size() != tensors_.size())
    throw std::invalid_argument("ema: " + std::to_string(params.size()) + " parameters, the average has " +
                                std::to_string(tensors_.size()));
  ++updates_;
  const double d = decay_at(decay_, updates_);
  const float a = static_cast<float>(d), b = static_cast<float>(1.0 - d);
  for (const ParamRange& r : ranges) update_range(params[r.param], r.param, r.begin, r.end, a, b);
}

void WeightAverage::update_range(const Tensor& w, size_t i, int64_t begin, int64_t end, float a, float b) {
  Tensor& avg = tensors_[i];
  if (w.numel() != avg.numel()) throw std::invalid_argument("ema: parameter " + std::to_string(i) + " changed size");
  ema_update(avg.data() + begin, w.data() + begin, end - begin, a, b);
}

void WeightAverage::swap_with(const std::vector<Tensor>& params) {
  if (params.size() != tensors_.size())
    throw std::invalid_argument("ema: " + std::to_string(params.size()) + " parameters, the average has " +
                                std::to_string(tensors_.size()));
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor p = params[i];  // a handle on the parameter's storage
    std::swap_ranges(p.data(), p.data() + p.numel(), tensors_[i].data());
  }
}

}  // namespace tfm::train
