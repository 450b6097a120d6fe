// tests/models/gpt2_test.cc — GPT-2 checkpoints (tfm/models/gpt2.h): import from and export to Hugging
// Face's layout, against the PyTorch twin (tools/torch_models.py's Gpt2, Conv1D layout and Hugging Face's
// keys), bit-for-bit export, cached generation, fine-tuning from an import, and the bad-input errors.
//
// The twin's folders have GPT-2's size of vocabulary (50257) with a synthetic tokenizer of GPT-2's
// format (tools/torch_models.py write_synthetic_gpt2_tokenizer); the torch-free tests build a tiny
// GPT-2 folder here (vocabulary: the 256 byte symbols and <|endoftext|>).
#include "tfm/models/gpt2.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tfm/data/bpe.h"
#include "tfm/data/text.h"
#include "tfm/io/safetensors.h"
#include "tfm/models/generate.h"
#include "tfm/models/model_dir.h"
#include "tfm/models/quantize.h"
#include "tfm/train/options.h"
#include "tfm/train/trainer.h"

namespace {

using namespace tfm;
namespace fs = std::filesystem;
using json = nlohmann::json;
using tfm::testing::slurp;
using tfm::testing::spit;

const std::string kPython = "/usr/bin/python3";
bool have_torch() {
  static const bool ok = tfm::testing::run_command(kPython + " -c 'import torch'") == 0;
  return ok;
}
std::string tool(const std::string& name) { return std::string(TFM_SOURCE_DIR) + "/tools/" + name; }

// ---- a tiny GPT-2 folder, written here ----

struct Tiny {
  int64_t layers = 1, heads = 2, d = 8, positions = 16, vocab = 257;
  bool prefixed = false, bias = true;
};

// The 256 byte symbols (GPT-2's table) and <|endoftext|>; no merges.
void write_byte_tokenizer(const std::string& dir) {
  json v = json::object();
  for (int b = 0; b < 256; ++b) v[data::ByteLevelBpe::byte_symbol(static_cast<uint8_t>(b))] = b;
  v["<|endoftext|>"] = 256;
  spit(dir + "/vocab.json", v.dump());
  spit(dir + "/merges.txt", "#version: 0.2\n");
}

json tiny_config(const Tiny& t) {
  json c = {{"n_embd", t.d},         {"n_head", t.heads},       {"n_layer", t.layers},
            {"n_positions", t.positions}, {"vocab_size", t.vocab}, {"layer_norm_epsilon", 1e-5},
            {"activation_function", "gelu_new"}, {"resid_pdrop", 0.0}, {"model_type", "gpt2"}};
  if (!t.bias) c["bias"] = false;
  return c;
}

// Uniform draws in ±scale for every tensor, 1 ± scale for the norm gains (every value is checked).
NamedTensors tiny_tensors(const Tiny& t, uint64_t seed, float scale = 0.5f) {
  const std::string p = t.prefixed ? "transformer." : "";
  NamedTensors s;
  uint64_t k = seed;
  const auto rnd = [&](const Shape& shape) { return tfm::testing::random_tensor(shape, k++, -scale, scale); };
  const auto gain = [&](const Shape& shape) { return tfm::testing::random_tensor(shape, k++, 1 - scale, 1 + scale); };
  s.insert(p + "wte.weight", rnd({t.vocab, t.d}));
  s.insert(p + "wpe.weight", rnd({t.positions, t.d}));
  for (int64_t n = 0; n < t.layers; ++n) {
    const std::string h = p + "h." + std::to_string(n) + ".";
    for (const char* ln : {"ln_1", "ln_2"}) {
      s.insert(h + ln + ".weight", gain({t.d}));
      if (t.bias) s.insert(h + ln + ".bias", rnd({t.d}));
    }
    const std::pair<const char*, Shape> convs[] = {{"attn.c_attn", {t.d, 3 * t.d}}, {"attn.c_proj", {t.d, t.d}},
                                                   {"mlp.c_fc", {t.d, 4 * t.d}}, {"mlp.c_proj", {4 * t.d, t.d}}};
    for (const auto& [name, shape] : convs) {
      s.insert(h + name + ".weight", rnd(shape));
      if (t.bias) s.insert(h + name + ".bias", rnd({shape[1]}));
    }
  }
  s.insert(p + "ln_f.weight", gain({t.d}));
  if (t.bias) s.insert(p + "ln_f.bias", rnd({t.d}));
  return s;
}

std::string write_tiny(const Tiny& t, uint64_t seed = 1, float scale = 0.5f) {
  const std::string dir = tfm::testing::temp_dir("gpt2_hf");
  write_byte_tokenizer(dir);
  spit(dir + "/config.json", tiny_config(t).dump(2));
  io::save_safetensors(dir + "/model.safetensors", tiny_tensors(t, seed, scale), {{"format", "pt"}});
  return dir;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// `tensors` as a safetensors file whose tensor `name` is stored as dtype_of(name): "F32", "F64" or "I64"
// (io::save_safetensors writes F32 and BOOL only).
void save_with_dtypes(const std::string& path, const NamedTensors& tensors,
                      const std::function<std::string(const std::string&)>& dtype_of) {
  json header = json::object();
  std::string data;
  for (const auto& [name, t] : tensors) {
    const std::string dtype = dtype_of(name);
    const size_t begin = data.size();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float x = t.data()[i];
      const double d = x;
      const auto v = static_cast<int64_t>(x);
      if (dtype == "F32")
        data.append(reinterpret_cast<const char*>(&x), 4);
      else if (dtype == "F64")
        data.append(reinterpret_cast<const char*>(&d), 8);
      else
        data.append(reinterpret_cast<const char*>(&v), 8);
    }
    header[name] = {{"dtype", dtype}, {"shape", t.shape()}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  h.resize((h.size() + 7) / 8 * 8, ' ');
  const uint64_t n = h.size();
  spit(path, std::string(reinterpret_cast<const char*>(&n), 8) + h + data);
}

// ---- torch-free ----

// Every tensor maps to its tfm key (Conv1D weights transposed), the config is GPT-2's, and the
// directory exports back to the same bytes; a prefixed checkpoint with lm_head and the mask buffers too.
TEST(Gpt2, TinyImportMapsEveryTensorAndExportsBitForBit) {
  for (bool prefixed : {false, true}) {
    Tiny t;
    t.prefixed = prefixed;
    t.layers = 2;
    const std::string hf = write_tiny(t);
    if (prefixed) {  // GPT2LMHeadModel's layout: lm_head.weight (tied) and the older mask buffers
      NamedTensors s = tiny_tensors(t, 1);
      s.insert("lm_head.weight", s.at("transformer.wte.weight").clone());
      for (int n = 0; n < 2; ++n) {
        std::vector<uint8_t> tri(16 * 16);
        for (int i = 0; i < 16; ++i)
          for (int j = 0; j < 16; ++j) tri[i * 16 + j] = j <= i;
        s.insert("transformer.h." + std::to_string(n) + ".attn.bias", Tensor::from_bool({1, 1, 16, 16}, tri));
        s.insert("transformer.h." + std::to_string(n) + ".attn.masked_bias", Tensor::full({}, -1e4f));
      }
      io::save_safetensors(hf + "/model.safetensors", s, {{"format", "pt"}});
    }
    const std::string out = tfm::testing::temp_dir("gpt2_tfm") + "/m";
    const Gpt2ImportReport r = import_gpt2(hf, out);
    EXPECT_EQ(r.prefixed, prefixed);
    EXPECT_TRUE(r.tied);
    EXPECT_EQ(r.tensors_ignored, prefixed ? 4 : 0);
    const TrainedModel m = load_model_dir(out);
    const ModelConfig& c = m.model->config();
    EXPECT_EQ(c.arch, Arch::DECODER);
    EXPECT_EQ(c.activation, Activation::GELU_TANH);
    EXPECT_EQ(c.norm_first, true);
    EXPECT_EQ(c.positional, Positional::LEARNED);
    EXPECT_EQ(c.max_len, 16);
    EXPECT_EQ(c.pad_id, -1);
    EXPECT_EQ(c.bos_id, 256);
    EXPECT_EQ(c.eos_id, 256);
    EXPECT_TRUE(m.tgt_tokenizer.is_bpe());
    EXPECT_EQ(m.tgt_vocab.pad_id(), -1);
    EXPECT_EQ(m.tgt_vocab.unk_id(), -1);
    const io::SafeTensorsFile src = io::load_safetensors(hf + "/model.safetensors");
    const std::string p = prefixed ? "transformer." : "";
    const NamedTensors st = m.model->state_dict();
    EXPECT_EQ(tfm::testing::rel_error(st.at("embedding.weight"), src.at(p + "wte.weight")), 0.0);
    const Tensor& w = st.at("decoder.layers.1.self_attn.in_proj_weight");  // (3D, D) = c_attn.weight (D, 3D)ᵀ
    const Tensor& cw = src.at(p + "h.1.attn.c_attn.weight");
    ASSERT_EQ(w.shape(), (Shape{24, 8}));
    for (int64_t i = 0; i < 24; ++i)
      for (int64_t j = 0; j < 8; ++j) ASSERT_EQ(w.data()[i * 8 + j], cw.data()[j * 24 + i]);
    EXPECT_EQ(tfm::testing::rel_error(st.at("decoder.norm.bias"), src.at(p + "ln_f.bias")), 0.0);

    const std::string back = tfm::testing::temp_dir("gpt2_back") + "/hf";
    export_gpt2(out, back);
    for (const char* f : {"model.safetensors", "config.json", "vocab.json", "merges.txt"})
      EXPECT_EQ(slurp(back + "/" + f), slurp(hf + "/" + f)) << f << (prefixed ? " (prefixed)" : "");
    // An existing output is refused and left alone; --force replaces it.
    EXPECT_NE(error_of([&] { export_gpt2(out, back); }).find("exists"), std::string::npos);
    EXPECT_NO_THROW(export_gpt2(out, back, /*force=*/true));
    EXPECT_NE(error_of([&] { import_gpt2(hf, out); }).find("exists"), std::string::npos);
    // A quantized directory (inference only) is not exported: its weights would go out dequantized.
    if (!prefixed) {
      quantize_model_dir(out, out + "8");
      EXPECT_EQ(error_of([&] { export_gpt2(out + "8", back + "8"); }),
                out +
                    "8 is an int8-quantized model directory (tfm quantize), for inference only; export the float32 "
                    "directory it was made from");
      EXPECT_FALSE(fs::exists(back + "8"));
    }
  }
}

// A directory tfm wrote itself (no gpt2_source.json) exports in the hub's layout: unprefixed keys, F32,
// no buffers, and imports back to the same weights.
TEST(Gpt2, ExportOfATfmDirectoryUsesTheHubLayout) {
  Tiny t;
  t.bias = false;  // nanoGPT's bias=False
  const std::string hf = write_tiny(t, 5);
  const std::string dir = tfm::testing::temp_dir("gpt2_hub");
  // A killed import's and a killed export's staging directories (no writer holds their flock) are removed by
  // the next run into the same output.
  for (const char* killed : {"/.m.tmp.999999", "/.hf.tmp.999999"}) {
    fs::create_directories(dir + killed);
    std::ofstream(dir + killed + "/model.safetensors") << "partial";
  }
  import_gpt2(hf, dir + "/m");
  EXPECT_FALSE(fs::exists(dir + "/.m.tmp.999999"));
  fs::remove(dir + "/m/gpt2_source.json");
  export_gpt2(dir + "/m", dir + "/hf");
  EXPECT_FALSE(fs::exists(dir + "/.hf.tmp.999999"));
  const io::SafeTensorsFile f = io::load_safetensors(dir + "/hf/model.safetensors");
  EXPECT_TRUE(f.contains("wte.weight"));
  EXPECT_FALSE(f.contains("h.0.ln_1.bias"));
  EXPECT_FALSE(f.contains("lm_head.weight"));
  EXPECT_EQ(f.metadata.at("format"), "pt");
  const json c = json::parse(slurp(dir + "/hf/config.json"));
  EXPECT_EQ(c.at("n_embd"), 8);
  EXPECT_EQ(c.at("bias"), false);
  EXPECT_EQ(c.at("activation_function"), "gelu_new");
  import_gpt2(dir + "/hf", dir + "/m2");
  const TrainedModel a = load_model_dir(dir + "/m"), b = load_model_dir(dir + "/m2");
  for (const auto& [k, v] : a.model->state_dict()) EXPECT_EQ(tfm::testing::rel_error(v, b.model->state_dict().at(k)), 0.0) << k;
}

// Bad input: one line naming the file and what is wrong, and no output directory.
TEST(Gpt2, BadInputIsRefusedByNameAndWritesNothing) {
  const auto expect_refused = [](const std::function<void(const std::string&)>& spoil, const std::string& file,
                                 const std::string& what) {
    const std::string hf = write_tiny(Tiny{});
    spoil(hf);
    const std::string out = tfm::testing::temp_dir("gpt2_bad") + "/m";
    const std::string e = error_of([&] { import_gpt2(hf, out); });
    EXPECT_NE(e.find(file), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_FALSE(fs::exists(out)) << e;
    EXPECT_TRUE(fs::is_empty(fs::path(out).parent_path())) << e;  // no staging directory left
  };
  const auto config = [](const std::function<void(json&)>& edit) {
    return [edit](const std::string& hf) {
      json c = json::parse(slurp(hf + "/config.json"));
      edit(c);
      spit(hf + "/config.json", c.dump());
    };
  };
  expect_refused(config([](json& c) { c.erase("n_layer"); }), "config.json", "missing \"n_layer\"");
  expect_refused(config([](json& c) { c["n_head"] = "2"; }), "config.json", "\"n_head\" must be a positive integer");
  expect_refused(config([](json& c) { c["n_head"] = 3; }), "config.json", "not divisible by n_head 3");
  expect_refused(config([](json& c) { c["activation_function"] = "swish"; }), "config.json", "unsupported activation_function");
  expect_refused(config([](json& c) { c["vocab_size"] = 300; }), "model.safetensors", "vocab_size 300");
  expect_refused([](const std::string& hf) { spit(hf + "/config.json", "{\"n_embd\": 8,"); }, "config.json", "not valid JSON");
  expect_refused([](const std::string& hf) { spit(hf + "/vocab.json", "[\"a\"]"); }, "vocab.json", "JSON object");
  expect_refused([](const std::string& hf) { spit(hf + "/merges.txt", "#version: 0.2\nĠ\n"); }, "merges.txt:2", "two symbols");
  expect_refused([](const std::string& hf) { spit(hf + "/merges.txt", "#version: 0.2\nĠ t\n"); }, "merges.txt:2", "which is not in");
  expect_refused([](const std::string& hf) { fs::remove(hf + "/merges.txt"); }, "no GPT-2 tokenizer files", "merges.txt");
  expect_refused(
      [](const std::string& hf) {
        NamedTensors s = tiny_tensors(Tiny{}, 1);
        s.insert("h.0.attn.rotary", Tensor::zeros({2}));
        io::save_safetensors(hf + "/model.safetensors", s);
      },
      "model.safetensors", "unexpected tensor 'h.0.attn.rotary'");
  expect_refused(
      [](const std::string& hf) {
        NamedTensors s;
        for (const auto& [k, v] : tiny_tensors(Tiny{}, 1))
          if (k != "h.0.mlp.c_fc.bias") s.insert(k, v);
        io::save_safetensors(hf + "/model.safetensors", s);
      },
      "model.safetensors", "missing tensor 'h.0.mlp.c_fc.bias'");
  expect_refused(
      [](const std::string& hf) {
        NamedTensors s;
        for (const auto& [k, v] : tiny_tensors(Tiny{}, 1))
          s.insert(k, k == "h.0.mlp.c_fc.weight" ? Tensor::zeros({8, 16}) : v);
        io::save_safetensors(hf + "/model.safetensors", s);
      },
      "model.safetensors", "tensor 'h.0.mlp.c_fc.weight' has shape (8, 16), expected (8, 32) (Conv1D: in × out)");
  expect_refused(
      [](const std::string& hf) {
        NamedTensors s = tiny_tensors(Tiny{}, 1);
        s.at("ln_f.weight").data()[3] = std::nanf("");
        io::save_safetensors(hf + "/model.safetensors", s);
      },
      "model.safetensors", "tensor 'ln_f.weight' holds NaN (element 3): not a model tfm can run");
  // Weights in a dtype other than F32, F16 or BF16 (export could not write them back as they were), a mask
  // buffer in one export cannot write (BOOL and U8 too): refused by tensor, whatever else holds.
  const auto with_dtypes = [](const std::function<std::string(const std::string&)>& dtype_of, bool head_and_buffer) {
    return [=](const std::string& hf) {
      NamedTensors s = tiny_tensors(Tiny{}, 1);
      if (head_and_buffer) {
        s.insert("lm_head.weight", s.at("wte.weight").clone());  // tied: wte's values
        s.insert("h.0.attn.masked_bias", Tensor::full({}, -1e4f));
      }
      save_with_dtypes(hf + "/model.safetensors", s, dtype_of);
    };
  };
  expect_refused(with_dtypes([](const std::string&) { return "F64"; }, false), "model.safetensors",
                 "tensor 'wte.weight' has dtype F64, expected F32, F16 or BF16");
  expect_refused(with_dtypes([](const std::string& k) { return k == "h.0.mlp.c_proj.bias" ? "I64" : "F32"; }, false),
                 "model.safetensors", "tensor 'h.0.mlp.c_proj.bias' has dtype I64, expected F32, F16 or BF16");
  expect_refused(with_dtypes([](const std::string& k) { return k == "lm_head.weight" ? "F64" : "F32"; }, true),
                 "model.safetensors", "tensor 'lm_head.weight' has dtype F64, expected F32, F16 or BF16");
  expect_refused(with_dtypes([](const std::string& k) { return k == "h.0.attn.masked_bias" ? "F64" : "F32"; }, true),
                 "model.safetensors",
                 "tensor 'h.0.attn.masked_bias' has dtype F64, expected F32, F16, BF16, BOOL or U8");
  // The same file in F32 is imported (the head tied, the buffer ignored).
  {
    const std::string hf = write_tiny(Tiny{});
    with_dtypes([](const std::string&) { return "F32"; }, true)(hf);
    const Gpt2ImportReport r = import_gpt2(hf, tfm::testing::temp_dir("gpt2_f32") + "/m");
    EXPECT_TRUE(r.tied);
    EXPECT_EQ(r.tensors_ignored, 1);
  }
}

// "tie_word_embeddings": false with an lm_head.weight equal to wte (a head untied to be fine-tuned apart):
// the head stays its own matrix, as in Hugging Face's model, and exports back as lm_head.weight.
TEST(Gpt2, AnUntiedHeadEqualToTheEmbeddingStaysItsOwnMatrix) {
  Tiny t;
  const std::string hf = write_tiny(t, 6);
  NamedTensors s = tiny_tensors(t, 6);
  s.insert("lm_head.weight", s.at("wte.weight").clone());
  io::save_safetensors(hf + "/model.safetensors", s, {{"format", "pt"}});
  json c = tiny_config(t);
  c["tie_word_embeddings"] = false;
  spit(hf + "/config.json", c.dump(2));
  const std::string root = tfm::testing::temp_dir("gpt2_untied");
  const Gpt2ImportReport r = import_gpt2(hf, root + "/m");
  EXPECT_FALSE(r.tied);
  EXPECT_EQ(r.tensors_mapped, static_cast<int64_t>(s.size()));
  const TrainedModel m = load_model_dir(root + "/m");
  EXPECT_FALSE(m.model->config().ties_embeddings());
  const NamedTensors params = m.model->named_parameters();
  ASSERT_TRUE(params.contains("generator.weight"));
  EXPECT_NE(params.at("generator.weight").data(), params.at("embedding.weight").data());
  EXPECT_EQ(tfm::testing::rel_error(params.at("generator.weight"), s.at("lm_head.weight")), 0.0);
  export_gpt2(root + "/m", root + "/back");
  for (const char* f : {"model.safetensors", "config.json"})
    EXPECT_EQ(slurp(root + "/back/" + f), slurp(hf + "/" + f)) << f;
  // In the hub's layout too (a directory tfm trained): lm_head.weight and tie_word_embeddings false.
  fs::remove(root + "/m/gpt2_source.json");
  export_gpt2(root + "/m", root + "/hub");
  EXPECT_TRUE(io::load_safetensors(root + "/hub/model.safetensors").contains("lm_head.weight"));
  EXPECT_EQ(json::parse(slurp(root + "/hub/config.json")).at("tie_word_embeddings"), false);
  // Without the key (GPT-2's default, tied) the same head is wte's.
  c.erase("tie_word_embeddings");
  spit(hf + "/config.json", c.dump(2));
  EXPECT_TRUE(import_gpt2(hf, root + "/tied").tied);
  EXPECT_FALSE(load_model_dir(root + "/tied").model->named_parameters().contains("generator.weight"));
}

// A padded vocabulary (nanoGPT's 50304 for 50257 tokens): the extra rows are tokens never generated.
TEST(Gpt2, PaddedVocabularyRowsAreNeverGenerated) {
  Tiny t;
  t.vocab = 264;
  const std::string hf = write_tiny(t, 9);
  const std::string out = tfm::testing::temp_dir("gpt2_pad") + "/m";
  const Gpt2ImportReport r = import_gpt2(hf, out);
  EXPECT_EQ(r.vocab_size, 264);
  EXPECT_EQ(r.tokenizer_size, 257);
  const TrainedModel m = load_model_dir(out);
  EXPECT_EQ(m.tgt_vocab.size(), 264);
  EXPECT_EQ(m.tgt_vocab.token(260), "<|padded_260|>");
  const std::vector<int32_t> never = never_generated(m);
  EXPECT_EQ(never, (std::vector<int32_t>{257, 258, 259, 260, 261, 262, 263}));  // bos = eos is generated
  GenerateOptions o;
  o.max_new_tokens = 200;
  o.suppress = never;
  o.ignore_eos = true;
  o.sampling.temperature = 5;  // near-uniform draws: without suppression a padded row would come
  for (const auto& s : generate(*m.model, {72, 105}, o))
    for (int32_t id : s) ASSERT_LT(id, 257);
  EXPECT_EQ(data::decode_text(m.tgt_vocab, m.tgt_tokenizer, {72, 105, 256, 262}), "Hi");
}

// ---- against the PyTorch twin ----

// (tfm key, Hugging Face key, transposed): the mapping tfm/models/gpt2.h states, written out here.
std::vector<std::tuple<std::string, std::string, bool>> hf_names(int layers) {
  std::vector<std::tuple<std::string, std::string, bool>> m = {
      {"embedding.weight", "wte.weight", false}, {"pos_embedding.weight", "wpe.weight", false},
      {"decoder.norm.weight", "ln_f.weight", false}, {"decoder.norm.bias", "ln_f.bias", false}};
  for (int n = 0; n < layers; ++n) {
    const std::string d = "decoder.layers." + std::to_string(n) + ".", h = "h." + std::to_string(n) + ".";
    for (const auto& [a, b, tr] : std::vector<std::tuple<std::string, std::string, bool>>{
             {"norm1.weight", "ln_1.weight", false}, {"norm1.bias", "ln_1.bias", false},
             {"self_attn.in_proj_weight", "attn.c_attn.weight", true}, {"self_attn.in_proj_bias", "attn.c_attn.bias", false},
             {"self_attn.out_proj.weight", "attn.c_proj.weight", true}, {"self_attn.out_proj.bias", "attn.c_proj.bias", false},
             {"norm2.weight", "ln_2.weight", false}, {"norm2.bias", "ln_2.bias", false},
             {"linear1.weight", "mlp.c_fc.weight", true}, {"linear1.bias", "mlp.c_fc.bias", false},
             {"linear2.weight", "mlp.c_proj.weight", true}, {"linear2.bias", "mlp.c_proj.bias", false}})
      m.emplace_back(d + a, h + b, tr);
  }
  return m;
}

Tensor transpose2(const Tensor& t) {
  Tensor o = Tensor::empty({t.size(1), t.size(0)});
  for (int64_t i = 0; i < t.size(0); ++i)
    for (int64_t j = 0; j < t.size(1); ++j) o.data()[j * t.size(0) + i] = t.data()[i * t.size(1) + j];
  return o;
}

// A random GPT-2 (2 layers, 4 heads, d 64, vocabulary 50257) in both key layouts → imported → its logits,
// loss and every gradient against the twin in float64 on the source folder (parity rule: max(2e-5,
// 20 × PyTorch float32's own error)); check_roundtrip.py on the exported folder; the export is the source.
TEST(Gpt2, ImportMatchesTorchTwinAndExportRoundTrips) {
  if (!have_torch()) GTEST_SKIP() << "torch not importable by " << kPython;
  for (bool prefixed : {false, true}) {
    const std::string root = tfm::testing::temp_dir("gpt2_twin"), hf = root + "/hf";
    std::string out;
    ASSERT_EQ(tfm::testing::run_command(kPython + " " + tool("torch_models.py") + " gpt2-make " + hf +
                                            " --layers 2 --heads 4 --d 64 --vocab 50257 --positions 64 --seed 3" +
                                            (prefixed ? " --prefixed" : ""),
                                        &out),
              0)
        << out;
    import_gpt2(hf, root + "/m");
    TrainedModel m = load_model_dir(root + "/m");
    m.model->train();  // dropout 0 (resid_pdrop 0): training mode computes the same, with a tape
    const int64_t B = 2, T = 24;
    data::TokenBatch b;
    b.B = B, b.S = b.T = T;
    Generator g{11, 0};
    for (int64_t i = 0; i < B * (T + 1); ++i) b.src.push_back(static_cast<int32_t>(g.uniform() * 50257) % 50257);
    std::vector<int32_t> window = b.src;
    b.src.clear();
    for (int64_t r = 0; r < B; ++r)
      for (int64_t t = 0; t < T; ++t) {
        b.src.push_back(window[r * (T + 1) + t]);
        b.tgt_out.push_back(window[r * (T + 1) + t + 1]);
      }
    const auto ids = [&](const std::vector<int32_t>& v) {
      return Tensor::from_vector({1, B, T}, std::vector<float>(v.begin(), v.end()));
    };
    io::save_safetensors(hf + "/batches.safetensors", {{"src", ids(b.src)}, {"tgt_out", ids(b.tgt_out)}});
    ASSERT_EQ(tfm::testing::run_command(kPython + " " + tool("torch_models.py") + " gpt2-grads " + hf, &out), 0) << out;
    const io::SafeTensorsFile ref = io::load_safetensors(hf + "/torch_grads.safetensors");
    const json err32 = json::parse(ref.metadata.at("f32_err"));
    const auto bound = [&](const std::string& k) { return std::max(2e-5, 20 * err32.at(k).get<double>()); };

    const Tensor logits = m.model->forward(b);  // (B, T, V)
    EXPECT_LE(tfm::testing::rel_error(logits.reshape({B, T, 50257}), ref.at("logits")), bound("logits"));
    Tensor loss = m.model->loss(b);
    const double loss64 = std::stod(ref.metadata.at("loss"));
    EXPECT_NEAR(loss.item(), loss64, 2e-5 * loss64);
    loss.backward();
    const NamedTensors params = m.model->named_parameters();
    const auto names = hf_names(2);
    EXPECT_EQ(params.size(), names.size());
    for (const auto& [k, h, tr] : names) {
      const Tensor& p = params.at(k);
      ASSERT_TRUE(p.grad().defined()) << k;
      const Tensor mine = tr ? transpose2(p.grad()) : p.grad();
      EXPECT_LE(tfm::testing::rel_error(mine, ref.at(h)), bound(h)) << k << " vs " << h;
    }

    // The exported folder is the source, and check_roundtrip.py runs the twin on it against tfm's logits.
    export_gpt2(root + "/m", root + "/back");
    for (const char* f : {"model.safetensors", "config.json", "vocab.json", "merges.txt"})
      EXPECT_EQ(slurp(root + "/back/" + f), slurp(hf + "/" + f)) << f;
    io::save_safetensors(root + "/inputs.safetensors",
                         {{"src", Tensor::from_vector({B, T}, std::vector<float>(b.src.begin(), b.src.end()))},
                          {"logits", logits}});
    ASSERT_EQ(tfm::testing::run_command(kPython + " " + tool("check_roundtrip.py") + " " + root + "/back " + root +
                                            "/inputs.safetensors",
                                        &out),
              0)
        << out;
    EXPECT_NE(out.find("\"twin\": \"gpt2\""), std::string::npos) << out;
    fs::remove_all(root);
  }
}

// Cached generation (the prompt prefilled in one pass, then one token a step, the window sliding past
// n_positions) gives the same tokens as the prompt fed one position per call, and as the full forward
// of the window at every step.
TEST(Gpt2, CachedGenerationEqualsFullForward) {
  Tiny t;
  t.layers = 2, t.d = 16, t.positions = 24;
  const std::string hf = write_tiny(t, 21);
  const std::string out = tfm::testing::temp_dir("gpt2_gen") + "/m";
  import_gpt2(hf, out);
  const TrainedModel m = load_model_dir(out);
  const std::vector<int32_t> prompt = data::encode_text(m.tgt_vocab, m.tgt_tokenizer, "Once upon a time");
  GenerateOptions o;
  o.max_new_tokens = 40;  // 16 + 40 tokens: the 24-token window slides twice
  o.sampling.temperature = 0;
  o.ignore_eos = true;
  o.suppress = never_generated(m);
  std::vector<std::vector<float>> cached, full;
  o.on_logits = [&](int64_t, const float* l, int64_t V) { cached.emplace_back(l, l + V); };
  const auto a = generate(*m.model, prompt, o);
  o.prefill = false;  // the prompt one position per call: the same tokens
  o.on_logits = {};
  EXPECT_EQ(generate(*m.model, prompt, o), a);
  o.use_cache = false;
  o.on_logits = [&](int64_t, const float* l, int64_t V) { full.emplace_back(l, l + V); };
  const auto b = generate(*m.model, prompt, o);
  EXPECT_EQ(a, b);
  ASSERT_EQ(cached.size(), full.size());
  for (size_t i = 0; i < cached.size(); ++i)
    EXPECT_LE(tfm::testing::rel_error(cached[i].data(), full[i].data(), 257), 1e-5) << "step " << i;
}

// Generation ends at GPT-2's <|endoftext|> (bos = eos) unless ignore_eos; pad and unk do not exist.
TEST(Gpt2, GenerationStopsAtEndOfText) {
  Tiny t;
  const std::string hf = write_tiny(t, 4);
  NamedTensors s = tiny_tensors(t, 4);
  // A model that always predicts <|endoftext|>: ln_f outputs its bias, all ones, so logit v is the sum
  // of wte's row v (|·| ≤ 4 for the random rows), and row 256 holds 50s.
  Tensor wte = s.at("wte.weight").clone();
  for (int j = 0; j < 8; ++j) wte.data()[256 * 8 + j] = 50.0f;
  NamedTensors s2;
  for (const auto& [k, v] : s)
    s2.insert(k, k == "wte.weight" ? wte : k == "ln_f.weight" ? Tensor::zeros({8}) : k == "ln_f.bias" ? Tensor::full({8}, 1.0f) : v);
  io::save_safetensors(hf + "/model.safetensors", s2);
  const std::string out = tfm::testing::temp_dir("gpt2_eos") + "/m";
  import_gpt2(hf, out);
  const TrainedModel m = load_model_dir(out);
  GenerateOptions o;
  o.max_new_tokens = 5;
  o.sampling.temperature = 0;
  o.suppress = never_generated(m);
  EXPECT_TRUE(o.suppress.empty());  // bos = eos, no pad, no unk
  const auto stop = generate(*m.model, {256}, o);
  o.ignore_eos = true;
  const auto go_on = generate(*m.model, {256}, o);
  ASSERT_EQ(stop[0].size(), 1u);
  EXPECT_EQ(stop[0][0], 256);
  EXPECT_EQ(go_on[0].size(), 5u);
}

// Fine-tuning an imported GPT-2 (tfm train --init-from): 20 steps on new text, the validation loss
// falls; the run's directory is again a gpt2-bpe model that exports.
TEST(Gpt2, InitFromTrainsAndTheLossFalls) {
  Tiny t;
  t.layers = 2, t.d = 32, t.heads = 4, t.positions = 32;
  const std::string hf = write_tiny(t, 13, /*scale=*/0.05f);  // a trainable start: small weights
  const std::string root = tfm::testing::temp_dir("gpt2_ft");
  import_gpt2(hf, root + "/m");
  std::string text;
  for (int i = 0; i < 60; ++i) text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 7) + "\n";
  spit(root + "/t.txt", text);
  // What `tfm train --init-from ...` runs.
  const train::TrainSetup setup = train::resolve_train_options(train::parse_train_args(
      {"--init-from", root + "/m", "--text", root + "/t.txt", "--out", root + "/ft", "--max-steps", "20", "--eval-every",
       "10", "--block-size", "32", "--batch-size", "8", "--lr", "3e-3", "--warmup", "0", "--dropout", "0", "--seed", "1"}));
  const train::TrainConfig& c = setup.config;
  const train::TrainResult r = train::run_training(c);
  ASSERT_GE(r.history.size(), 3u);
  EXPECT_EQ(r.history.front().step, 0);
  EXPECT_LT(r.history.back().valid_loss, 0.9 * r.history.front().valid_loss);
  const TrainedModel ft = load_model_dir(root + "/ft");
  EXPECT_TRUE(ft.tgt_tokenizer.is_bpe());
  EXPECT_NO_THROW(export_gpt2(root + "/ft", root + "/ft_hf"));
}

// Training a new language model on GPT-2's tokenizer (--tokens gpt2-bpe --bpe-vocab --bpe-merges): the
// text is the BPE's ids, the directory keeps the two files byte for byte, and resuming reads them back.
TEST(Gpt2, TrainsFromScratchWithGpt2Bpe) {
  const std::string root = tfm::testing::temp_dir("gpt2_bpe_train");
  write_byte_tokenizer(root);
  spit(root + "/merges.txt", "#version: 0.2\nt h\n");  // one merge: "th"
  json v = json::parse(slurp(root + "/vocab.json"));
  v["th"] = 257;
  spit(root + "/vocab.json", v.dump());
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the thin thread " + std::to_string(i) + "\n";
  spit(root + "/t.txt", text);
  const std::vector<std::string> args = {"--text", root + "/t.txt", "--tokens", "gpt2-bpe", "--bpe-vocab",
                                         root + "/vocab.json", "--bpe-merges", root + "/merges.txt", "--out",
                                         root + "/lm", "--max-steps", "4", "--block-size", "16", "--batch-size", "4",
                                         "--d-model", "16", "--nhead", "2", "--layers", "1", "--dim-feedforward", "32"};
  const train::TrainSetup setup = train::resolve_train_options(train::parse_train_args(args));
  train::run_training(setup.config);
  EXPECT_EQ(slurp(root + "/lm/bpe_vocab.json"), slurp(root + "/vocab.json"));
  EXPECT_EQ(slurp(root + "/lm/bpe_merges.txt"), slurp(root + "/merges.txt"));
  const TrainedModel m = load_model_dir(root + "/lm");
  EXPECT_TRUE(m.tgt_tokenizer.is_bpe());
  EXPECT_EQ(m.model->config().tgt_vocab_size, 258);
  EXPECT_EQ(m.model->config().pad_id, -1);
  EXPECT_EQ(data::encode_text(m.tgt_vocab, m.tgt_tokenizer, "the"), (std::vector<int32_t>{257, 'e'}));
  // A TSV run cannot take gpt2-bpe: it pads, and GPT-2's vocabulary has no <pad>.
  const std::string e = error_of([&] {
    train::resolve_train_options(train::parse_train_args(
        {"--train", root + "/t.txt", "--valid", root + "/t.txt", "--tokens", "gpt2-bpe", "--bpe-vocab", root + "/vocab.json",
         "--bpe-merges", root + "/merges.txt", "--out", root + "/s2s"})).config.validate();
  });
  EXPECT_NE(e.find("no <pad>"), std::string::npos) << e;
  // A gpt2-bpe run needs both files.
  EXPECT_NE(error_of([&] {
              std::vector<std::string> a(args.begin(), args.begin() + 6);
              a.insert(a.end(), {"--out", root + "/x"});
              train::resolve_train_options(train::parse_train_args(a)).config.validate();
            }).find("bpe_vocab/bpe_merges"),
            std::string::npos);
}

}  // namespace
