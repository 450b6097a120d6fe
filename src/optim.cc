// src/optim.cc — torch.optim.SGD, Adam and AdamW (the single-tensor, non-foreach paths of
// PyTorch 1.13, which is what runs on the CPU by default) with their steps on owned elements
// (src/optim_shards.h), and clip_grad_norm_ with its blockwise pieces.
//
// Arithmetic follows PyTorch's order of operations so results agree to a few float32 ulps:
// scalar coefficients (bias corrections, step size) are computed in double like Python floats and
// rounded to float once, as ATen does when it applies a Python scalar to a float32 tensor; the
// element-wise updates run in float32. Each element's update reads only that element, so the loops
// that run in parallel give the same bits for any thread count: Adam's update (adam_update_ranges, one
// OpenMP region over the elements of every parameter laid end to end, once they total 65,536 or more,
// each thread an equal share).
//
// To add an optimizer: derive from Optimizer, keep one state tensor per parameter and slot (lazily
// created on the first step that sees a gradient, like torch), name the slots as torch's state
// dict does, and extend tests/gen/gen_optim.py + tests/optim_test.cc. To step it across processes,
// give it its case in detail::OptimizerShards (src/optim_shards.h), beside its step() here.
#include "tfm/optim.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

#include "kernels/kernels.h"
#include "optim_shards.h"
#include "quote.h"

namespace tfm {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument(msg); }

void check_hyper(bool ok, const char* opt, const char* name, float value) {
  if (!ok) fail(std::string(opt) + ": invalid " + name + " " + std::to_string(value));
}

// The step counter of one parameter, stored as a 0-dim tensor like torch's state['step'].
Tensor step_tensor(int64_t step) { return Tensor::full({}, static_cast<float>(step)); }

// Reads slot `<key>.<slot>` from a saved state into a fresh tensor of the parameter's shape.
// Returns an undefined tensor when absent (the parameter had no state yet).
Tensor take_slot(const NamedTensors& s, const std::string& key, const char* slot, const Tensor& param,
                 std::set<std::string>& used) {
  const std::string name = key + "." + slot;
  auto it = s.find(name);
  if (it == s.end()) return Tensor();
  const Tensor& t = it->second;
  if (!t.defined() || t.dtype() != DType::FLOAT32 || t.shape() != param.shape())
    fail("optimizer state: '" + name + "' has " + (t.defined() ? describe(t) : std::string("undefined")) +
         ", expected " + describe(param));
  used.insert(name);
  return t.clone();
}

int64_t take_step(const NamedTensors& s, const std::string& key, std::set<std::string>& used) {
  const std::string name = key + ".step";
  auto it = s.find(name);
  if (it == s.end()) fail("optimizer state: missing '" + name + "'");
  const Tensor& t = it->second;
  if (!t.defined() || t.dtype() != DType::FLOAT32 || t.numel() != 1)
    fail("optimizer state: '" + name + "' must be a single Float32 value");
  const float v = t.item();
  if (!(v >= 0.0f) || v != std::floor(v)) fail("optimizer state: '" + name + "' is not a step count");
  used.insert(name);
  return static_cast<int64_t>(v);
}

void reject_unused(const NamedTensors& s, const std::set<std::string>& used) {
  for (const auto& [k, v] : s)
    if (!used.count(k)) fail("optimizer state: unexpected key " + quote_name(k));
}

}  // namespace

Optimizer::Optimizer(const NamedTensors& params, float lr) : lr_(lr) {
  keys_.reserve(params.size());
  params_.reserve(params.size());
  for (const auto& [key, p] : params) {
    keys_.push_back(key);
    params_.push_back(p);
  }
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

// ---- SGD ------------------------------------------------------------------------------------------
SGD::SGD(const NamedTensors& params, float lr, float momentum, float weight_decay)
    : Optimizer(params, lr), momentum_(momentum), weight_decay_(weight_decay) {
  check_hyper(lr >= 0.0f, "SGD", "lr", lr);
  check_hyper(momentum >= 0.0f, "SGD", "momentum", momentum);
  check_hyper(weight_decay >= 0.0f, "SGD", "weight_decay", weight_decay);
  buf_.resize(params_.size());
}

namespace {

// g = grad·scale + wd·p;  buf = μ·buf + g (buf = g on its first step);  p = p − lr·buf over n elements
// (bp null: no momentum). scale is clip_grad_norm's factor (1: none): grad·scale is the one multiply
// the in-place clipping does, so the bits are those of clipping first, then stepping.
void sgd_update(float* pp, const float* gp, float* bp, int64_t n, float wd, float mu, float neg_lr, bool first,
                float scale) {
  for (int64_t j = 0; j < n; ++j) {
    const float gj = gp[j] * scale;
    float d = wd != 0.0f ? gj + wd * pp[j] : gj;
    if (bp) {
      bp[j] = first ? d : bp[j] * mu + d;
      d = bp[j];
    }
    pp[j] = pp[j] + neg_lr * d;
  }
}

}  // namespace

// g = grad + wd·p;  buf = μ·buf + g (buf = g on its first step);  p = p − lr·buf   (torch.optim.SGD,
// dampening 0, no Nesterov).
void SGD::step() {
  const float wd = weight_decay_, mu = momentum_, neg_lr = -lr_;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    float* pp = p.data();
    const float* gp = g.data();
    const int64_t n = p.numel();
    float* bp = nullptr;
    const bool first = mu != 0.0f && !buf_[i].defined();
    if (mu != 0.0f) {
      if (first) buf_[i] = Tensor::empty(p.shape());
      bp = buf_[i].data();
    }
    sgd_update(pp, gp, bp, n, wd, mu, neg_lr, first, 1.0f);
  }
}

