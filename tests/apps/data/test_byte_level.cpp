// GPT-2's byte-level alphabet and pre-tokenizer regex, case by case (HF's
// ByteLevel pre-tokenizer gives the same pieces: tests/reference/hf_tokenizers.js
// checks that on a large corpus).

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "apps/data/byte_level.h"
#include "engine/core/check.h"

using namespace fanout::data;
using Pieces = std::vector<std::string>;

namespace {

Pieces split(std::string_view text) {
  Pieces out;
  size_t covered = 0;
  bool contiguous = true;  // in order, non-empty, covering the text exactly
  for (std::string_view p : gpt2_pretokenize(text)) {
    contiguous = contiguous && !p.empty() && p.data() == text.data() + covered;
    covered += p.size();
    out.emplace_back(p);
  }
  CHECK(contiguous);
  CHECK(covered == text.size());
  return out;
}

}  // namespace

TEST_CASE("byte_level_alphabet maps the 256 bytes to distinct printable characters") {
  const auto& a = byte_level_alphabet();
  std::set<std::string> distinct(a.begin(), a.end());
  CHECK(distinct.size() == 256);
  CHECK(a[' '] == "\xC4\xA0");   // U+0120 'Ġ'
  CHECK(a['\n'] == "\xC4\x8A");  // U+010A 'Ċ'
  CHECK(a['\t'] == "\xC4\x89");  // U+0109 'ĉ'
  CHECK(a[0] == "\xC4\x80");     // U+0100 'Ā'
  CHECK(a['A'] == "A");
  CHECK(a['~'] == "~");
  CHECK(a[0x7F] == "\xC4\xA1");  // DEL: after the 33 controls and space
  CHECK(a[0xAD] == "\xC5\x83");  // soft hyphen: the last remapped byte, U+0143
  CHECK(a[0xE9] == "\xC3\xA9");  // 'é' maps to itself
  for (const std::string& s : a) {
    CHECK(s.size() <= 2);
    CHECK(s != " ");
  }
}

TEST_CASE("byte_level_encode and byte_level_decode round trip every byte") {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  std::string chars = byte_level_encode(all);
  CHECK(chars.size() == 94 + 2 * (256 - 94));  // printable ASCII is 1 byte, the rest 2
  CHECK(byte_level_decode(chars) == all);
  CHECK(byte_level_encode(" hello") == "\xC4\xA0hello");
  CHECK(byte_level_decode("\xC4\xA0world\xC4\x8A") == " world\n");
  CHECK(byte_level_encode("") == "");
}

