#pragma once
// Byte-level BPE (GPT-2's and HF's ByteLevel BPE): text is split by the GPT-2
// regex (byte_level.h), each piece's bytes become alphabet characters, and the
// merges are applied by rank. Reads and writes HF's tokenizer.json.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "apps/data/text_tokenizer.h"

namespace fanout::data {

struct BpeModel {
  // id -> token, in the byte-level alphabet's characters (UTF-8): "Ġthe".
  std::vector<std::string> vocab;
  // By rank: merges[0] is applied first. Both halves and their concatenation are in vocab.
  std::vector<std::pair<std::string, std::string>> merges;
  struct Added {
    int32_t id = 0;
    std::string content;  // "[EOT]"
    bool special = true;
  };
  // Added tokens: ids may extend past vocab (as HF's do) or repeat a vocab entry's id.
  std::vector<Added> added;
  // HF's ByteLevel add_prefix_space: a space is put before each stretch of text
  // (between added tokens) that does not start with one. GPT-2's files: false.
  bool add_prefix_space = false;
  // HF's BPE ignore_merges: a piece that is a vocab token as a whole is that token.
  bool ignore_merges = false;
};

// Validates the model (every merge's halves and result in vocab, ids unique and
// dense, ...): fanout::Error naming `name` and the first problem.
std::shared_ptr<const TextTokenizer> bpe_tokenizer(BpeModel model, const std::string& name);

// The byte tokenizer as a BpeModel: vocab = the alphabet in byte order (byte b is
// id b), no merges, [BOT] [EOT] [PAD] added as 256, 257, 258.
BpeModel bpe_byte_model();

// The standard special tokens of fanout's trained tokenizers.
inline constexpr const char* kBotToken = "[BOT]";
inline constexpr const char* kEotToken = "[EOT]";
inline constexpr const char* kPadToken = "[PAD]";

}  // namespace fanout::data
