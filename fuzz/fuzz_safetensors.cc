// fuzz/fuzz_safetensors.cc — libFuzzer target for the safetensors reader (tfm::io::load_safetensors).
//
// The reader's public entry point takes a path and memory-maps it, so each input is written into
// one anonymous in-memory file (memfd) and loaded through /proc/self/fd/N: the real mmap path,
// no disk traffic. Contract under test: any byte string either loads or throws SafeTensorsError
// whose message starts with the path; nothing else may escape, and ASan/UBSan must stay silent.
// A file that loads must be self-consistent (tensors ↔ dtypes, shapes ↔ element counts).
// Each input is loaded twice, copying and zero-copy (LoadOptions::zero_copy): both must throw the
// same message, or both load the same names with bitwise-equal tensors.
// Seeds: fuzz/corpus/safetensors/ (written by fuzz/make_seeds.py).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tfm/io/safetensors.h"

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
  const auto load = [&](bool zero_copy, tfm::io::SafeTensorsFile* out) -> std::string {
    try {
      *out = tfm::io::load_safetensors(path, tfm::io::LoadOptions{.zero_copy = zero_copy});
    } catch (const tfm::io::SafeTensorsError& e) {
      const std::string msg = e.what();
      check(!msg.empty(), "empty error message");
      check(msg.rfind(path + ": ", 0) == 0, "error message does not start with the path");
      check(msg.find('\n') == std::string::npos, "error message is not one line");
      return msg;
    }
    const tfm::io::SafeTensorsFile& f = *out;
    check(f.dtypes.size() == f.tensors.size(), "dtypes and tensors differ in size");
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
  return 0;
}
