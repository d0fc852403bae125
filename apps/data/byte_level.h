#pragma once
// GPT-2's byte-level pieces, shared by the BPE tokenizer and its trainer: the
// byte-to-unicode alphabet (every byte as a printable character, so a token is
// a string of those characters) and the GPT-2 pre-tokenizer regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// as HF's ByteLevel pre-tokenizer applies it (use_regex = true).

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace fanout::data {

// byte b -> its character's UTF-8 (GPT-2's bytes_to_unicode).
const std::array<std::string, 256>& byte_level_alphabet();
// A byte string -> the alphabet's characters; and back (nullopt-free: unknown
// characters throw fanout::Error naming them).
std::string byte_level_encode(std::string_view bytes);
std::string byte_level_decode(std::string_view chars);

// The pieces the regex splits UTF-8 text into, in order, covering it exactly
// (views into `text`). A byte that is not valid UTF-8 counts as one character
// of [^\s\p{L}\p{N}] (as its lossy replacement U+FFFD would), so it joins the
// punctuation run around it. The Unicode classes are HF tokenizers 0.23.2's
// (Unicode 16.0), probed by tools/gen_byte_level_unicode.js.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace fanout::data