void detail::OptimizerShards::step(SGD& sgd, const std::vector<ParamRange>& owned, float grad_scale) {
  const size_t n = sgd.params_.size();
  const float mu = sgd.momentum_;
  std::vector<bool> first(n, false);
  if (mu != 0.0f)
    for (size_t i = 0; i < n; ++i)
      if (!sgd.buf_[i].defined()) {
        sgd.buf_[i] = Tensor::empty(sgd.params_[i].shape());
        first[i] = true;
      }
  for (const ParamRange& r : owned) {
    float* pp = sgd.params_[r.param].data() + r.begin;
    float* bp = mu != 0.0f ? sgd.buf_[r.param].data() + r.begin : nullptr;
    sgd_update(pp, r.grad, bp, r.end - r.begin, sgd.weight_decay_, mu, -sgd.lr_, first[r.param], grad_scale);
  }
}

NamedTensors SGD::state_dict() const {
  NamedTensors s;
  for (size_t i = 0; i < params_.size(); ++i)
    if (buf_[i].defined()) s.insert(keys_[i] + ".momentum_buffer", buf_[i]);
  return s;
}

void SGD::load_state_dict(const NamedTensors& s) {
  std::set<std::string> used;
  std::vector<Tensor> buf(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    buf[i] = take_slot(s, keys_[i], "momentum_buffer", params_[i], used);
  reject_unused(s, used);
  buf_ = std::move(buf);
}

// ---- Adam / AdamW ---------------------------------------------------------------------------------
Adam::Adam(const NamedTensors& params, float lr, float beta1, float beta2, float eps,
           float weight_decay, bool decoupled, std::vector<bool> decayed)
    : Optimizer(params, lr),
      beta1_(beta1),
      beta2_(beta2),
      eps_(eps),
      weight_decay_(weight_decay),
      decoupled_(decoupled),
      decayed_(std::move(decayed)) {
  const char* name = decoupled ? "AdamW" : "Adam";
  check_hyper(lr >= 0.0f, name, "lr", lr);
  check_hyper(beta1 >= 0.0f && beta1 < 1.0f, name, "beta1", beta1);
  check_hyper(beta2 >= 0.0f && beta2 < 1.0f, name, "beta2", beta2);
  check_hyper(eps >= 0.0f, name, "eps", eps);
  check_hyper(weight_decay >= 0.0f, name, "weight_decay", weight_decay);
  if (!decayed_.empty() && decayed_.size() != params_.size())
    fail(std::string(name) + ": " + std::to_string(decayed_.size()) + " weight-decay flags for " +
         std::to_string(params_.size()) + " parameters");
  m_.resize(params_.size());
  v_.resize(params_.size());
  step_.assign(params_.size(), 0);
}

// Per parameter with a gradient, t = its own step count (torch keeps state['step'] per parameter):
//   Adam:  g = grad + wd·p           AdamW: p = p·(1 − lr·wd)
//   m = β1·m + (1−β1)·g;   v = β2·v + (1−β2)·g·g
//   p = p − (lr/(1−β1ᵗ)) · m / (sqrt(v)/sqrt(1−β2ᵗ) + eps)
struct AdamScalars : kernels::AdamCoefficients {};

namespace {

// One Adam/AdamW update over n elements: kernels::adam_update (torch.optim.Adam's single-tensor formula, in float,
// kernels.h). scale is clip_grad_norm's factor (1: none): grad·scale is the one multiply the in-place clipping
// does, so the bits are those of clipping first, then stepping. Purely elementwise, so splitting it over threads
// gives the same bits. The modes are kernels::AdamDecay's, as ints in the per-parameter vectors.
constexpr int kNoDecay = static_cast<int>(kernels::AdamDecay::NONE), kL2 = static_cast<int>(kernels::AdamDecay::L2),
              kDecoupled = static_cast<int>(kernels::AdamDecay::DECOUPLED);

void adam_update(int mode, float* pp, const float* gp, float* mp, float* vp, int64_t n, const AdamScalars& s,
                 float scale, uint16_t* p16) {
  kernels::adam_update(static_cast<kernels::AdamDecay>(mode), pp, gp, mp, vp, n, s, scale, p16);
}

// Below this many elements in all, a step runs on the calling thread: a parallel region would cost
// more than the work.
constexpr int64_t kMinParallelElems = 65536;

// The updates of every range of `ranges` (parameter i's coefficients s[i], mode[i]) in one parallel
// region. The ranges are laid end to end, and each thread takes an equal share of their elements (its
// bounds rounded to kAlign elements, so the vector loops start aligned in that concatenation): a split by
// elements, not by ranges, because a model's parameters range from a LayerNorm's 128 elements to an
// embedding's hundreds of thousands. Each element's update reads only that element, so any split gives
// the same bits. p16 (empty, or one per parameter): where parameter i's bfloat16 copy is refreshed, or null.
constexpr int64_t kAlign = 16;

void adam_update_ranges(std::vector<Tensor>& m, std::vector<Tensor>& v, std::vector<Tensor>& params,
                        const std::vector<ParamRange>& ranges, const std::vector<AdamScalars>& s,
                        const std::vector<int>& mode, float scale, const std::vector<uint16_t*>& p16 = {}) {
  std::vector<int64_t> start(ranges.size() + 1, 0);  // range k: elements [start[k], start[k+1]) of the whole
  for (size_t k = 0; k < ranges.size(); ++k) start[k + 1] = start[k] + (ranges[k].end - ranges[k].begin);
  const int64_t total = start.back();
#pragma omp parallel if (total >= kMinParallelElems)
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    auto bound = [&](int64_t u) { return u == threads ? total : std::min(total, total / threads * u / kAlign * kAlign); };
    const int64_t lo = bound(t), hi = bound(t + 1);
    // The first range ending after lo, then every range until hi.
    size_t k = static_cast<size_t>(std::upper_bound(start.begin(), start.end(), lo) - start.begin()) - 1;
    for (; k < ranges.size() && start[k] < hi; ++k) {
      const ParamRange& r = ranges[k];
      const int64_t a = std::max(lo, start[k]) - start[k], b = std::min(hi, start[k + 1]) - start[k];
      if (a >= b) continue;
      const size_t i = r.param;
      const int64_t e = r.begin + a;  // element e of parameter i
      uint16_t* const copy = p16.empty() || !p16[i] ? nullptr : p16[i] + e;
      adam_update(mode[i], params[i].data() + e, r.grad + a, m[i].data() + e, v[i].data() + e, b - a, s[i], scale,
                  copy);
    }
  }
}

}  // namespace

