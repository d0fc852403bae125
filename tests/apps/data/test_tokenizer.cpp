// The byte tokenizer: UTF-8 text to byte ids and back, the special ids, and
// documents split at blank lines (whitespace-only lines and CRLF included).

#include <doctest/doctest.h>

#include "apps/data/tokenizer.h"

using namespace fanout::data;

TEST_CASE("byte_encode and byte_decode round trip UTF-8 text") {
  std::string text =
      "h\xC3\xA9llo w\xC3\xB6rld \xE2\x80\x94 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x8E\x89\n\t";
  std::vector<int32_t> ids = byte_encode(text);
  CHECK(ids.size() == text.size());
  CHECK(ids[1] == 0xC3);  // bytes are unsigned
  CHECK(ids[2] == 0xA9);
  for (int32_t id : ids) {
    CHECK(id >= 0);
    CHECK(id < 256);
  }
  CHECK(byte_decode(ids) == text);
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  CHECK(byte_decode(byte_encode(all)) == all);
  CHECK(byte_encode("").empty());
}

TEST_CASE("byte_decode drops BOT EOT and PAD and marks other ids") {
  CHECK(kBot == 256);
  CHECK(kEot == 257);
  CHECK(kPad == 258);
  CHECK(kByteVocab == 259);
  CHECK(byte_decode({kBot, 'h', 'i', kEot, kPad, kPad}) == "hi");
  CHECK(byte_decode({'a', 300, 'b', -1}) == "a<300>b<-1>");
}

TEST_CASE("split_documents splits at blank lines and drops empty documents") {
  using V = std::vector<std::string>;
  CHECK(split_documents("a\nb\n\nc\n") == V{"a\nb", "c"});
  CHECK(split_documents("a\n\n\n\nb") == V{"a", "b"});  // a run of blank lines is one break
  CHECK(split_documents("\n\na\n\n") == V{"a"});        // none before or after
  CHECK(split_documents("a\n   \nb\n\t \nc") == V{"a", "b", "c"});  // whitespace-only lines
  CHECK(split_documents("  indented\n\nx") == V{"  indented", "x"});
  CHECK(split_documents("one line no newline") == V{"one line no newline"});
  CHECK(split_documents("").empty());
  CHECK(split_documents(" \n\n \t\n").empty());
}

TEST_CASE("split_documents treats CRLF blank lines as blank") {
  using V = std::vector<std::string>;
  CHECK(split_documents("a\r\nb\r\n\r\nc\r\n") == V{"a\r\nb", "c"});
  CHECK(split_documents("a\r\n \r\nb") == V{"a", "b"});
  CHECK(split_documents("\r\n\r\nx\r\n") == V{"x"});
}