TEST_CASE("byte_level_decode names a character outside the alphabet") {
  auto message = [](std::string_view s) {
    try {
      byte_level_decode(s);
    } catch (const fanout::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message("ab cd") ==
        "byte-level text: ' ' at offset 2 is not a character of the byte-level alphabet");
  CHECK(message("a\xE6\x97\xA5") ==
        "byte-level text: '\xE6\x97\xA5' at offset 1 is not a character of the byte-level "
        "alphabet");
  CHECK(message("\xC4") ==
        "byte-level text: byte 0xC4 at offset 0 is not a character of the byte-level alphabet");
}

TEST_CASE("gpt2_pretokenize splits contractions case-sensitively") {
  CHECK(split("don't") == Pieces{"don", "'t"});
  CHECK(split("I'm we're they've you'll he'd it's") ==
        Pieces{"I", "'m", " we", "'re", " they", "'ve", " you", "'ll", " he", "'d", " it", "'s"});
  CHECK(split("IT'S") == Pieces{"IT", "'", "S"});  // 'S is not a contraction
  CHECK(split("'re'x") == Pieces{"'re", "'", "x"});
  CHECK(split("a 's") == Pieces{"a", " '", "s"});  // the space glues to the quote
  CHECK(split("?'s") == Pieces{"?'", "s"});        // the punctuation run took the quote
  CHECK(split("'") == Pieces{"'"});
  CHECK(split("'r") == Pieces{"'", "r"});
}

TEST_CASE("gpt2_pretokenize glues one space to the letter, number or punctuation run after it") {
  CHECK(split("Hello world") == Pieces{"Hello", " world"});
  CHECK(split("abc123def") == Pieces{"abc", "123", "def"});
  CHECK(split("x = 42;") == Pieces{"x", " =", " 42", ";"});
  CHECK(split("hi!!! ...") == Pieces{"hi", "!!!", " ..."});
  CHECK(split("a,b") == Pieces{"a", ",", "b"});
}

TEST_CASE("gpt2_pretokenize splits whitespace runs as the lookahead rule does") {
  // \s+(?!\S): a run before a word leaves its last whitespace to the word.
  CHECK(split("a  b") == Pieces{"a", " ", " b"});
  CHECK(split("a    b") == Pieces{"a", "   ", " b"});
  CHECK(split("a\n\nb") == Pieces{"a", "\n", "\n", "b"});  // '\n' does not glue: \s+ alone
  CHECK(split("a \n b") == Pieces{"a", " \n", " b"});
  CHECK(split("a\n") == Pieces{"a", "\n"});
  CHECK(split("a  \n\n") == Pieces{"a", "  \n\n"});  // to the end: the whole run
  CHECK(split("\tx") == Pieces{"\t", "x"});
  CHECK(split("  ") == Pieces{"  "});
  CHECK(split(" ") == Pieces{" "});
  CHECK(split("a\t\tb") == Pieces{"a", "\t", "\t", "b"});
  CHECK(split("").empty());
}

TEST_CASE("gpt2_pretokenize uses Unicode letters, numbers and whitespace") {
  // é, CJK and Cyrillic are letters; ² and Ⅳ are numbers; U+3000 and U+00A0 are \s.
  CHECK(split("caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E") ==
        Pieces{"caf\xC3\xA9", " \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E"});
  CHECK(split("x\xC2\xB2 \xE2\x85\xA3") == Pieces{"x", "\xC2\xB2", " \xE2\x85\xA3"});
  CHECK(split("a\xE3\x80\x80\xE3\x80\x80"
              "b") == Pieces{"a", "\xE3\x80\x80", "\xE3\x80\x80", "b"});
  CHECK(split("a\xC2\xA0"
              "b") == Pieces{"a", "\xC2\xA0", "b"});  // NBSP is \s, not ' '
  // Emoji are symbols (So): a punctuation run; a combining mark (Mn) is not a letter.
  CHECK(split("ok \xF0\x9F\x8E\x89\xF0\x9F\x98\x80!") ==
        Pieces{"ok", " \xF0\x9F\x8E\x89\xF0\x9F\x98\x80!"});
  CHECK(split("e\xCC\x81t") == Pieces{"e", "\xCC\x81", "t"});
  // A letter beyond the BMP (U+20000, CJK Extension B) and a number (U+1D7CE).
  CHECK(split("\xF0\xA0\x80\x80\xF0\x9D\x9F\x8E") ==
        Pieces{"\xF0\xA0\x80\x80", "\xF0\x9D\x9F\x8E"});
}

TEST_CASE("gpt2_pretokenize treats invalid UTF-8 bytes as punctuation") {
  CHECK(split("a\xFF\xFE"
              "b") == Pieces{"a", "\xFF\xFE", "b"});
  CHECK(split("a \x80!") == Pieces{"a", " \x80!"});
  CHECK(split("\xE6\x97") == Pieces{"\xE6\x97"});  // truncated: two invalid bytes, one run
  CHECK(split("\xC0\xAF"
              "x") == Pieces{"\xC0\xAF", "x"});            // overlong
  CHECK(split("\xED\xA0\x80") == Pieces{"\xED\xA0\x80"});  // a surrogate
}

TEST_CASE("gpt2_pretokenize handles a large text") {
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "The year 1984, don't   stop\n\n";
  Pieces pieces = split(text);
  CHECK(pieces.size() == 20000 * 10 - 1);  // the final "\n\n" is one piece
  CHECK(pieces[0] == "The");
  CHECK(pieces[6] == "  ");
  CHECK(pieces[9] == "\n");
  CHECK(pieces[10] == "The");
  CHECK(pieces.back() == "\n\n");
}
