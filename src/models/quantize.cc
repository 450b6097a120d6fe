// src/models/quantize.cc — int8-quantized model directories (contract in tfm/models/quantize.h).
#include "tfm/models/quantize.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <vector>

#include "io/file_util.h"
#include "kernels/kernels.h"
#include "quote.h"
#include "tensor_impl.h"
#include "tfm/models/model_dir.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& path, const std::string& msg) { throw io::SafeTensorsError(path + ": " + msg); }

// One matrix (rows, cols) → int8 rows and scales at the fixed point of quantize ∘ dequantize: the
// stored scale s must satisfy fl(fl(127·s) / 127) = s for the packing of q·s to find it again;
// one or two rounds reach it (the loop stops at the first repeat).
void quantize_matrix(const float* w, int64_t rows, int64_t cols, io::Int8Tensor& q, std::vector<float>& scale) {
  q.shape = {rows, cols};
  q.data.resize(static_cast<size_t>(rows * cols));
  scale.resize(static_cast<size_t>(rows));
  kernels::quantize_rows_s8(w, rows, cols, cols, q.data.data(), scale.data());
  std::vector<float> back(static_cast<size_t>(rows * cols)), s2(scale.size());
  std::vector<int8_t> q2(q.data.size());
  for (int round = 0; round < 8; ++round) {
    kernels::dequantize_rows_s8(q.data.data(), rows, cols, cols, scale.data(), back.data());
    kernels::quantize_rows_s8(back.data(), rows, cols, cols, q2.data(), s2.data());
    if (q2 == q.data && s2 == scale) return;
    q.data.swap(q2);
    scale.swap(s2);
  }
}

// quantize_state_dict's body into `out`; false when should_stop (asked before each matrix) said stop.
bool quantize_into(const NamedTensors& state, QuantizedStateDict& out, const std::function<bool()>& should_stop) {
  for (const auto& [key, t] : state) {
    if (should_stop && should_stop()) return false;
    if (t.dtype() != DType::FLOAT32 || t.dim() != 2 || t.numel() == 0) {
      out.f32.insert(key, t);
      continue;
    }
    const Tensor& c = t;  // tensors are contiguous
    io::Int8Tensor q;
    std::vector<float> scale;
    quantize_matrix(c.data(), c.size(0), c.size(1), q, scale);
    Tensor s = Tensor::empty({c.size(0)});
    std::memcpy(s.data(), scale.data(), scale.size() * sizeof(float));
    out.f32.insert(key + ".scale", s);
    out.int8.emplace(key, std::move(q));
  }
  return true;
}

}  // namespace

QuantizedStateDict quantize_state_dict(const NamedTensors& state) {
  QuantizedStateDict out;
  quantize_into(state, out, {});
  return out;
}

bool is_quantized(const io::SafeTensorsFile& file) {
  const auto it = file.metadata.find(QUANTIZATION_METADATA_KEY);
  return it != file.metadata.end() && it->second == QUANTIZATION_INT8;
}

