#pragma once
// The byte tokenizer: ids 0-255 are the bytes of UTF-8 text, 256 = BOT (begin of
// text), 257 = EOT (end of text), 258 = PAD (ignored by the loss). Documents in a
// text file are separated by blank lines.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fanout::data {

constexpr int32_t kBot = 256, kEot = 257, kPad = 258;
constexpr int64_t kByteVocab = 259;

// Bytes -> ids (no BOT/EOT).
std::vector<int32_t> byte_encode(std::string_view text);
// Ids -> text; BOT/EOT/PAD are dropped, ids past the byte range print as <id>.
std::string byte_decode(const std::vector<int32_t>& ids);

// Splits text at blank lines (one or more lines holding only whitespace);
// empty documents are dropped.
std::vector<std::string> split_documents(std::string_view text);

}  // namespace fanout::data
