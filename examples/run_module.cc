// examples/run_module.cc — run an encoder exported from PyTorch by tools/export_torch.py: load its
// config and weights once, then call it as often as needed. Public headers only; the README's
// C++ quickstart is this program.
//
//   run_module CONFIG.json WEIGHTS.safetensors INPUTS.safetensors [EXPECTED.safetensors]
//
// INPUTS holds "src" (the encoder's forward argument; other modules take other names, see
// tfm/models/forward.h); EXPECTED, when given, PyTorch's "output" to compare against. The test suite runs
// it on tests/fixtures/parity/notebook_encoder (a 3-layer TransformerEncoder, float64 reference).
#include <tfm/models/forward.h>
#include <tfm/io/safetensors.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: %s CONFIG.json WEIGHTS.safetensors INPUTS.safetensors [EXPECTED.safetensors]\n",
                 argv[0]);
    return 2;
  }
  try {
    tfm::LoadedModule module = tfm::load_module(argv[1], argv[2]);  // config + weights, once
    const tfm::Tensor src = tfm::io::load_safetensors(argv[3]).at("src");  // (B, S, D) with batch_first

    const tfm::NamedTensors first = module.forward({{"src", src}});  // packs the Linear weights
    const tfm::NamedTensors again = module.forward({{"src", src}});  // reuses them: nothing is rebuilt
    const tfm::Tensor& y = first.at("output");
    std::printf("%s, %lld parameters: output %s\n", std::string(tfm::enum_name(module.config().kind)).c_str(),
                static_cast<long long>(module.module().num_parameters()), tfm::describe(y).c_str());
    for (int64_t i = 0; i < y.numel(); ++i)
      if (again.at("output").data()[i] != y.data()[i]) {
        std::fprintf(stderr, "the second call differs at element %lld\n", static_cast<long long>(i));
        return 1;
      }

    if (argc == 5) {  // compare with PyTorch: max|y - ref| / max|ref| within the parity suite's floor
      const tfm::Tensor ref = tfm::io::load_safetensors(argv[4]).at("output");
      if (ref.shape() != y.shape()) {
        std::fprintf(stderr, "output %s but PyTorch gave %s\n", tfm::describe(y).c_str(), tfm::describe(ref).c_str());
        return 1;
      }
      double max_err = 0, max_ref = 0;
      for (int64_t i = 0; i < ref.numel(); ++i) {
        max_err = std::max(max_err, std::fabs(double(y.data()[i]) - double(ref.data()[i])));
        max_ref = std::max(max_ref, std::fabs(double(ref.data()[i])));
      }
      const double rel = max_err / std::max(max_ref, 1e-30);
      // 2e-5 ≈ 170 float32 ulps (2^-23 ≈ 1.2e-7): the parity suite's floor, room for three layers of rounding.
      std::printf("max relative error against PyTorch: %.3g\n", rel);
      if (!(rel <= 2e-5)) {
        std::fprintf(stderr, "mismatch: relative error %.3g > 2e-5\n", rel);
        return 1;
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
