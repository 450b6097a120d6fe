// python/_core.cc — tfm._core, the native half of the Python package `tfm` (python/tfm/__init__.py is
// the other half, and the API users see). It binds the public C++ API and nothing else:
//   Tensor        a tfm::Tensor with the buffer protocol (np.asarray(t) shares its memory)
//   from_numpy    a C-contiguous, aligned float32 array as a Tensor without a copy (the Tensor keeps
//                 the array alive); any other float array or a bool mask converted with one copy
//   Module        tfm::LoadedModule (tfm/models/forward.h): forward, forward_backward
//   TrainedModel  tfm::TrainedModel (tfm/models/model_dir.h): translate, generate, score, evaluate
//   train         tfm::train::resolve_train_options + run_training (tfm/train/options.h, trainer.h)
//
// Every call that computes releases the GIL; Python callbacks (progress, streamed pieces) take it back
// while they run. Exceptions: std::invalid_argument → ValueError, file errors (io::SafeTensorsError,
// data::DataError, a missing file) → FileNotFoundError / OSError, everything else → RuntimeError.
//
// To bind another library function: a def() below taking and returning Python-friendly types (str,
// dict of Tensor, list), its body inside py::gil_scoped_release, then its Python face in
// python/tfm/__init__.py with a docstring, and its signature in python/tfm/__init__.pyi.
#include <omp.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tfm/data/text.h"
#include "tfm/data/tsv.h"
#include "tfm/inference.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/family.h"
#include "tfm/models/forward.h"
#include "tfm/models/generate.h"
#include "tfm/models/model_dir.h"
#include "tfm/models/text_eval.h"
#include "tfm/train/evaluate.h"
#include "tfm/train/options.h"
#include "tfm/train/trainer.h"

namespace py = pybind11;