AdamScalars Adam::scalars() const {
  const double lr = lr_;
  AdamScalars s{};
  s.beta1 = beta1_;
  s.beta2 = beta2_;
  s.one_m_b1 = static_cast<float>(1.0 - static_cast<double>(beta1_));
  s.one_m_b2 = static_cast<float>(1.0 - static_cast<double>(beta2_));
  s.eps = eps_;
  s.wd = weight_decay_;
  s.decay = static_cast<float>(1.0 - lr * static_cast<double>(weight_decay_));
  return s;
}

// Parameter i's state (created on its first step) and step count advance; s gets its step size and
// bias correction; returns its weight-decay mode.
int Adam::begin_param_step(size_t i, AdamScalars& s) {
  const double lr = lr_, b1 = beta1_, b2 = beta2_;
  if (!m_[i].defined()) {
    m_[i] = Tensor::zeros(params_[i].shape());
    v_[i] = Tensor::zeros(params_[i].shape());
    step_[i] = 0;
  }
  const int64_t t = ++step_[i];
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t));
  s.neg_step_size = static_cast<float>(-(lr / bc1));
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const int decay_mode = s.wd == 0.0f ? kNoDecay : decoupled_ ? kDecoupled : kL2;
  return decayed_.empty() || decayed_[i] ? decay_mode : kNoDecay;
}

void Adam::step() { detail::OptimizerShards::step_scaled(static_cast<Optimizer&>(*this), 1.0f, nullptr); }