namespace {

// dequantize_state_dict's body; with `take` (file itself, whose int8 data it takes) each matrix becomes a
// tensor_from_int8_rows instead of float32 values.
NamedTensors dequantize(const io::SafeTensorsFile& file, const NamedTensors* into, io::SafeTensorsFile* take) {
  const std::string& path = file.path;
  NamedTensors out;
  std::map<std::string, const Tensor*> scales;  // "<k>.scale" tensors, each claimed by its I8 matrix
  const std::string suffix = ".scale";
  for (const auto& [key, t] : file.tensors) {
    const bool is_scale = key.size() > suffix.size() && key.ends_with(suffix);
    const std::string base = is_scale ? key.substr(0, key.size() - suffix.size()) : std::string();
    if (is_scale && file.int8.contains(base))
      scales.emplace(key, &t);
    else if (is_scale && !file.tensors.contains(base))
      fail(path, "tensor " + quote_name(key) + ": a scale without its I8 matrix " + quote_name(base));
    else if (file.dtypes.at(key) != "F32")
      fail(path, "tensor " + quote_name(key) + ": " + file.dtypes.at(key) + " where a quantized state_dict holds F32 (or I8 matrices)");
    else
      out.insert(key, t);
  }
  for (const auto& [key, q] : file.int8) {
    const std::string who = "tensor " + quote_name(key);
    if (q.shape.size() != 2)
      fail(path, who + ": I8 of shape " + shape_str(q.shape) + " where F32 is required (only matrices are quantized)");
    const std::string skey = key + ".scale";
    if (file.int8.contains(skey)) fail(path, "tensor " + quote_name(skey) + ": dtype I8, expected F32");
    const auto it = scales.find(skey);
    if (it == scales.end()) fail(path, who + ": I8 matrix without its per-row scales " + quote_name(skey));
    const Tensor& s = *it->second;
    const std::string& sdt = file.dtypes.at(skey);
    if (sdt != "F32") fail(path, "tensor " + quote_name(skey) + ": dtype " + sdt + ", expected F32");
    if (s.shape() != Shape{q.shape[0]})
      fail(path, "tensor " + quote_name(skey) + ": shape " + shape_str(s.shape()) + ", expected " +
                     shape_str(Shape{q.shape[0]}) + " (one scale per row of " + quote_name(key) + ")");
    const int64_t rows = q.shape[0], cols = q.shape[1];
    const float* sp = s.data();
    // Finite and ≥ 0, and small enough that every q·scale (|q| ≤ 128) is finite: a lazy matrix's values are
    // computed after the load's finite check.
    for (int64_t r = 0; r < rows; ++r)
      if (!(std::isfinite(sp[r]) && sp[r] >= 0.0f && std::isfinite(128.0f * sp[r])))
        fail(path, "tensor " + quote_name(skey) + ": element " + std::to_string(r) + " is " + number_text(sp[r]) +
                       ", expected a finite scale ≥ 0 (at most FLT_MAX / 128)");
    if (take) {
      struct Held {  // what the lazy tensor's rows point into: q's values (or its mapping), the scales
        io::Int8Tensor q;
        Tensor scale;
      };
      io::Int8Tensor& stored = take->int8.at(key);  // q itself: not read after this
      auto held = std::make_shared<Held>(Held{std::move(stored), s});
      stored.view = nullptr;  // moved out: the keeper went with it
      auto r = std::make_shared<Int8Rows>();
      r->q = held->q.values();
      r->file_pages = held->q.view != nullptr;
      // Int8 inference packs these integers only if they are what quantizing their values gives (tfm quantize
      // writes that fixed point; another tool's file may not): then the packed weight is the copying load's.
      // Else it quantizes the computed values, as the copying load does.
      r->fixed_point = true;
      std::vector<float> row(static_cast<size_t>(cols));
      std::vector<int8_t> q2(static_cast<size_t>(cols));
      for (int64_t i = 0; i < rows && r->fixed_point; ++i) {
        const int8_t* qi = r->q + i * cols;
        kernels::dequantize_rows_s8(qi, 1, cols, cols, sp + i, row.data());
        float s2 = 0.0f;
        kernels::quantize_rows_s8(row.data(), 1, cols, cols, q2.data(), &s2);
        r->fixed_point = s2 == sp[i] && std::memcmp(q2.data(), qi, static_cast<size_t>(cols)) == 0;
      }
      if (r->file_pages) drop_mapped_pages(r->q, static_cast<size_t>(rows * cols));  // read by the check
      r->scale = held->scale.data();
      r->rows = rows;
      r->cols = cols;
      r->keeper = held;
      out.insert(key, tensor_from_int8_rows(std::move(r)));
      continue;
    }
    const auto dst = into ? into->find(key) : NamedTensors::const_iterator{};
    const bool in_place =
        into && dst != into->end() && dst->second.dtype() == DType::FLOAT32 && dst->second.shape() == Shape(q.shape);
    Tensor w = in_place ? dst->second : Tensor::empty(q.shape);
    kernels::dequantize_rows_s8(q.values(), rows, cols, cols, sp, w.data());
    out.insert(key, std::move(w));
  }
  return out;
}

}  // namespace

void check_quantized_shapes(const io::SafeTensorsFile& file, const NamedTensors& params) {
  // The key Module::load_state_dict would name first (the parameters in order, then the state's extra keys: the
  // F32 ones before the matrices, as dequantize_state_dict lists them), named here when the file holds it as I8.
  const auto i8 = [](const io::Int8Tensor& q) { return "I8" + shape_str(q.shape); };
  for (const auto& [key, t] : params) {
    if (const auto q = file.int8.find(key); q != file.int8.end()) {
      if (Shape(q->second.shape) != t.shape())
        throw std::invalid_argument(file.path + ": key " + quote_name(key) + " has " + i8(q->second) +
                                    " (a quantized matrix), expected " + describe(t));
      continue;
    }
    const auto f = file.tensors.find(key);
    if (f == file.tensors.end() || f->second.dtype() != DType::FLOAT32 || f->second.shape() != t.shape()) return;
  }
  for (const auto& [key, t] : file.tensors)
    if (!params.contains(key) && !(key.ends_with(".scale") && file.int8.contains(key.substr(0, key.size() - 6))))
      return;
  for (const auto& [key, q] : file.int8)
    if (!params.contains(key))
      throw std::invalid_argument(file.path + ": unexpected key " + quote_name(key) + " (" + i8(q) +
                                  ", a quantized matrix)");
}

