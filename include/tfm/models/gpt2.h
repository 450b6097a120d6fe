// tfm/models/gpt2.h — GPT-2 checkpoints in Hugging Face's layout, to and from tfm model directories.
//
// A Hugging Face GPT-2 directory (HF_DIR):
//   config.json        n_embd, n_head, n_layer, n_positions, vocab_size (integers, required);
//                      layer_norm_epsilon (1e-5), activation_function ("gelu_new", tfm's gelu_tanh;
//                      or "gelu"), n_inner (null: 4·n_embd), resid_pdrop (0.1: the dropout of a
//                      fine-tuning run), tie_word_embeddings (true), and "bias" (true; false as a
//                      nanoGPT model without biases, which tools/convert_gpt2.py writes). A setting tfm
//                      does not compute (scale_attn_weights false, scale_attn_by_inverse_layer_idx,
//                      reorder_and_upcast_attn) is refused by name.
//   model.safetensors  with or without the prefix "transformer." on every key but lm_head.weight:
//                        wte.weight (V, D), wpe.weight (n_positions, D),
//                        h.N.ln_1.{weight,bias}, h.N.attn.c_attn.{weight (D, 3D), bias (3D)},
//                        h.N.attn.c_proj.{weight (D, D), bias}, h.N.ln_2.*,
//                        h.N.mlp.c_fc.{weight (D, F), bias (F)}, h.N.mlp.c_proj.{weight (F, D), bias},
//                        ln_f.{weight,bias}, and lm_head.weight (V, D) when present;
//                      h.N.attn.bias / h.N.attn.masked_bias (the causal-mask buffers) are ignored.
//                      Any other key is an error. Weights must be F32, F16 or BF16 (held as float32,
//                      exactly; export writes them back in their dtype), the buffers F32, F16, BF16,
//                      BOOL or U8: another dtype (F64, an integer) is refused by tensor.
//   the tokenizer      vocab.json + merges.txt, or OpenAI's encoder.json + vocab.bpe.
//
// Mapping onto tfm's language model (arch decoder, tfm/models/config.h): GPT-2's Conv1D stores a
// layer y = x·W + b with W (in, out), so every c_attn / c_proj / c_fc weight is the transpose of the
// nn.Linear weight tfm holds:
//   wte → embedding.weight            wpe → pos_embedding.weight
//   h.N.ln_1 → decoder.layers.N.norm1  h.N.attn.c_attn → .self_attn.in_proj_{weight (3D, D),bias}
//   h.N.attn.c_proj → .self_attn.out_proj   h.N.ln_2 → .norm2
//   h.N.mlp.c_fc → .linear1            h.N.mlp.c_proj → .linear2        ln_f → decoder.norm
//   lm_head.weight: follows config.json's tie_word_embeddings, as Hugging Face's GPT2LMHeadModel does.
//     true (or absent) → tied (no generator.weight): lm_head.weight absent or equal to wte (else an error);
//     false → generator.weight: lm_head.weight required, kept as its own matrix even when equal to wte.
// The model config: pre-norm, learned positions, no embedding scaling, max_len n_positions, the
// vocabulary's "<|endoftext|>" as bos and eos and no pad (tfm/data/vocab.h). A vocabulary_size above
// the tokenizer's (nanoGPT pads 50257 to 50304) keeps the extra rows as tokens spelled
// "<|padded_N|>" that generation never draws (never_generated, tfm/models/model_dir.h).
//
// The model directory (tfm/models/model_dir.h) gets config.json, model.safetensors, the vocabulary
// files, the BPE's two files as bpe_vocab.json / bpe_merges.txt (byte for byte), and
// gpt2_source.json: the source's config.json text, its safetensors header text, and its tokenizer
// file names, so that export_gpt2 of an unchanged import writes the source back bit for bit.
// A directory without gpt2_source.json (a model trained or fine-tuned by tfm) exports in the hub's
// layout: keys without prefix, no buffers, F32, a config.json of the fields above, vocab.json +
// merges.txt.
//
// Both write their output directory whole or not at all: into a temporary sibling directory, then
// renamed; an existing output is refused unless `force` (then replaced only once the new one is
// complete). Errors are one line naming the file: std::invalid_argument for content (a missing or
// non-integer field, n_embd not divisible by n_head, an unsupported activation, a missing, unexpected,
// misshapen or wrongly typed tensor, a vocab_size that disagrees with wte or the tokenizer),
// std::runtime_error for files that cannot be read or written.
#pragma once

#include <cstdint>
#include <string>

namespace tfm {

struct Gpt2ImportReport {
  int64_t vocab_size = 0, tokenizer_size = 0;  // model rows, BPE tokens (equal unless padded)
  int64_t tensors_mapped = 0, tensors_ignored = 0;
  bool prefixed = false, tied = true;
};

// HF_DIR → a tfm model directory at `out_dir`.
Gpt2ImportReport import_gpt2(const std::string& hf_dir, const std::string& out_dir, bool force = false);

// A tfm language model directory whose model is GPT-2's shape and tokenizer gpt2-bpe → HF_DIR.
void export_gpt2(const std::string& model_dir, const std::string& hf_dir, bool force = false);

}  // namespace tfm
