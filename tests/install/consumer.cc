// tests/install/consumer.cc — a user's program against an installed tfm: builds a module from its
// PyTorch constructor arguments, runs the `tfm forward` contract in memory, round-trips the
// output through safetensors, and trains a tiny model for one step (the trainer links MPI's
// library where tfm was built with it: the link flags must bring it). Exits non-zero (with a
// message) on any mismatch.
#include <tfm/models/forward.h>
#include <tfm/io/safetensors.h>
#include <tfm/train/options.h>
#include <tfm/train/trainer.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::string out_path = argc > 1 ? argv[1] : "consumer_out.safetensors";
  try {
    const std::string config =
        R"({"module": "TransformerEncoderLayer", "d_model": 8, "nhead": 2, "dim_feedforward": 16,
            "batch_first": true})";
    tfm::LoadedModule m(tfm::parse_module_config(config));
    tfm::NamedTensors weights = m.module().state_dict();  // PyTorch keys, initialised weights

    std::vector<float> x(2 * 3 * 8);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) / 7.0f - 0.5f;
    tfm::NamedTensors inputs{{"src", tfm::Tensor::from_vector({2, 3, 8}, x)}};  // (B, S, D)
    tfm::NamedTensors result = tfm::run_forward(config, weights, inputs);
    const tfm::Tensor& y = result.at("output");  // (B, S, D)
    if (y.shape() != tfm::Shape{2, 3, 8}) {
      std::fprintf(stderr, "unexpected output %s\n", tfm::describe(y).c_str());
      return 1;
    }

    tfm::io::save_safetensors(out_path, {{"output", y}});
    const auto back = tfm::io::load_safetensors(out_path);
    const tfm::Tensor& z = back.at("output");
    for (int64_t i = 0; i < y.numel(); ++i)
      if (z.data()[i] != y.data()[i]) {
        std::fprintf(stderr, "round trip changed element %lld\n", static_cast<long long>(i));
        return 1;
      }
    const tfm::train::TrainSetup setup = tfm::train::resolve_train_options(
        {{"task", "reverse"}, {"out", out_path + ".run"}, {"max-steps", "1"}, {"d-model", "8"}, {"nhead", "2"},
         {"layers", "1"}, {"dim-feedforward", "16"}, {"threads", "1"}});
    const tfm::train::TrainResult r = tfm::train::run_training(setup.config);
    if (r.steps != 1) {
      std::fprintf(stderr, "trained %lld steps, expected 1\n", static_cast<long long>(r.steps));
      return 1;
    }
    std::printf("consumer ok: %s %s, %lld parameters\n", std::string(tfm::enum_name(m.config().kind)).c_str(), tfm::describe(y).c_str(),
                static_cast<long long>(m.module().num_parameters()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
