// src/data/spm_charsmap.h — a check of a SentencePiece model's normalization tables before SentencePiece uses them.
//
// A model's NormalizerSpec (and DenormalizerSpec) may hold a "precompiled charsmap": rules text → replacement,
// stored as a darts-clone double-array trie over UTF-8 bytes followed by the replacements, NUL-terminated strings.
// SentencePiece reads it unchecked: it walks the trie by the input's bytes and returns
// `replacements + value` to strlen. In a damaged file a trie cell can send the walk past the array, or a value past
// the replacements, and a character that reaches that cell crashes the process — long after the load succeeded.
// check_spm_charsmaps walks every cell the trie can reach and throws if any walk could leave the arrays.
#pragma once

#include <string>
#include <string_view>

namespace tfm::data {

// The serialized ModelProto `model` (already accepted by SentencePiece's parser): returns "" when each charsmap is
// absent or safe to walk, else why not ("normalizer_spec: its trie's cell 123 ...").
std::string spm_charsmaps_problem(std::string_view model);

}  // namespace tfm::data
