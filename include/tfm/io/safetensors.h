// tfm/io/safetensors.h — read and write the safetensors format (huggingface/safetensors), the
// weight format tfm shares with PyTorch.
//
// Format: an 8-byte little-endian u64 header length N, N bytes of UTF-8 JSON header, then the data
// buffer. The header is an object {name: {"dtype": "F32", "shape": [d0, ..], "data_offsets":
// [begin, end]}, ..} with an optional "__metadata__": {str: str}; offsets are byte offsets into
// the data buffer (which starts at 8 + N); tensors are row-major, little-endian.
//
// Reading memory-maps the file and trusts nothing in it: every malformed header, range or value
// raises SafeTensorsError naming the file, the tensor key and expected against actual. Like the
// reference implementation, the tensors' byte ranges must tile the data buffer exactly (no
// overlaps, no holes, no trailing bytes), so a file cannot hide data a reader never sees.
// By default every tensor is copied out and the mapping dropped before load_safetensors returns;
// LoadOptions::zero_copy keeps it and lets F32 tensors point into it (see there).
//
// To support another dtype on read: add a row to the dtype table in src/io/safetensors.cc with
// its element size and its conversion to Float32 (or Bool), then a fixture in
// tests/gen/gen_safetensors.py and a case in tests/io/safetensors_test.cc.
#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tfm/named_tensors.h"
#include "tfm/tensor.h"

namespace tfm::io {

// Every error from this module: the message is one line that always starts with the file path,
// e.g. "w.safetensors: tensor 'enc.weight': data_offsets [0, 100] give 100 bytes, expected 256
// (F32 × (8, 8))". I/O failures (missing file, permission, disk full) come through as well.
class SafeTensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct LoadOptions {
  // Zero-copy loading. When set, the file is mapped copy-on-write (MAP_PRIVATE, PROT_READ |
  // PROT_WRITE) and every non-empty F32 tensor whose data lies 4-byte aligned in the mapping is a
  // Tensor::from_external view of it: no copy, no anonymous memory, pages read on first touch.
  // Other tensors (other dtypes, or F32 data at an offset that is not a multiple of 4, which the
  // format allows) are converted into owned storage as usual. The mapping is shared by those
  // views and unmapped when the last of them (and of their reshapes, narrows and detaches) dies,
  // which may be long after the SafeTensorsFile is gone; clone() one to own it.
  // Writes to a mapped tensor (an optimizer step, copy_, fill_) change this process's private copy
  // of the touched pages only: never the file, never another process's view of it.
  // All validation (header, ranges, values of every tensor) happens before any tensor is handed
  // out, exactly as in the copying mode, and raises the same errors.
  // The hazard, and the reason zero-copy is opt-in: the tensors read the file for as long as they
  // live. If another process truncates the file meanwhile, reading a vanished page raises SIGBUS
  // and kills the process; a program writing into the file in place (not by rename) changes what
  // the not-yet-written pages of the tensors read. tfm's own writers (save_safetensors,
  // checkpoints) replace files by atomic rename, which leaves an existing mapping untouched.
  bool zero_copy = false;
  // With zero_copy: map the file read-only (PROT_READ) instead. The views are then for reading only —
  // a write through one is a segmentation fault — and, being clean file pages nothing can have
  // changed, they may be given back to the kernel once read (InferenceMode does so for the Linear
  // weights it packs) and are read from the file again if touched. For a model that only runs
  // (tfm::load_model_dir's WeightsLoad::MAP_READ_ONLY).
  bool read_only = false;
  // Keep I8 tensors as int8 (in SafeTensorsFile::int8) instead of converting them to Float32: for
  // int8-quantized weights (tfm/models/quantize.h), whose integers are the data. With zero_copy and
  // read_only they are views of the mapping (Int8Tensor::view), like the F32 tensors.
  bool keep_int8 = false;
};

// An int8 tensor as stored (I8): row-major, `shape` outermost first. Its values are `data`, or, for a
// view of a read-only mapping (LoadOptions), `view` (data empty), which `keeper` keeps mapped.
struct Int8Tensor {
  Shape shape;
  std::vector<int8_t> data;  // numel(shape) values
  const int8_t* view = nullptr;
  std::shared_ptr<const void> keeper;
  const int8_t* values() const { return view ? view : data.data(); }
};

struct SafeTensorsFile {
  // Every tensor, in header order: Float32 for every numeric dtype, Bool for BOOL; same shape as
  // in the file (shape [] is a 0-dimensional tensor with one element; a 0 dim gives an empty
  // tensor). Each owns its storage unless its name is in `mapped`.
  NamedTensors tensors;
  // Name -> the dtype string in the file ("F32", "F16", "BF16", "BOOL", "I64", ...), for callers
  // whose contract is about the stored type (`tfm forward` accepts only floating-point weights).
  std::map<std::string, std::string> dtypes;
  // Names of the tensors that point into the file's mapping (LoadOptions::zero_copy, F32 data
  // 4-byte aligned); each keeps the mapping alive (see LoadOptions).
  std::set<std::string> mapped;
  // With LoadOptions::keep_int8: the I8 tensors, by name (not in `tensors`; their dtype is in `dtypes`).
  std::map<std::string, Int8Tensor> int8;
  std::map<std::string, std::string> metadata;  // the "__metadata__" object (empty when absent)
  std::string path;                             // as given to load_safetensors

  // Throws SafeTensorsError "<path>: no tensor '<name>' (file has N tensors: a, b, ...)".
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const;
};

// Loads every tensor of a safetensors file. Conversions, all exact or failing loudly:
//   F32 copied; F16, BF16 widened exactly; F64 rounded to nearest Float32 (a finite value beyond
//   the Float32 range throws rather than becoming inf); BOOL -> Bool (bytes must be 0 or 1);
//   I8 kept as int8 in SafeTensorsFile::int8 with LoadOptions::keep_int8;
//   I8, I16, I32, I64, U8, U16, U32, U64 -> Float32, throwing when |v| > 2^24, beyond which
//   consecutive integers are no longer all representable in Float32's 24-bit significand.
// FP8 and other dtypes throw "unsupported dtype".
// The one-argument form copies every tensor (LoadOptions{} : zero_copy false).
SafeTensorsFile load_safetensors(const std::string& path);
SafeTensorsFile load_safetensors(const std::string& path, const LoadOptions& options);

// Writes tensors (Float32 as "F32", Bool as "BOOL") and optional string metadata atomically: a
// temporary file in the same directory, fsync, rename (io::AtomicFileWriter: a symlink's file is replaced,
// a device or FIFO written in place). If anything throws (undefined tensor, reserved name, I/O error), `path`
// keeps its previous content.
// Layout matches the reference implementation: tensors sorted by dtype alignment (F32 before BOOL)
// then by name, data packed in that order, header keys in that order ("__metadata__" first, only
// when non-empty), header padded with spaces to a multiple of 8 bytes so the data buffer starts
// 8-aligned; the order of `tensors` does not matter. No tensor may be called "__metadata__" (names
// are unique by NamedTensors' own rule).
// `int8` adds I8 tensors (sorted with BOOL, by name; their names must differ from those in `tensors`).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {},
                      const std::map<std::string, Int8Tensor>& int8 = {});

}  // namespace tfm::io