NamedTensors dequantize_state_dict(const io::SafeTensorsFile& file, const NamedTensors* into) {
  return dequantize(file, into, nullptr);
}

NamedTensors dequantize_state_dict_lazy(io::SafeTensorsFile& file) { return dequantize(file, nullptr, &file); }

bool is_quantized_model_dir(const std::string& dir) {
  const std::string file = model_dir::path(dir, model_dir::MODEL);
  if (!fs::exists(file)) return false;
  return is_quantized(io::load_safetensors(file, io::LoadOptions{.zero_copy = true, .keep_int8 = true}));
}

namespace {

// Whether `name` is one of the files a model directory holds (tfm/models/model_dir.h's layout: the description,
// the weights, an import's record, a training run's files and its best model), or the hidden temporary file or
// staging directory (".<name>.tmp.…") a writer of one left when it was killed: what --force may replace.
bool of_a_model_directory(const std::string& name) {
  static const std::vector<std::string> files = [] {
    std::vector<std::string> f(std::begin(model_dir::DESCRIPTION_FILES), std::end(model_dir::DESCRIPTION_FILES));
    f.insert(f.end(), std::begin(model_dir::RUN_FILES), std::end(model_dir::RUN_FILES));
    for (const char* own : {model_dir::MODEL, model_dir::GPT2_SOURCE}) f.emplace_back(own);
    return f;
  }();
  for (const std::string& f : files)
    if (const std::string temp = io::temp_prefix(f); name == f || (name.size() > temp.size() && name.starts_with(temp)))
      return true;
  return false;
}

// --force replaces `out` whole (io::StagedDirectory): refused when it holds anything but a model directory's files.
void refuse_replacing_other_files(const std::string& out) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out, ec)) {
    const std::string name = e.path().filename().string();
    if (!of_a_model_directory(name))
      throw std::invalid_argument("quantize: " + out + " holds " + quote_name(name) +
                                  ", which is not a model directory's file: --force replaces a model directory "
                                  "and deletes nothing else (choose another --out, or move it away)");
  }
}

}  // namespace

bool quantize_model_dir(const std::string& dir, const std::string& out, bool force,
                        const std::function<bool()>& should_stop) {
  io::refuse_output_holding(out, dir);  // before the work: --force would delete the model it reads
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_directory(out, ec))  // --force replaces a directory only
    throw std::invalid_argument("quantize: " + out + " exists and is not a directory (choose another --out)");
  if (fs::exists(out, ec) && !force)
    throw std::invalid_argument("quantize: " + out + " exists (give --force to replace it)");
  if (fs::exists(out, ec)) refuse_replacing_other_files(out);
  // A training run writing into `out` holds its lock (tfm/train/trainer.h): replaced under it, the run's next
  // checkpoint would land beside this model's files; another quantize, import or export replacing it holds it too.
  // Taken before the work (io::lock_for_replacing, the check of every replacing writer) and handed to the staged
  // directory, which holds it until the new directory is in place.
  std::unique_ptr<io::DirectoryLock> out_lock = io::lock_for_replacing(out);
  const TrainedModel m = load_model_dir(dir, WeightsLoad::MAP_READ_ONLY);  // checks the directory whole
  if (m.quantized) throw std::invalid_argument("quantize: " + dir + " is quantized already");
  QuantizedStateDict q;
  if (!quantize_into(m.model->state_dict(), q, should_stop)) return false;

  // The staging directories of runs killed while they wrote `out` (a stop signal's second, say) go first.
  io::remove_abandoned_staging(out);
  // Written whole, then renamed over `out`; deleted if not. Its errors are said of `out`, not of the staging directory.
  io::StagedDirectory staged(out, force, {dir}, std::move(out_lock));
  staged.write([&](const std::string& tmp) {
    model_dir::copy_description(dir, tmp);
    io::save_safetensors(model_dir::path(tmp, model_dir::MODEL), q.f32,
                         {{QUANTIZATION_METADATA_KEY, QUANTIZATION_INT8}}, q.int8);
  });
  if (should_stop && should_stop()) return false;
  if (fs::exists(out, ec)) refuse_replacing_other_files(out);  // (again: files put there while this ran)
  staged.commit();
  return true;
}

}  // namespace tfm
