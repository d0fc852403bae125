#pragma once
// HF's tokenizer.json for byte-level BPE: the subset fanout reads (BPE model,
// ByteLevel pre-tokenizer and decoder, no normalizer, added tokens) and the file
// it writes (which HF tokenizers loads). Everything else is refused by name.

#include <string>

#include "apps/data/bpe_tokenizer.h"

namespace fanout::data {

// tokenizer.json text -> model; fanout::Error "<name>: ..." for invalid JSON,
// an unsupported component or option, or a malformed vocab / merges list.
BpeModel bpe_model_from_json(const std::string& json_text, const std::string& name);

// The model as tokenizer.json text (version "1.0"; merges as "a b" strings
// unless a token holds a space, then as pairs, which HF reads since 0.20).
std::string bpe_model_to_json(const BpeModel& model);

}  // namespace fanout::data
