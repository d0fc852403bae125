// Token files: llm.c .bin round trips in both widths, every malformed header
// refused naming the file, token files found by header not name and mapped (not
// copied), FIFOs refused, text streamed as [BOT] doc [EOT] per document exactly as
// split_documents splits it, and the vocabulary check naming the first bad position.

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "apps/data/token_file.h"
#include "apps/data/tokenizer.h"
#include "engine/core/check.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/input_util.h"

using namespace fanout;
using namespace fanout::data;
using fanout::test::file_read;
using fanout::test::file_write;
using fanout::test::TempDir;

using fanout::test::error_of;
using fanout::test::has;
namespace fs = std::filesystem;

namespace {

std::vector<int32_t> all_tokens(const TokenData& d) {
  std::vector<int32_t> out(static_cast<size_t>(d.token_count()));
  d.tokens_copy(0, d.token_count(), out.data());
  for (int64_t i = 0; i < d.token_count(); ++i) REQUIRE(d.token_at(i) == out[i]);
  return out;
}

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
  CHECK(all_tokens(d) == tokens);
  CHECK(d.tokens.empty());  // mapped, not copied
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
  CHECK(all_tokens(token_file_load(dir / "a.bin")) == tokens);
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
  // An id past int32 is named as stored, by the vocabulary check (the file is mapped,
  // not scanned, when it loads).
  token_file_write_bin(dir / "neg.bin", {1, 70000});
  std::string bytes = file_read(dir / "neg.bin");
  uint32_t big = 0x80000000u;
  std::memcpy(bytes.data() + 1024 + 4, &big, 4);
  file_write(dir / "neg.bin", bytes);
  const TokenData d = token_file_load(dir / "neg.bin");
  CHECK(error_of([&] { token_data_check_vocab(d, 259); }) ==
        dir / "neg.bin: token id 2147483648 at position 1 is out of range for vocabulary size 259");
}

TEST_CASE("empty missing and non-regular files are refused naming the path") {
  TempDir dir("fanout-tokens");
  file_write(dir / "empty.bin", "");
  check_load_fails(dir / "empty.bin", "the file is empty");
  file_write(dir / "empty.txt", "");
  check_load_fails(dir / "empty.txt", "the file is empty");
  check_load_fails(dir / "missing.txt", "no such file");
  std::filesystem::create_directory(dir / "sub.txt");
  check_load_fails(dir / "sub.txt", "is a directory, not a regular file");
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

TEST_CASE("a .jsonl file loads each line's text member as one document") {
  TempDir dir("fanout-tokens");
  // Blank lines inside a document stay in it; blank lines and blank texts are skipped.
  file_write(dir / "docs.jsonl",
             "{\"text\": \"ab\\n\\ncd\", \"id\": 1}\n\n{\"text\": \"  \"}\n{\"id\": 2, "
             "\"text\": \"x\\u00e9\"}");
  for (const char* name : {"docs.jsonl", "DOCS.JSONL"}) {
    CAPTURE(name);
    if (std::string(name) != "docs.jsonl") fs::copy_file(dir / "docs.jsonl", dir / name);
    const TokenData d = token_file_load(dir / name);
    CHECK_FALSE(d.from_bin);
    const std::vector<std::vector<int32_t>> docs = {byte_encode("ab\n\ncd"),
                                                    byte_encode("x\xc3\xa9")};
    CHECK(d.documents == docs);
    CHECK(d.tokens ==
          token_data_from_documents({"ab\n\ncd", "x\xc3\xa9"}, *byte_tokenizer(), "x").tokens);
  }
  // Each bad line names itself, and the other member prepare could read.
  file_write(dir / "bad.jsonl", "{\"text\": \"a\"}\n{\"body\": \"b\"}\n");
  CHECK(has(error_of([&] { token_file_load(dir / "bad.jsonl", "--data"); }),
            "bad.jsonl:2: no \"text\" field (a .jsonl data file is read by its \"text\" field; "
            "fanout prepare --text-field reads another)"));
  file_write(dir / "bad.jsonl", "{\"text\": \"a\"}\nnot json\n");
  CHECK(has(error_of([&] { token_file_load(dir / "bad.jsonl"); }), "bad.jsonl:2: "));
  file_write(dir / "blank.jsonl", "\n{\"text\": \" \"}\n");
  CHECK(has(error_of([&] { token_file_load(dir / "blank.jsonl"); }),
            "blank.jsonl: holds no document (every line is blank or its text is)"));
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

// --- issue 17: header detection, non-regular files, memory ---------------------

TEST_CASE("token files are recognised by their header whatever their name") {
  TempDir dir("fanout-tokens");
  const std::vector<int32_t> narrow = {5, 6, 7}, wide = {1, 70000, 3};
  for (const char* name : {"x.BIN", "x.bin.1", "tokens", "data.txt"}) {
    CAPTURE(name);
    token_file_write_bin(dir / name, narrow);
    TokenData d = token_file_load(dir / name);
    CHECK(d.from_bin);
    CHECK(all_tokens(d) == narrow);
    token_file_write_bin(dir / name, wide);
    CHECK(all_tokens(token_file_load(dir / name)) == wide);
  }
  // A damaged header in any name is most likely a damaged token file, not text.
  std::string bytes = file_read(dir / "x.bin.1");
  set_header_int(bytes, 1, 3);
  file_write(dir / "x.bin.1", bytes);
  check_load_fails(dir / "x.bin.1", "magic 20240801 needs version 7, found 3");
  // A name ending in .bin (any case) without a token header keeps the clear error.
  file_write(dir / "text.BIN", std::string(2000, 'a'));
  check_load_fails(dir / "text.BIN", "bad magic 1633771873");
  // Anything else is text, whatever its name.
  file_write(dir / "notes.bin.txt", "abc\n");
  CHECK_FALSE(token_file_load(dir / "notes.bin.txt").from_bin);
}

TEST_CASE("an empty path names the flag and a FIFO is refused without blocking") {
  CHECK(error_of([] { token_file_load("", "--val-data"); }) ==
        "--val-data: an empty string is not a file name");
  TempDir dir("fanout-tokens");
  for (const char* name : {"data.txt", "data.bin"}) {
    fanout::test::Fifo fifo(dir / name);
    check_load_fails(fifo.path(), "is a FIFO, not a regular file");
  }
}

namespace {
// VmRSS of this process in KB.
long resident_kb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}
}  // namespace

TEST_CASE("a token file is read on demand: 256 MB load and check without becoming resident") {
  // A sparse file: a valid uint16 header, 134M zero tokens, then one id of 300.
  TempDir dir("fanout-tokens");
  const std::string path = dir / "big.bin";
  const int64_t count = (int64_t{256} << 20) / 2;
  {
    token_file_write_bin(path, {1});
    std::string head = file_read(path).substr(0, 1024);
    set_header_int(head, 2, static_cast<int32_t>(count));
    file_write(path, head);
    std::filesystem::resize_file(path, 1024 + 2 * count);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1024 + 2 * (count - 1));
    const uint16_t id = 300;
    f.write(reinterpret_cast<const char*>(&id), 2);
  }
  const long before = resident_kb();
  TokenData d = token_file_load(path);
  CHECK(d.token_count() == count);
  CHECK(d.token_at(count - 1) == 300);
  CHECK(d.token_at(count / 2) == 0);
  CHECK(error_of([&] { token_data_check_vocab(d, 259); }) ==
        path + ": token id 300 at position " + std::to_string(count - 1) +
            " is out of range for vocabulary size 259");
  std::vector<int32_t> tail(4);
  d.tokens_copy(count - 4, 4, tail.data());
  CHECK(tail == std::vector<int32_t>{0, 0, 0, 300});
  // The old loader held the file and a 4-byte copy of every token (768 MB).
  const long grown = resident_kb() - before;
  if (test::kResidentMemoryChecked) {
    CHECK_MESSAGE(grown < 64 * 1024, "resident memory grew by " << grown << " KB");
  }
}

