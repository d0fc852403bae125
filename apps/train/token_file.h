#pragma once
// Token data from a file: llm.c's .bin format (256 int32 header: magic 20240520
// version 1 with uint16 tokens, or magic 20240801 version 7 with uint32 tokens;
// header[2] = token count) or any other file as UTF-8 text through the byte
// tokenizer. Every problem is a fanout::Error naming the file.

#include <cstdint>
#include <string>
#include <vector>

namespace fanout::train {

struct TokenData {
  std::string path;
  // Packed stream: llm.c tokens as stored, or text as [BOT] doc [EOT] per document.
  std::vector<int32_t> tokens;
  // Text files only: each document's bytes, for packing off.
  std::vector<std::vector<int32_t>> documents;
  bool from_bin = false;
};

constexpr int32_t kBinMagicU16 = 20240520, kBinMagicU32 = 20240801;

// Files ending in .bin must be llm.c token files; anything else is text.
TokenData token_file_load(const std::string& path);

// Throws naming the first token id >= vocab_size (llm.c files can hold any id).
void token_data_check_vocab(const TokenData& data, int64_t vocab_size);

// Writes an llm.c .bin file (uint16 when every id fits, else uint32).
void token_file_write_bin(const std::string& path, const std::vector<int32_t>& tokens);

}  // namespace fanout::train
