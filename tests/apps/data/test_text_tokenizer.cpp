// The TextTokenizer entry points: the byte tokenizer (byte_encode / byte_decode
// as a tokenizer, and as a tokenizer.json), and loading files by path.

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/data/byte_level.h"
#include "apps/data/text_tokenizer.h"
#include "apps/data/tokenizer.h"
#include "engine/core/check.h"
#include "engine/core/file_io.h"

using namespace fanout::data;
using Ids = std::vector<int32_t>;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const fanout::Error& e) {
    return e.what();
  }
  return "no error";
}

std::string every_byte_text() {
  std::string text =
      "h\xC3\xA9llo  w\xC3\xB6rld \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x8E\x89\n\t don't";
  for (int c = 0; c < 256; ++c) text.push_back(static_cast<char>(c));
  return text;
}

}  // namespace

TEST_CASE("byte_tokenizer is byte_encode and byte_decode") {
  auto t = byte_tokenizer();
  CHECK(t == byte_tokenizer());  // one instance
  const std::string text = every_byte_text();
  CHECK(t->encode(text) == byte_encode(text));
  CHECK(t->decode(t->encode(text)) == text);
  const Ids ids = {kBot, 'h', 'i', kEot, kPad, 300, -1, 0xC3, 0xA9};
  CHECK(t->decode(ids) == byte_decode(ids));
  CHECK(t->vocab_size() == kByteVocab);
  CHECK(t->bot() == kBot);
  CHECK(t->eot() == kEot);
  CHECK(t->pad() == kPad);
  CHECK(t->describe() == "byte");
  CHECK(t->is_byte());
  // Special tokens' text encodes to their ids, as the tokenizer.json makes HF do.
  CHECK(t->encode("a[EOT]b[BOT]") == Ids{'a', kEot, 'b', kBot});
  CHECK(t->encode("").empty());
}

TEST_CASE("byte_tokenizer's tokenizer.json maps byte b to id b and loads back the same") {
  auto t = byte_tokenizer();
  const std::string json = t->to_json();
  auto j = nlohmann::json::parse(json);
  CHECK(j["model"]["merges"].empty());
  CHECK(j["model"]["vocab"].size() == 256);
  CHECK(j["model"]["vocab"]["\xC4\xA0"] == ' ');
  CHECK(j["model"]["vocab"]["\xC4\x8A"] == '\n');
  const auto& alphabet = byte_level_alphabet();
  bool identity = true;
  for (int b = 0; b < 256; ++b) identity = identity && j["model"]["vocab"][alphabet[b]] == b;
  CHECK(identity);
  CHECK(j["added_tokens"].size() == 3);
  CHECK(j["added_tokens"][2]["content"] == "[PAD]");
  CHECK(j["added_tokens"][2]["id"] == kPad);
  CHECK(j["pre_tokenizer"]["type"] == "ByteLevel");
  CHECK(j["decoder"]["type"] == "ByteLevel");

  auto back = tokenizer_from_json(json, "byte.json");
  const std::string text = every_byte_text() + "[PAD][EOT]";
  CHECK(back->encode(text) == t->encode(text));
  CHECK(back->describe() == "byte");
  CHECK(back->is_byte());
  CHECK(back->to_json() == json);
  CHECK(back->eot() == kEot);
}

TEST_CASE("tokenizer_load reads a file and names it in errors") {
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string path =
      dir + "/fanout_test_text_tokenizer_byte_" + std::to_string(::getpid()) + ".json";
  fanout::file_write_atomic(path, byte_tokenizer()->to_json(), "test");
  auto t = tokenizer_load(path);
  CHECK(t->encode("hi[EOT]") == Ids{'h', 'i', kEot});
  std::remove(path.c_str());
  CHECK(error_of([&] { tokenizer_load(path); }) == path + ": no such file");
  const std::string bad =
      dir + "/fanout_test_text_tokenizer_bad_" + std::to_string(::getpid()) + ".json";
  fanout::file_write_atomic(bad, "{\"model\": {\"type\": \"WordPiece\"}}", "test");
  CHECK(error_of([&] { tokenizer_load(bad); }) ==
        bad + ": model type 'WordPiece' is not supported (only BPE)");
  std::remove(bad.c_str());
}
