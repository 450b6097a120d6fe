// src/fnv1a.h — 64-bit FNV-1a: h ← (h ⊕ byte) · prime over the bytes, from the offset basis (or a previous hash, to
// go on hashing). A fingerprint of files and tensors (a run's training text, the ranks' agreement), not a
// cryptographic hash. Internal.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tfm {

inline constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull, kFnvPrime = 0x100000001b3ull;

inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnvOffset) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

}  // namespace tfm
