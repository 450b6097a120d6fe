// fuzz/fuzz_safetensors.cc — libFuzzer target for the safetensors reader (tfm::io::load_safetensors).
//
// The reader's public entry point takes a path and memory-maps it, so each input is written into
// one anonymous in-memory file (memfd) and loaded through /proc/self/fd/N: the real mmap path,
// no disk traffic. Contract under test: any byte string either loads or throws SafeTensorsError
// whose message starts with the path; nothing else may escape, and ASan/UBSan must stay silent.
// A file that loads must be self-consistent (tensors ↔ dtypes, shapes ↔ element counts).
// Each input is loaded twice, copying and zero-copy (LoadOptions::zero_copy): both must throw the
// same message, or both load the same names with bitwise-equal tensors. A third load keeps I8 as int8
// (LoadOptions::keep_int8, the int8 model directories' reader): the same error, or the same names,
// its int8 values the Float32 ones; a file marked quantized is then dequantized
// (tfm::dequantize_state_dict), which either succeeds or throws SafeTensorsError by the same rules.
// Seeds: fuzz/corpus/safetensors/ (written by fuzz/make_seeds.py).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tfm/io/safetensors.h"
#include "tfm/models/quantize.h"

namespace {

int memfd() {
  static const int fd = [] {
    const int f = memfd_create("tfm_fuzz_safetensors", 0);
    if (f < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    return f;
  }();
  return fd;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd();
  if (ftruncate(fd, 0) != 0 || (size > 0 && pwrite(fd, data, size, 0) != static_cast<ssize_t>(size))) {
    std::perror("memfd write");
    std::abort();
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  // Loads in one mode; returns the error message ("" on success) and checks the invariants.
  const auto message = [&](const tfm::io::SafeTensorsError& e) {
    const std::string msg = e.what();
    check(!msg.empty(), "empty error message");
    check(msg.rfind(path + ": ", 0) == 0, "error message does not start with the path");
    check(msg.find('\n') == std::string::npos, "error message is not one line");
    return msg;
  };
  const auto load = [&](bool zero_copy, tfm::io::SafeTensorsFile* out, bool keep_int8 = false) -> std::string {
    try {
      *out = tfm::io::load_safetensors(path, tfm::io::LoadOptions{.zero_copy = zero_copy, .keep_int8 = keep_int8});
    } catch (const tfm::io::SafeTensorsError& e) {
      return message(e);
    }
    const tfm::io::SafeTensorsFile& f = *out;
    check(f.dtypes.size() == f.tensors.size() + f.int8.size(), "dtypes and tensors differ in size");
    check(keep_int8 || f.int8.empty(), "int8 tensors without keep_int8");
    for (const auto& [n, t] : f.tensors) {
      check(f.contains(n) && f.dtypes.count(n), "a listed name has no tensor or no dtype");
      int64_t numel = 1;
      for (const int64_t d : t.shape()) numel *= d;
      check(numel == t.numel(), "numel differs from the product of the shape");
      check(zero_copy || !f.mapped.count(n), "the copying loader returned a mapped tensor");
    }
    return "";
  };
  tfm::io::SafeTensorsFile copied, mapped;
  const std::string e1 = load(false, &copied);
  const std::string e2 = load(true, &mapped);
  check(e1 == e2, "copying and zero-copy loads disagree on the error");
  if (!e1.empty()) return 0;
  check(copied.tensors.names() == mapped.tensors.names(), "copying and zero-copy loads disagree on the names");
  for (const auto& [n, a] : copied.tensors) {
    const tfm::Tensor& b = mapped.at(n);
    check(a.dtype() == b.dtype() && a.shape() == b.shape(), "modes disagree on dtype or shape");
    const bool f32 = a.dtype() == tfm::DType::FLOAT32;
    const size_t bytes = static_cast<size_t>(a.numel()) * (f32 ? 4 : 1);
    const void* pa = f32 ? static_cast<const void*>(a.data()) : a.data_bool();
    const void* pb = f32 ? static_cast<const void*>(b.data()) : b.data_bool();
    check(bytes == 0 || std::memcmp(pa, pb, bytes) == 0, "modes disagree on the values");
  }
  tfm::io::SafeTensorsFile kept;
  check(load(true, &kept, true).empty(), "keep_int8 fails where the other loads succeed");
  check(kept.tensors.size() + kept.int8.size() == copied.tensors.size(), "keep_int8 loses or adds names");
  for (const auto& [n, q] : kept.int8) {
    const tfm::Tensor& a = copied.at(n);
    check(a.shape() == q.shape && static_cast<size_t>(a.numel()) == q.data.size(), "int8 shape differs");
    for (size_t i = 0; i < q.data.size(); ++i) check(a.data()[i] == float(q.data[i]), "int8 value differs");
  }
  if (tfm::is_quantized(kept)) {
    try {
      const tfm::NamedTensors s = tfm::dequantize_state_dict(kept);
      for (const auto& [n, q] : kept.int8) check(s.contains(n), "a dequantized matrix is missing");
    } catch (const tfm::io::SafeTensorsError& e) {
      message(e);
    }
  }
  return 0;
}
