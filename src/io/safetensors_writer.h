// src/io/safetensors_writer.h — save_safetensors into a writer the caller commits, for files that must
// change together (a checkpoint: src/train/checkpoint.cc).
#pragma once

#include <map>
#include <string>

#include "io/file_util.h"
#include "tfm/io/safetensors.h"

namespace tfm::io {

// The bytes save_safetensors writes, into `w` (whose path names the errors), left uncommitted: the caller
// sync()s and commit()s it, e.g. after every file of a set is written. Throws SafeTensorsError.
void write_safetensors(AtomicFileWriter& w, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const std::map<std::string, Int8Tensor>& int8 = {});

}  // namespace tfm::io
