// Token files: llm.c .bin round trips in both widths, every malformed header
// refused naming the file, text files as [BOT] doc [EOT] per document, and the
// vocabulary check naming the first bad position.

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>

#include "apps/train/token_file.h"
#include "apps/train/tokenizer.h"
#include "engine/core/check.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using namespace fanout::train;
using fanout::test::file_read;
using fanout::test::file_write;
using fanout::test::TempDir;

using fanout::test::error_of;

namespace {

int32_t header_int(const std::string& bytes, int i) {
  int32_t v;
  std::memcpy(&v, bytes.data() + 4 * i, 4);
  return v;
}

void set_header_int(std::string& bytes, int i, int32_t v) {
  std::memcpy(bytes.data() + 4 * i, &v, 4);
}

// `path` fails to load with a message starting with the path and holding `phrase`.
void check_load_fails(const std::string& path, const std::string& phrase) {
  std::string msg = error_of([&] { token_file_load(path); });
  INFO("message: " << msg);
  CHECK(msg.find(path) == 0);
  CHECK(msg.find(phrase) != std::string::npos);
}
}  // namespace

TEST_CASE("uint16 bin files round trip") {
  TempDir dir("fanout-tokens");
  std::vector<int32_t> tokens = {0, 1, 255, 256, 257, 258, 1000, 65535, 7};
  token_file_write_bin(dir / "a.bin", tokens);
  std::string bytes = file_read(dir / "a.bin");
  CHECK(bytes.size() == 1024 + 2 * tokens.size());
  CHECK(header_int(bytes, 0) == kBinMagicU16);
  CHECK(header_int(bytes, 1) == 1);
  CHECK(header_int(bytes, 2) == static_cast<int32_t>(tokens.size()));
  TokenData d = token_file_load(dir / "a.bin");
  CHECK(d.tokens == tokens);
  CHECK(d.from_bin);
  CHECK(d.documents.empty());
  CHECK(d.path == dir / "a.bin");
}

TEST_CASE("uint32 bin files round trip when an id needs more than 16 bits") {
  TempDir dir("fanout-tokens");
  std::vector<int32_t> tokens = {0, 65535, 65536, 1 << 30, 2147483647, 12};
  token_file_write_bin(dir / "a.bin", tokens);
  std::string bytes = file_read(dir / "a.bin");
  CHECK(bytes.size() == 1024 + 4 * tokens.size());
  CHECK(header_int(bytes, 0) == kBinMagicU32);
  CHECK(header_int(bytes, 1) == 7);
  CHECK(token_file_load(dir / "a.bin").tokens == tokens);
}

TEST_CASE("bin files with a bad magic or the wrong version are refused") {
  TempDir dir("fanout-tokens");
  token_file_write_bin(dir / "a.bin", {1, 2, 3});
  std::string good = file_read(dir / "a.bin"), bytes = good;
  set_header_int(bytes, 0, 20240521);
  file_write(dir / "a.bin", bytes);
  check_load_fails(dir / "a.bin", "bad magic 20240521");

  bytes = good;
  set_header_int(bytes, 1, 2);
  file_write(dir / "a.bin", bytes);
  check_load_fails(dir / "a.bin", "magic 20240520 needs version 1, found 2");

  token_file_write_bin(dir / "b.bin", {1, 70000});
  bytes = file_read(dir / "b.bin");
  set_header_int(bytes, 1, 1);
  file_write(dir / "b.bin", bytes);
  check_load_fails(dir / "b.bin", "magic 20240801 needs version 7, found 1");
}

TEST_CASE("a bin header count that disagrees with the file size is refused") {
  TempDir dir("fanout-tokens");
  token_file_write_bin(dir / "a.bin", {1, 2, 3, 4});
  std::string good = file_read(dir / "a.bin");
  file_write(dir / "a.bin", good.substr(0, good.size() - 2));  // one token short
  check_load_fails(dir / "a.bin", "the header says 4 tokens (1032 bytes) but the file has 1030");
  file_write(dir / "a.bin", good + std::string(4, '\0'));
  check_load_fails(dir / "a.bin", "the header says 4 tokens");
  std::string bytes = good;
  set_header_int(bytes, 2, -1);  // read as uint32: 4294967295 tokens
  file_write(dir / "a.bin", bytes);
  check_load_fails(dir / "a.bin", "the header says 4294967295 tokens");
}

TEST_CASE("bin files without tokens or too short for a header are refused") {
  TempDir dir("fanout-tokens");
  token_file_write_bin(dir / "none.bin", {});
  check_load_fails(dir / "none.bin", "holds no tokens");
  file_write(dir / "short.bin", std::string(100, 'x'));
  check_load_fails(dir / "short.bin", "too short for an llm.c token file");
  token_file_write_bin(dir / "neg.bin", {1, 70000});
  std::string bytes = file_read(dir / "neg.bin");
  uint32_t big = 0x80000000u;
  std::memcpy(bytes.data() + 1024 + 4, &big, 4);
  file_write(dir / "neg.bin", bytes);
  check_load_fails(dir / "neg.bin", "token id 2147483648 at position 1 is out of range");
}

TEST_CASE("empty missing and non-regular files are refused naming the path") {
  TempDir dir("fanout-tokens");
  file_write(dir / "empty.bin", "");
  check_load_fails(dir / "empty.bin", "the file is empty");
  file_write(dir / "empty.txt", "");
  check_load_fails(dir / "empty.txt", "the file is empty");
  check_load_fails(dir / "missing.txt", "no such file");
  std::filesystem::create_directory(dir / "sub.txt");
  check_load_fails(dir / "sub.txt", "not a regular file");
  file_write(dir / "blank.txt", "\n  \n\t\n");
  check_load_fails(dir / "blank.txt", "holds no text");
}

TEST_CASE("text files load as BOT doc EOT per blank-line-separated document") {
  TempDir dir("fanout-tokens");
  file_write(dir / "docs.txt", "ab\ncd\n\n\nxy\n  \nz");
  TokenData d = token_file_load(dir / "docs.txt");
  CHECK_FALSE(d.from_bin);
  std::vector<std::vector<int32_t>> docs = {byte_encode("ab\ncd"), byte_encode("xy"),
                                            byte_encode("z")};
  CHECK(d.documents == docs);
  std::vector<int32_t> expected;
  for (const auto& doc : docs) {
    expected.push_back(kBot);
    expected.insert(expected.end(), doc.begin(), doc.end());
    expected.push_back(kEot);
  }
  CHECK(d.tokens == expected);
  // Any other extension is text too, even if it looks binary.
  file_write(dir / "data.dat", std::string("\x01\x02", 2));
  CHECK(token_file_load(dir / "data.dat").tokens == std::vector<int32_t>{kBot, 1, 2, kEot});
}

TEST_CASE("the vocabulary check names the file and the first bad position") {
  TokenData d;
  d.path = "toks.bin";
  d.tokens = {1, 2, 258, 300, 400};
  CHECK_NOTHROW(token_data_check_vocab(d, 401));
  CHECK(error_of([&] { token_data_check_vocab(d, 259); }) ==
        "toks.bin: token id 300 at position 3 is out of range for vocabulary size 259");
  d.tokens[1] = -5;
  CHECK(error_of([&] { token_data_check_vocab(d, 259); }).find("token id -5 at position 1") !=
        std::string::npos);
}