TEST_CASE("streamed text splits into exactly the documents split_documents finds") {
  TempDir dir("fanout-tokens");
  std::mt19937 rng(17);
  const char alphabet[] = {'a', 'b', ' ', '\t', '\r', '\n', '\n', '\n'};
  std::uniform_int_distribution<int> pick(0, 7);
  for (int trial = 0; trial < 200; ++trial) {
    // Mostly short texts; a few cross the 1 MiB blocks the loader reads in.
    const size_t n = trial < 195 ? rng() % 64 : (size_t{1} << 20) + rng() % 5000;
    std::string text(n, 'a');
    for (char& c : text) c = alphabet[pick(rng)];
    text += 'z';  // never only blank
    if (trial % 3 == 0) text += "\n \r\n";
    CAPTURE(trial);
    file_write(dir / "t.txt", text);
    const TokenData d = token_file_load(dir / "t.txt");
    std::vector<std::vector<int32_t>> docs;
    std::vector<int32_t> stream;
    for (const std::string& doc : split_documents(text)) {
      docs.push_back(byte_encode(doc));
      stream.push_back(kBot);
      stream.insert(stream.end(), docs.back().begin(), docs.back().end());
      stream.push_back(kEot);
    }
    REQUIRE(d.documents == docs);
    REQUIRE(d.tokens == stream);
    REQUIRE(all_tokens(d) == stream);
  }
  CHECK(token_file_text_limit() <= (uint64_t{1} << 30));
  CHECK(token_file_text_limit() >= (uint64_t{1} << 20));
}

TEST_CASE("a token file cut short while in use is an error naming it, not a SIGBUS") {
  TempDir dir("fanout-tokens");
  const std::string path = dir / "cut.bin";
  std::vector<int32_t> tokens(100000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i % 259);
  token_file_write_bin(path, tokens);
  TokenData d = token_file_load(path);
  std::vector<int32_t> out(10);
  d.tokens_copy(99990, 10, out.data());
  CHECK(out[9] == 99999 % 259);
  // Rewritten under the run (a new data set generated in place, say).
  std::filesystem::resize_file(path, 1024 + 2 * 1000);
  CHECK(error_of([&] { d.tokens_copy(99990, 10, out.data()); }) ==
        path + ": the token file is shorter than its header says (changed while in use?)");
  CHECK(error_of([&] { d.tokens_copy(0, 10, out.data()); }).empty());  // what is left still reads
}
