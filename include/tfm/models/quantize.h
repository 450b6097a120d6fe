// tfm/models/quantize.h — int8-quantized model directories (`tfm quantize`; docs/int8.md).
//
// A quantized directory is a model directory (tfm/models/model_dir.h) whose model.safetensors holds
// every matrix of the state_dict (rank 2: the Linear weights, attention's in_proj_weight, the
// embeddings, the output head) as I8 with its per-row float32 scales under "<key>.scale" (shape
// (rows,)), and everything else (biases, norms) as F32; its metadata says {"tfm.quantization":
// "int8-per-row"}. Row n holds round(W[n, :] / scale[n]) with scale[n] = max|W[n, :]| / 127, the
// same rule Precision::INT8 applies when it packs a float32 weight (kernels::quantize_rows_s8); the
// stored scales are that rule's fixed point, so packing the dequantized weight q·scale again gives
// back exactly the stored integers and scales: a quantized directory run in int8 computes with the
// integers it stores. config.json, the vocabularies and the tokenizers (SentencePiece models, GPT-2's
// BPE files) are copied as they are; the
// training run's files (trainer_state.safetensors, metrics.csv, curves.svg) are not.
//
// load_model_dir reads such a directory (TrainedModel::quantized), dequantizing the weights into
// the float32 model (the one the other precisions run), or for a model that only runs
// (WeightsLoad::MAP_READ_ONLY) into lazy matrices whose values are computed only if read; front ends
// run it in int8 unless told otherwise. Training from it (--init-from, --resume) and tools/import_torch.py reverse
// refuse it.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "tfm/io/safetensors.h"
#include "tfm/named_tensors.h"

namespace tfm {

inline constexpr const char* QUANTIZATION_METADATA_KEY = "tfm.quantization";
inline constexpr const char* QUANTIZATION_INT8 = "int8-per-row";

// A state_dict split for writing: the F32 tensors (including the scales) and the I8 matrices.
struct QuantizedStateDict {
  NamedTensors f32;
  std::map<std::string, io::Int8Tensor> int8;
};
// Quantizes every rank-2 tensor of `state` (above); the others are kept as they are.
QuantizedStateDict quantize_state_dict(const NamedTensors& state);

// True when the file's metadata marks it as a quantized state_dict.
bool is_quantized(const io::SafeTensorsFile& file);
// The float32 state_dict of a quantized file read with LoadOptions::keep_int8: each I8 key k
// becomes k's float32 matrix q·scale. Throws io::SafeTensorsError naming the file and the key for
// an I8 tensor that is not a matrix, a missing "<k>.scale", a scale that is not F32 of shape
// (rows,) or not finite and ≥ 0, and a "<k>.scale" without its I8 matrix.
// With `into` (a model's state_dict), a matrix whose key it holds as a float32 tensor of the
// same shape is written into that tensor, which the result then holds: loading it is then a copy of
// each such tensor onto itself (none), and the model's parameters are the only float copy in memory. A
// throw may leave some of them written.
NamedTensors dequantize_state_dict(const io::SafeTensorsFile& file, const NamedTensors* into = nullptr);
// The same state_dict, checked the same way, with each matrix a Float32 tensor whose values are computed
// (q·scale) only when first read, and which int8 inference (InferenceMode, Precision::INT8) packs from its
// integers without computing them: a model run in int8 then holds its int8 weights, not the float32 ones
// too (load_model_dir's WeightsLoad::MAP_READ_ONLY). Takes the I8 data out of `file`.
NamedTensors dequantize_state_dict_lazy(io::SafeTensorsFile& file);

// Throws std::invalid_argument, as Module::load_state_dict does, for the first I8 matrix of `file` (read with
// LoadOptions::keep_int8) whose shape is not its parameter's in `params` (a model's state_dict) or which no
// parameter takes, naming the dtype it is stored in: "<path>: key 'k' has I8(500, 128) (a quantized matrix),
// expected Float32(500, 256)" / "<path>: unexpected key 'k' (I8(500, 128), a quantized matrix)". Called before
// the dequantization, whose float32 tensors load_state_dict would describe as Float32; the other keys' errors
// are load_state_dict's.
void check_quantized_shapes(const io::SafeTensorsFile& file, const NamedTensors& params);

// True when DIR's model.safetensors is quantized (reads the file's header and tensors).
bool is_quantized_model_dir(const std::string& dir);

// Writes OUT as the quantized copy of the model directory DIR (loaded and checked first),
// atomically: into a temporary directory beside OUT (io::StagedDirectory), renamed into place at the end; the
// staging directories that killed runs into OUT left are deleted first (io::remove_abandoned_staging). An
// existing OUT is refused (std::invalid_argument) unless `force`; with it, OUT is replaced whole when it holds
// nothing but a model directory's files (model_dir.h's layout, a training run's included, and the temporary files
// a killed writer left of them), and refused otherwise: replacing it would delete the others. DIR must not be
// quantized already, and OUT must not be DIR or hold it.
// `should_stop` (optional) is asked before each matrix is quantized and once the files are written: when it
// says stop, nothing is written (the staging directory is deleted) and the result is false; else true.
bool quantize_model_dir(const std::string& dir, const std::string& out, bool force = false,
                        const std::function<bool()>& should_stop = {});

}  // namespace tfm
