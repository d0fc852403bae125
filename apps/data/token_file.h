#pragma once
// Token data from a file: llm.c's token format (256 int32 header: magic 20240520
// version 1 with uint16 tokens, or magic 20240801 version 7 with uint32 tokens;
// header[2] = token count), recognised by its header whatever the file's name, or
// any other file as UTF-8 text through the run's tokenizer (the byte tokenizer unless
// told otherwise: text_tokenizer.h). Token files are
// read on demand (pread), not copied; text is streamed and bounded (token_file_text_limit).
// Only regular files are opened. Every problem is a fanout::Error naming the file.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "apps/data/text_tokenizer.h"
#include "apps/data/tokenizer.h"

namespace fanout::data {

class TokenMap;  // the token section of an llm.c file, read on demand (token_file.cpp)

struct TokenData {
  std::string path;
  // Text files and the embedded corpus: the packed stream, [BOT] doc [EOT] per document.
  // Empty for llm.c files, whose tokens stay in `map`: use the accessors below.
  std::vector<int32_t> tokens;
  // Text files only: each document's ids (without BOT/EOT), for packing off; llm.c
  // files get them from token_data_split_documents.
  std::vector<std::vector<int32_t>> documents;
  // The tokenizer's [BOT], [EOT] and [PAD] ids (-1: it has none): packing off builds
  // its rows from them.
  int32_t bot = kBot, eot = kEot, pad = kPad;
  bool from_bin = false;
  std::shared_ptr<const TokenMap> map;  // llm.c files: the open file, read on demand
  // llm.c files: the file's tokens [map_first, map_first + map_count) are this data
  // (all of them unless a run held some out: token_data_hold_out).
  int64_t map_first = 0, map_count = 0;

  // The packed stream, whatever holds it.
  int64_t token_count() const;
  int32_t token_at(int64_t i) const;  // 0 <= i < token_count()
  // Tokens [begin, begin + count) as int32 into out[count].
  void tokens_copy(int64_t begin, int64_t count, int32_t* out) const;
};

constexpr int32_t kBinMagicU16 = 20240520, kBinMagicU32 = 20240801;

// A file whose first 8 bytes are an llm.c magic and version is a token file, whatever
// its name; a name ending in .jsonl (any case) is JSON Lines, each line's "text"
// member one document (jsonl_documents.h); any other file is text, except that a
// name ending in .bin (any case) that does not start like a token file is refused
// (most likely a damaged token file).
// `flag` ("--data") names the flag in the message for an empty path. Text is split
// into documents at blank lines (split_documents) and each is encoded by `tokenizer`
// as [BOT] doc [EOT]; the ids of [BOT], [EOT] and [PAD] are `tokenizer`'s.
TokenData token_file_load(const std::string& path, std::string_view flag = {},
                          const TextTokenizer& tokenizer = *byte_tokenizer());

// Whether token_file_load reads `path` as an llm.c token file (its header, or a .bin
// name); false for text and for a file that cannot be read.
bool token_file_is_bin(const std::string& path);

// `fanout prepare` leaves the tokenizer it encoded with beside its token files, as
// DIR/tokenizer.json. That path when `path` is a token file with one beside it
// (a regular file, symlinks followed), else "" (text, or a file made without one).
inline constexpr const char* kTokenFileTokenizerName = "tokenizer.json";
std::string token_file_tokenizer_path(const std::string& path);

// Documents encoded as token_file_load encodes a text file holding them: tokens =
// [BOT] ids [EOT] per document (a special the tokenizer lacks is left out),
// documents = each one's ids; path = `name`.
TokenData token_data_from_documents(const std::vector<std::string>& documents,
                                    const TextTokenizer& tokenizer, const std::string& name);

// Packing off over an llm.c file (Note [Packing off over a token file] in
// token_file.cpp): reads every token and fills `documents`, one per [EOT] (a leading
// [BOT] dropped, empty documents skipped). Throws naming the file when it holds no
// [EOT] or is too large to hold in memory.
void token_data_split_documents(TokenData& data);

// The most bytes a text file may hold: text is tokenized in memory at 8 bytes per byte
// (the packed stream and the documents), so min(1 GiB, physical memory / 32).
uint64_t token_file_text_limit();

// Throws naming the first token id >= vocab_size (llm.c files can hold any id).
void token_data_check_vocab(const TokenData& data, int64_t vocab_size);

// Writes an llm.c .bin file atomically (file_write_atomic): uint16 when every id of a
// vocabulary of `vocab_size` tokens fits (vocab_size <= 65536), else uint32; with
// vocab_size 0, uint16 when every id in `tokens` fits.
void token_file_write_bin(const std::string& path, const std::vector<int32_t>& tokens,
                          int64_t vocab_size = 0);

}  // namespace fanout::data