namespace {

// ---- arrays ----

// A Float32 tensor over a numpy array's memory. The owner holds a reference to the array and drops it
// with the GIL held, from whichever thread releases the last view.
tfm::Tensor tensor_over(py::array array) {
  tfm::Shape shape(array.shape(), array.shape() + array.ndim());
  // tfm never writes an input, so a read-only array (np.broadcast_to, a frozen buffer) is shared too.
  float* data = const_cast<float*>(static_cast<const float*>(array.data()));
  auto* ref = new py::object(std::move(array));
  std::shared_ptr<void> owner(ref, [](void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
  if (tfm::shape_numel(shape) == 0) return tfm::Tensor::zeros(shape);
  return tfm::Tensor::from_external(shape, data, std::move(owner));
}

// Zero-copy for C-contiguous aligned float32 (writeable or not); one copy
// for other float layouts and dtypes; bool arrays become Bool tensors (one copy, one byte each).
tfm::Tensor from_numpy(py::array a) {
  if (a.dtype().is(py::dtype::of<bool>())) {
    py::array_t<bool, py::array::c_style | py::array::forcecast> c(a);
    tfm::Shape shape(c.shape(), c.shape() + c.ndim());
    const auto* p = reinterpret_cast<const uint8_t*>(c.data());
    return tfm::Tensor::from_bool(shape, std::vector<uint8_t>(p, p + c.size()));
  }
  const char kind = a.dtype().kind();
  if (kind != 'f' && kind != 'i' && kind != 'u')
    throw std::invalid_argument(std::string("expected a float32 or bool array, got dtype '") +
                                std::string(py::str(a.dtype())) + "'");
  const bool direct = a.dtype().is(py::dtype::of<float>()) && (a.flags() & py::array::c_style) &&
                      reinterpret_cast<uintptr_t>(a.data()) % alignof(float) == 0;
  if (direct) return tensor_over(a);
  py::array_t<float, py::array::c_style | py::array::forcecast> c(a);  // one copy
  return tensor_over(c);
}

py::buffer_info tensor_buffer(tfm::Tensor& t) {
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end()), strides(shape.size());
  const py::ssize_t item = t.dtype() == tfm::DType::BOOL ? 1 : sizeof(float);
  py::ssize_t s = item;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  void* data = t.numel() == 0 ? nullptr
               : t.dtype() == tfm::DType::BOOL ? static_cast<void*>(t.data_bool())
                                               : static_cast<void*>(t.data());
  return py::buffer_info(data, item, t.dtype() == tfm::DType::BOOL ? "?" : py::format_descriptor<float>::format(),
                         static_cast<py::ssize_t>(shape.size()), shape, strides);
}

tfm::NamedTensors named_from_dict(const py::dict& d) {
  tfm::NamedTensors out;
  for (const auto& [k, v] : d) out.insert(py::cast<std::string>(k), py::cast<tfm::Tensor>(v));
  return out;
}

py::dict dict_from_named(const tfm::NamedTensors& t) {
  py::dict d;
  for (const auto& [k, v] : t) d[py::str(k)] = py::cast(v);
  return d;
}

// ---- threads ----

// tfm.set_num_threads(n): applied at the start of every computing call, on the calling thread, because OpenMP's
// thread count is a per-thread setting (a Python worker thread would otherwise start from the default) and
// because another library in the process may share the OpenMP runtime and change it (Debian's torch links the
// same libgomp: torch.set_num_threads sets the calling thread's count too). 0: not set, OpenMP's own setting.
std::atomic<int> g_threads{0};

void apply_threads() {
  if (const int n = g_threads.load()) omp_set_num_threads(n);
}

// ---- errors ----

[[noreturn]] void raise_file_error(const char* what) {
  // The library's file errors carry strerror's text; a missing file is FileNotFoundError.
  PyObject* type = std::strstr(what, std::strerror(ENOENT)) ? PyExc_FileNotFoundError : PyExc_OSError;
  PyErr_SetString(type, what);
  throw py::error_already_set();
}

// ---- trained models ----

struct PyTrainedModel {
  tfm::TrainedModel m;
  tfm::Precision precision = tfm::Precision::FLOAT32;
};

tfm::Precision precision_of(const std::string& dtype) { return tfm::enum_from_name<tfm::Precision>(dtype); }

// Code points predicted in a text: every UTF-8 lead byte but the first (tfm/models/text_eval.h).
py::dict event_dict(const tfm::train::ProgressEvent& e);
py::dict row_dict(const tfm::train::EvalRow& r) {
  py::dict d;
  d["step"] = r.step;
  d["epoch"] = r.epoch;
  d["lr"] = r.lr;
  d["train_loss"] = r.train_loss;
  d["valid_loss"] = r.valid_loss;
  d["valid_token_accuracy"] = r.valid_token_accuracy;
  d["valid_sequence_accuracy"] = r.valid_sequence_accuracy;
  d["tokens_per_sec"] = r.tokens_per_sec;
  d["elapsed_seconds"] = r.elapsed_seconds;
  return d;
}

py::dict event_dict(const tfm::train::ProgressEvent& e) {
  using Kind = tfm::train::ProgressEvent::Kind;
  py::dict d;
  d["kind"] = e.kind == Kind::STEP ? "step" : e.kind == Kind::EVAL ? "eval" : e.kind == Kind::CHECKPOINT ? "checkpoint" : "note";
  d["step"] = e.step;
  d["total_steps"] = e.total_steps;
  d["epoch"] = e.epoch;
  d["loss"] = e.loss;
  d["lr"] = e.lr;
  d["tokens_per_sec"] = e.tokens_per_sec;
  d["elapsed_seconds"] = e.elapsed_seconds;
  d["eta_seconds"] = e.eta_seconds;
  d["message"] = e.message;
  if (e.has_eval) d["eval"] = row_dict(e.last_eval);
  return d;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "tfm's native module; use the package `tfm`, not this";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tfm::io::SafeTensorsError& e) {
      raise_file_error(e.what());
    } catch (const tfm::data::DataError& e) {
      raise_file_error(e.what());
    } catch (const std::invalid_argument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const std::runtime_error& e) {
      // A file the library could not open (load_model_dir, a --prompt-file) says so with strerror.
      if (std::strstr(e.what(), std::strerror(ENOENT))) raise_file_error(e.what());
      throw;
    }
  });

  py::class_<tfm::Tensor>(m, "Tensor", py::buffer_protocol(), "A tfm tensor; np.asarray(t) shares its memory")
      .def_buffer(&tensor_buffer)
      .def_property_readonly("shape", [](const tfm::Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("dtype", [](const tfm::Tensor& t) { return std::string(tfm::dtype_name(t.dtype())); })
      .def("__repr__", [](const tfm::Tensor& t) { return "tfm.Tensor(" + tfm::describe(t) + ")"; });
  m.def("from_numpy", &from_numpy, py::arg("array"));

  m.def("set_num_threads", [](int n) {
    if (n < 1) throw std::invalid_argument("set_num_threads: n must be ≥ 1, got " + std::to_string(n));
    g_threads.store(n);
    omp_set_num_threads(n);
  });
  m.def("get_num_threads", [] {
    const int n = g_threads.load();
    return n > 0 ? n : omp_get_max_threads();
  });

  // ---- modules ----
  py::class_<tfm::LoadedModule>(m, "Module")
      .def(py::init([](const std::string& config_json, py::dict weights, const std::string& dtype,
                       const std::string& source) {
             const tfm::NamedTensors w = named_from_dict(weights);
             const tfm::Precision p = precision_of(dtype);
             py::gil_scoped_release nogil;
             apply_threads();
             auto mod = std::make_unique<tfm::LoadedModule>(tfm::parse_module_config(config_json), p);
             mod->load_weights(w, source);
             return mod;
           }),
           py::arg("config_json"), py::arg("weights"), py::arg("dtype") = "f32", py::arg("source") = "weights")
      .def_static(
          "load",
          [](const std::string& config_path, const std::string& weights_path, const std::string& dtype) {
            const tfm::Precision p = precision_of(dtype);
            py::gil_scoped_release nogil;
            apply_threads();
            return std::make_unique<tfm::LoadedModule>(tfm::load_module(config_path, weights_path, p));
          },
          py::arg("config_path"), py::arg("weights_path"), py::arg("dtype") = "f32")
      .def("forward",
           [](tfm::LoadedModule& mod, py::dict inputs) {
             const tfm::NamedTensors in = named_from_dict(inputs);
             tfm::NamedTensors out;
             {
               py::gil_scoped_release nogil;
               apply_threads();
               out = mod.forward(in);
             }
             return dict_from_named(out);
           })
      .def("forward_backward",
           [](tfm::LoadedModule& mod, py::dict inputs, const tfm::Tensor& grad_output) {
             const tfm::NamedTensors in = named_from_dict(inputs);
             tfm::NamedTensors out;
             {
               py::gil_scoped_release nogil;
               apply_threads();
               out = mod.forward_backward(in, grad_output);
             }
             return dict_from_named(out);
           })
      .def("state_dict", [](tfm::LoadedModule& mod) { return dict_from_named(mod.module().state_dict()); })
      .def_property_readonly("module_name",
                             [](const tfm::LoadedModule& mod) { return std::string(tfm::enum_name(mod.config().kind)); })
      .def_property_readonly("batch_first", [](const tfm::LoadedModule& mod) {
        const tfm::ModuleConfig& c = mod.config();
        return c.kind == tfm::ModuleKind::MULTIHEAD_ATTENTION ? c.attention.batch_first : c.layer.batch_first;
      });

  // ---- trained model directories ----
  py::class_<PyTrainedModel>(m, "TrainedModel")
      .def(py::init([](const std::string& dir, const std::string& dtype) {
             auto t = std::make_unique<PyTrainedModel>();
             t->precision = precision_of(dtype);
             py::gil_scoped_release nogil;
             apply_threads();
             t->m = tfm::load_model_dir(dir);
             return t;
           }),
           py::arg("dir"), py::arg("dtype") = "f32")
      .def_property_readonly("is_language_model",
                             [](const PyTrainedModel& t) { return t.m.model->family().data == tfm::DataKind::TEXT; })
      .def("translate",
           [](const PyTrainedModel& t, const std::vector<std::string>& lines, int beam, int64_t batch_size) {
             if (beam < 1) throw std::invalid_argument("beam must be ≥ 1, got " + std::to_string(beam));
             if (batch_size < 1) throw std::invalid_argument("batch_size must be ≥ 1, got " + std::to_string(batch_size));
             py::gil_scoped_release nogil;
             apply_threads();
             tfm::require_data(t.m, tfm::DataKind::PAIRS, "sample from it with generate()");
             const tfm::InferenceMode scope(t.precision);
             return tfm::translate_lines(t.m, lines, beam, batch_size);
           },
           py::arg("lines"), py::arg("beam") = 1, py::arg("batch_size") = 64)
      .def("generate",
           [](const PyTrainedModel& t, const std::string& prompt, int64_t max_new_tokens, float temperature,
              int64_t top_k, float top_p, uint64_t seed, std::optional<std::string> stop,
              std::optional<std::function<void(std::string)>> on_piece, bool ignore_eos, bool prefill) {
             tfm::GenerateOptions gen;
             gen.ignore_eos = ignore_eos;
             gen.prefill = prefill;
             gen.max_new_tokens = max_new_tokens;
             gen.sampling.temperature = temperature;
             gen.sampling.top_k = top_k;
             gen.sampling.top_p = top_p;
             gen.seed = seed;
             std::string out;
             py::gil_scoped_release nogil;
             apply_threads();
             tfm::check_sampling_options(gen.sampling);
             if (max_new_tokens < 0) throw std::invalid_argument("max_new_tokens must be ≥ 0");
             tfm::require_data(t.m, tfm::DataKind::TEXT, "generate needs a language model (translate() decodes the others)");
             if (prompt.empty()) throw std::invalid_argument("the prompt is empty (give at least one character)");
             const tfm::InferenceMode scope(t.precision);
             const std::vector<int32_t> ids = tfm::data::encode_text(t.m.tgt_vocab, t.m.tgt_tokenizer, prompt, "prompt");
             if (stop && !stop->empty()) gen.stop = tfm::data::encode_text(t.m.tgt_vocab, t.m.tgt_tokenizer, *stop, "stop");
             gen.suppress = tfm::never_generated(t.m);
             tfm::generate(*t.m.model, ids, gen, [&](int64_t, int32_t token) {
               const std::string piece = tfm::data::decode_text(t.m.tgt_vocab, t.m.tgt_tokenizer, {token});
               out += piece;
               if (on_piece) {
                 py::gil_scoped_acquire gil;
                 (*on_piece)(piece);  // a Python exception propagates and ends the generation
               }
             });
             return out;
           },
           py::arg("prompt"), py::arg("max_new_tokens") = 256, py::arg("temperature") = 1.0f, py::arg("top_k") = 0,
           py::arg("top_p") = 1.0f, py::arg("seed") = 0, py::arg("stop") = py::none(), py::arg("on_piece") = py::none(),
           py::arg("ignore_eos") = false, py::arg("prefill") = true)
      .def("encode",
           [](const PyTrainedModel& t, const std::string& text) {
             tfm::require_data(t.m, tfm::DataKind::TEXT, "encode() is a language model's (translate() takes lines)");
             return tfm::data::encode_text(t.m.tgt_vocab, t.m.tgt_tokenizer, text, "text");
           },
           py::arg("text"))
      .def("decode",
           [](const PyTrainedModel& t, const std::vector<int32_t>& ids) {
             tfm::require_data(t.m, tfm::DataKind::TEXT, "decode() is a language model's");
             const std::string s = tfm::data::decode_text(t.m.tgt_vocab, t.m.tgt_tokenizer, ids);
             return py::bytes(s);
           },
           py::arg("ids"))
      .def("score",
           [](const PyTrainedModel& t, const std::string& text, int64_t batch_size) {
             if (batch_size < 1) throw std::invalid_argument("batch_size must be ≥ 1, got " + std::to_string(batch_size));
             py::gil_scoped_release nogil;
             apply_threads();
             tfm::require_data(t.m, tfm::DataKind::TEXT, "evaluate it on pairs with evaluate()");
             const tfm::InferenceMode scope(t.precision);
             return tfm::evaluate_text_string(t.m, text, batch_size).to_json();
           },
           py::arg("text"), py::arg("batch_size") = 16)
      .def("score_file",
           [](const PyTrainedModel& t, const std::string& path, int64_t batch_size) {
             if (batch_size < 1) throw std::invalid_argument("batch_size must be ≥ 1, got " + std::to_string(batch_size));
             py::gil_scoped_release nogil;
             apply_threads();
             tfm::require_data(t.m, tfm::DataKind::TEXT, "evaluate it on pairs with evaluate()");
             const tfm::InferenceMode scope(t.precision);
             return tfm::evaluate_text_file(t.m, path, batch_size).to_json();
           },
           py::arg("path"), py::arg("batch_size") = 16)
      .def("evaluate",
           [](const PyTrainedModel& t, const std::string& tsv_path, int beam, int64_t batch_size) {
             if (beam < 1) throw std::invalid_argument("beam must be ≥ 1, got " + std::to_string(beam));
             if (batch_size < 1) throw std::invalid_argument("batch_size must be ≥ 1, got " + std::to_string(batch_size));
             py::gil_scoped_release nogil;
             apply_threads();
             tfm::require_data(t.m, tfm::DataKind::PAIRS, "score it on a text with score()");
             const tfm::InferenceMode scope(t.precision);
             std::string note;
             const tfm::train::EvalSet set = tfm::train::tsv_test_set(t.m, tsv_path, &note);
             const tfm::train::Metrics r = tfm::train::evaluate(
                 t.m, set, beam, batch_size, [&](const tfm::data::Tokens& tok) { return tfm::data::detokenize(tok, t.m.tgt_tokenizer); });
             return r.to_json();
           },
           py::arg("tsv_path"), py::arg("beam") = 1, py::arg("batch_size") = 64);

  // ---- training ----
  m.def("train_options", [] {
    py::list out;
    for (const tfm::train::TrainOption& o : tfm::train::train_options()) {
      using T = tfm::train::OptionType;
      py::dict d;
      d["name"] = o.name;
      d["type"] = o.type == T::FLAG ? "flag" : o.type == T::INT ? "int" : o.type == T::FLOAT ? "float"
                  : o.type == T::CHOICE ? "choice" : "text";
      d["choices"] = o.choices;
      d["default"] = o.default_text;
      d["help"] = o.help;
      d["group"] = o.group;
      out.append(d);
    }
    return out;
  });

  // given: [(option name, text)] in any order; progress(event dict) or None. Returns a dict of the
  // run's result; raises KeyboardInterrupt after the checkpoint when Ctrl-C stopped it.
  m.def(
      "train",
      [](const std::vector<std::pair<std::string, std::string>>& given, std::optional<py::function> progress) {
        std::optional<py::error_already_set> pending;  // a Python exception that stopped the run
        tfm::train::TrainResult r;
        tfm::train::TrainConfig config;
        {
          py::gil_scoped_release nogil;
          apply_threads();
          // In table order, as tfm train hands them over.
          tfm::train::GivenOptions ordered;
          for (const tfm::train::TrainOption& o : tfm::train::train_options())
            for (const auto& g : given)
              if (g.first == o.name) ordered.push_back(g);
          for (const auto& g : given) tfm::train::train_option(g.first);  // an unknown name throws, naming it
          const tfm::train::TrainSetup setup = tfm::train::resolve_train_options(ordered);
          if (setup.run.threads > 0) omp_set_num_threads(setup.run.threads);  // threads=: this run's count
          config = setup.config;
          tfm::train::TrainHooks hooks;
          if (progress) {
            hooks.progress = [&](const tfm::train::ProgressEvent& e) {
              py::gil_scoped_acquire gil;
              if (pending) return;
              try {
                (*progress)(event_dict(e));
              } catch (py::error_already_set& err) {
                pending.emplace(std::move(err));
              }
            };
          }
          hooks.should_stop = [&](int64_t) {
            py::gil_scoped_acquire gil;
            if (!pending && PyErr_CheckSignals() != 0) pending.emplace();  // KeyboardInterrupt (Ctrl-C)
            return pending.has_value();
          };
          r = tfm::train::run_training(setup.config, hooks, setup.mode == tfm::train::StartMode::RESUME);
        }
        if (pending) throw std::move(*pending);
        py::dict d;
        d["steps"] = r.steps;
        d["epochs_completed"] = r.epochs_completed;
        d["stop_reason"] = std::string(tfm::enum_name(r.stop_reason));
        d["skipped_nonfinite"] = r.skipped_nonfinite;
        d["seconds"] = r.seconds;
        py::list history;
        for (const auto& row : r.history) history.append(row_dict(row));
        d["history"] = history;
        d["final_metrics_json"] = config.text() ? std::string() : r.final_metrics.to_json();
        d["out"] = config.out_dir;
        d["language_model"] = config.text();
        return d;
      },
      py::arg("given"), py::arg("progress") = py::none());
}