void Adam::step(Bf16WeightCache& copies) {
  detail::OptimizerShards::step_scaled(static_cast<Optimizer&>(*this), 1.0f, &copies);
}

void detail::OptimizerShards::step(Adam& adam, const std::vector<ParamRange>& owned, float grad_scale) {
  const size_t n = adam.params_.size();
  std::vector<AdamScalars> s(n, adam.scalars());
  std::vector<int> mode(n);
  for (size_t i = 0; i < n; ++i) mode[i] = adam.begin_param_step(i, s[i]);
  adam_update_ranges(adam.m_, adam.v_, adam.params_, owned, s, mode, grad_scale);
}

void detail::OptimizerShards::step_scaled(Adam& adam, float grad_scale, Bf16WeightCache* copies) {
  const size_t n = adam.params_.size();
  std::vector<AdamScalars> s(n, adam.scalars());
  std::vector<int> mode(n, kNoDecay);
  std::vector<ParamRange> whole;
  std::vector<uint16_t*> p16(copies ? n : 0, nullptr);
  for (size_t i = 0; i < n; ++i) {
    const Tensor g = adam.params_[i].grad();
    if (!g.defined()) continue;  // no step for it, and its step count stays (torch skips it alike)
    mode[i] = adam.begin_param_step(i, s[i]);
    whole.push_back(ParamRange{i, 0, g.numel(), g.data()});
    if (copies) p16[i] = copies->refresh(adam.params_[i].data(), g.numel());
  }
  adam_update_ranges(adam.m_, adam.v_, adam.params_, whole, s, mode, grad_scale, p16);
}

void detail::OptimizerShards::step_scaled(Optimizer& opt, float grad_scale, Bf16WeightCache* copies) {
  if (auto* adam = dynamic_cast<Adam*>(&opt)) return step_scaled(*adam, grad_scale, copies);
  if (grad_scale != 1.0f)  // any other optimizer: the grads scaled in place, then its own step
    for (Tensor& p : opt.params_) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      float* gp = g.data();
      for (int64_t j = 0, m = g.numel(); j < m; ++j) gp[j] *= grad_scale;
    }
  opt.step();
}

NamedTensors Adam::state_dict() const {
  NamedTensors s;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!m_[i].defined()) continue;
    const std::string& key = keys_[i];
    s.insert(key + ".exp_avg", m_[i]);
    s.insert(key + ".exp_avg_sq", v_[i]);
    s.insert(key + ".step", step_tensor(step_[i]));
  }
  return s;
}

void Adam::load_state_dict(const NamedTensors& s) {
  std::set<std::string> used;
  std::vector<Tensor> m(params_.size()), v(params_.size());
  std::vector<int64_t> st(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& key = keys_[i];
    m[i] = take_slot(s, key, "exp_avg", params_[i], used);
    v[i] = take_slot(s, key, "exp_avg_sq", params_[i], used);
    if (m[i].defined() != v[i].defined())
      fail("optimizer state: '" + key + "' has only one of exp_avg and exp_avg_sq");
    if (m[i].defined()) st[i] = take_step(s, key, used);
  }
  reject_unused(s, used);
  m_ = std::move(m);
  v_ = std::move(v);
  step_ = std::move(st);
}

// ---- the sharded step's dispatch (src/optim_shards.h) ---------------------------------------------
namespace {

[[noreturn]] void fail_not_shardable() {
  fail("optimizer: only tfm's SGD and Adam step on the elements a process owns (several processes); "
       "another optimizer trains in one process");
}

}  // namespace

void detail::OptimizerShards::step(Optimizer& opt, const std::vector<ParamRange>& owned, float grad_scale) {
  if (auto* adam = dynamic_cast<Adam*>(&opt)) return step(*adam, owned, grad_scale);
  if (auto* sgd = dynamic_cast<SGD*>(&opt)) return step(*sgd, owned, grad_scale);
  fail_not_shardable();
}

std::vector<std::vector<Tensor>> detail::OptimizerShards::state_slots(Optimizer& opt) {
  if (auto* adam = dynamic_cast<Adam*>(&opt)) return {adam->m_, adam->v_};
  if (auto* sgd = dynamic_cast<SGD*>(&opt)) {
    if (sgd->momentum_ == 0.0f) return {};
    return {sgd->buf_};
  }
  fail_not_shardable();
}

