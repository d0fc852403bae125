#pragma once
// Token data from a file: llm.c's token format (256 int32 header: magic 20240520
// version 1 with uint16 tokens, or magic 20240801 version 7 with uint32 tokens;
// header[2] = token count), recognised by its header whatever the file's name, or
// any other file as UTF-8 text through the byte tokenizer. Token files are
// read on demand (pread), not copied; text is streamed and bounded (token_file_text_limit).
// Only regular files are opened. Every problem is a fanout::Error naming the file.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fanout::data {

class TokenMap;  // the token section of an llm.c file, read on demand (token_file.cpp)

struct TokenData {
  std::string path;
  // Text files and the embedded corpus: the packed stream, [BOT] doc [EOT] per document.
  // Empty for llm.c files, whose tokens stay in `map`: use the accessors below.
  std::vector<int32_t> tokens;
  // Text files only: each document's bytes, for packing off.
  std::vector<std::vector<int32_t>> documents;
  bool from_bin = false;
  std::shared_ptr<const TokenMap> map;  // llm.c files: the open file, read on demand

  // The packed stream, whatever holds it.
  int64_t token_count() const;
  int32_t token_at(int64_t i) const;  // 0 <= i < token_count()
  // Tokens [begin, begin + count) as int32 into out[count].
  void tokens_copy(int64_t begin, int64_t count, int32_t* out) const;
};

constexpr int32_t kBinMagicU16 = 20240520, kBinMagicU32 = 20240801;

// A file whose first 8 bytes are an llm.c magic and version is a token file, whatever
// its name; any other file is text, except that a name ending in .bin (any case) that
// does not start like a token file is refused (most likely a damaged token file).
// `flag` ("--data") names the flag in the message for an empty path.
TokenData token_file_load(const std::string& path, std::string_view flag = {});

// The most bytes a text file may hold: text is tokenized in memory at 8 bytes per byte
// (the packed stream and the documents), so min(1 GiB, physical memory / 32).
uint64_t token_file_text_limit();

// Throws naming the first token id >= vocab_size (llm.c files can hold any id).
void token_data_check_vocab(const TokenData& data, int64_t vocab_size);

// Writes an llm.c .bin file (uint16 when every id fits, else uint32).
void token_file_write_bin(const std::string& path, const std::vector<int32_t>& tokens);

}  // namespace fanout::data
