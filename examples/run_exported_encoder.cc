// examples/run_exported_encoder.cc — run a TransformerEncoder exported from PyTorch, through the
// public headers only.
//
//   run_exported_encoder DIR
//
// DIR holds what tools/export_torch.py writes for an nn.TransformerEncoder plus an input:
//   weights.safetensors   the module's state_dict(), PyTorch's keys ("layers.0.linear1.weight", ...)
//   inputs.safetensors    "src", (B, S, D) with batch_first
//   expected.safetensors  optional: "output", PyTorch's result, to compare against
// The module is built here in C++ with the same constructor arguments as in Python (the 3-layer
// pre-norm encoder of the test notebook: d_model 4, 2 heads, FFN 64, GELU), its weights loaded
// strictly (a missing, unexpected or misshapen key throws naming the key), and run in eval mode.
// The test suite runs it on tests/fixtures/parity/notebook_encoder.
#include <tfm/autograd.h>
#include <tfm/io/safetensors.h>
#include <tfm/modules/transformer.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR  (DIR holds weights.safetensors and inputs.safetensors)\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    // nn.TransformerEncoder(nn.TransformerEncoderLayer(4, 2, 64, 0.2, "gelu", batch_first=True,
    //                       norm_first=True), num_layers=3)
    tfm::TransformerLayerOptions o;
    o.d_model = 4;
    o.nhead = 2;
    o.dim_feedforward = 64;
    o.dropout = 0.2f;
    o.activation = tfm::Activation::GELU;
    o.batch_first = true;
    o.norm_first = true;
    tfm::TransformerEncoder encoder(o, /*num_layers=*/3, /*final_norm=*/false);

    const tfm::io::SafeTensorsFile weights = tfm::io::load_safetensors(dir + "/weights.safetensors");
    encoder.load_state_dict(weights.tensors, weights.path);
    encoder.eval();  // dropout off, as module.eval() in PyTorch

    const tfm::io::SafeTensorsFile inputs = tfm::io::load_safetensors(dir + "/inputs.safetensors");
    const tfm::Tensor& src = inputs.at("src");  // (B, S, D)
    tfm::Tensor out;                                    // (B, S, D)
    {
      tfm::NoGradGuard no_grad;  // inference: no autograd tape
      out = encoder.forward(src);
    }
    std::printf("encoder: %lld parameters, src %s -> output %s\n",
                static_cast<long long>(encoder.num_parameters()), tfm::describe(src).c_str(),
                tfm::describe(out).c_str());
    const float* y = out.data();
    for (int64_t i = 0; i < out.numel(); ++i)
      std::printf("%s% .6f%s", i % o.d_model == 0 ? "  " : " ", y[i], i % o.d_model == o.d_model - 1 ? "\n" : "");

    const std::string expected_path = dir + "/expected.safetensors";
    if (FILE* f = std::fopen(expected_path.c_str(), "rb")) {
      std::fclose(f);
      const tfm::io::SafeTensorsFile expected = tfm::io::load_safetensors(expected_path);
      const tfm::Tensor& ref = expected.at("output");  // float64 in the file, read as float32
      if (ref.shape() != out.shape()) {
        std::fprintf(stderr, "output %s but PyTorch gave %s\n", tfm::describe(out).c_str(),
                     tfm::describe(ref).c_str());
        return 1;
      }
      double max_err = 0, max_ref = 0;
      for (int64_t i = 0; i < ref.numel(); ++i) {
        max_err = std::max(max_err, std::fabs(double(y[i]) - double(ref.data()[i])));
        max_ref = std::max(max_ref, std::fabs(double(ref.data()[i])));
      }
      const double rel = max_err / std::max(max_ref, 1e-30);
      // The parity suite's bound for this case is max(2e-5, 20 × PyTorch float32's own error);
      // 2e-5 ≈ 170 float32 ulps (2^-23 ≈ 1.2e-7) covers three layers of float32 rounding.
      std::printf("max relative error against PyTorch (float64): %.3g\n", rel);
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