// ---- clipping -------------------------------------------------------------------------------------
// torch.nn.utils.clip_grad_norm_(norm_type=2): total = ‖(‖g_1‖, ‖g_2‖, …)‖; c = (1/(total + 1e-6))·max_norm;
// every grad is multiplied by min(c, 1) (NaN when the total is NaN). Norms accumulate in double and round to float like torch's
// float32 results; each tensor's sum of squares is folded from blocks of kNormBlock elements
// (src/optim_shards.h), the order processes that hold different blocks can reproduce.
namespace {

constexpr int64_t kChains = 4;  // blocks summed at once by norm_block_partials

double block_partial(const float* x, int64_t n) {
  double sq = 0;
  for (int64_t j = 0; j < n; ++j) sq += static_cast<double>(x[j]) * x[j];
  return sq;
}

// sq_total with one more tensor's norm: norm = (float)√sq, sq_total + (double)norm².
double add_tensor_norm(double sq_total, double sq) {
  const double norm = static_cast<float>(std::sqrt(sq));
  return sq_total + norm * norm;
}

}  // namespace

void norm_block_partials(const float* x, int64_t n, double* out) {
  int64_t b = 0;
  // kChains whole blocks at a time: one dependent chain of additions per block, interleaved, so they
  // overlap in the pipeline instead of waiting on each other.
  for (; b + kChains * kNormBlock <= n; b += kChains * kNormBlock) {
    double sq[kChains] = {};
    const float* xb = x + b;
    for (int64_t j = 0; j < kNormBlock; ++j)
      for (int64_t c = 0; c < kChains; ++c) {
        const double v = xb[c * kNormBlock + j];
        sq[c] += v * v;
      }
    for (int64_t c = 0; c < kChains; ++c) *out++ = sq[c];
  }
  for (; b < n; b += kNormBlock) *out++ = block_partial(x + b, std::min(kNormBlock, n - b));
}

float total_grad_norm(const std::vector<double>& tensor_sq) {
  double sq_total = 0;
  for (const double sq : tensor_sq) sq_total = add_tensor_norm(sq_total, sq);
  return static_cast<float>(std::sqrt(sq_total));
}

float clip_coefficient(float total, float max_norm) {
  if (!(max_norm > 0.0f)) fail("clip_grad_norm: max_norm must be positive, got " + std::to_string(max_norm));
  // torch 1.13 evaluates max_norm / (total + 1e-6) as Tensor.__rtruediv__, reciprocal() * max_norm:
  // two roundings, which a single division misses by an ulp in about a quarter of the cases.
  return (1.0f / (total + 1e-6f)) * max_norm;
}

float grad_norm(const std::vector<Tensor>& params) {
  // Work items of up to kChains blocks of one grad (norm_block_partials sums each block in its own
  // order, whichever items the blocks are grouped in), each writing its blocks' partials in place.
  struct Item {
    const float* x;
    int64_t n;
    size_t out;  // index of its first block's partial
  };
  std::vector<Item> items;
  std::vector<size_t> first_block;  // per grad, then the end
  size_t blocks = 0;
  int64_t total = 0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    first_block.push_back(blocks);
    const int64_t n = g.numel();
    for (int64_t b = 0; b < n; b += kChains * kNormBlock) {
      const int64_t len = std::min(kChains * kNormBlock, n - b);
      items.push_back(Item{g.data() + b, len, blocks});
      blocks += static_cast<size_t>((len + kNormBlock - 1) / kNormBlock);
    }
    total += n;
  }
  first_block.push_back(blocks);
  std::vector<double> partials(blocks);
  const int64_t count = static_cast<int64_t>(items.size());
#pragma omp parallel for schedule(static) if (total >= 65536)
  for (int64_t k = 0; k < count; ++k) {
    const Item& it = items[static_cast<size_t>(k)];
    norm_block_partials(it.x, it.n, partials.data() + it.out);
  }
  std::vector<double> tensor_sq(first_block.size() - 1);
  for (size_t i = 0; i + 1 < first_block.size(); ++i) {
    double sq = 0;
    for (size_t k = first_block[i]; k < first_block[i + 1]; ++k) sq += partials[k];
    tensor_sq[i] = sq;
  }
  return total_grad_norm(tensor_sq);
}

float clip_grad_norm(const std::vector<Tensor>& params, float max_norm) {
  if (!(max_norm > 0.0f)) fail("clip_grad_norm: max_norm must be positive, got " + std::to_string(max_norm));
  const float total = grad_norm(params);
  const float coef = clip_coefficient(total, max_norm);
  // torch multiplies every grad by clamp(coef, max=1) unconditionally. A factor of 1 changes no bits,
  // so the pass runs for a factor below 1 and for NaN (a NaN total: every grad becomes NaN, as torch's).
  if (!(coef >= 1.0f))
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      float* gp = g.data();
      for (int64_t j = 0, n = g.numel(); j < n; ++j) gp[j] *= coef;
    }
  return total;
}

}  // namespace tfm
