// fuzz/fuzz_safetensors.cc — libFuzzer target for the safetensors reader (tfm::io::load_safetensors).
//
// The reader's public entry point takes a path and memory-maps it, so each input is written into
// one anonymous in-memory file (memfd) and loaded through /proc/self/fd/N: the real mmap path,
// no disk traffic. Contract under test: any byte string either loads or throws SafeTensorsError
// whose message starts with the path; nothing else may escape, and ASan/UBSan must stay silent.
// A file that loads must be self-consistent (names ↔ tensors, shapes ↔ element counts).
// Seeds: fuzz/corpus/safetensors/ (written by fuzz/make_seeds.py).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
  try {
    const tfm::io::SafeTensorsFile f = tfm::io::load_safetensors(path);
    check(f.names.size() == f.tensors.size(), "names and tensors differ in size");
    for (const std::string& n : f.names) {
      check(f.contains(n), "a listed name has no tensor");
      const tfm::Tensor& t = f.at(n).tensor;
      int64_t numel = 1;
      for (const int64_t d : t.shape()) numel *= d;
      check(numel == t.numel(), "numel differs from the product of the shape");
    }
  } catch (const tfm::io::SafeTensorsError& e) {
    const std::string msg = e.what();
    check(msg.rfind(path + ": ", 0) == 0, "error message does not start with the path");
    check(msg.find('\n') == std::string::npos, "error message is not one line");
  }
  return 0;
}
