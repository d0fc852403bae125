// `fanout prepare` through the real binary: one summary line, the two token files
// and the tokenizer beside them; `byte` as in tokenizer encode; JSON Lines input;
// every bad input one line on stderr and a non-zero exit.

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "apps/data/bpe_trainer.h"
#include "apps/data/corpus.h"
#include "apps/data/text_tokenizer.h"
#include "apps/data/token_file.h"
#include "apps/data/tokenizer.h"
#include "engine/core/file_io.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"

using fanout::test::has;
using fanout::test::run_fanout;
using fanout::test::TempDir;

namespace {
constexpr const char* kTimeout = "timeout -k 5 120";  // bounds every run

std::string corpus_text(size_t documents) {
  std::vector<std::string> docs = fanout::data::default_corpus().train_documents;
  std::string text;
  for (size_t i = 0; i < documents; ++i) text += (text.empty() ? "" : "\n\n") + docs[i];
  return text;
}

void bpe_write(const std::string& path) {
  fanout::data::BpeTrainOptions options;
  options.vocab_size = 400;
  auto tok =
      fanout::data::bpe_tokenizer(fanout::data::bpe_train_texts({corpus_text(200)}, options), path);
  fanout::file_write_atomic(path, tok->to_json(), "test");
}
}  // namespace

TEST_CASE("prepare prints one summary line and writes train.bin and val.bin") {
  TempDir dir("fanout-cmd-prepare");
  bpe_write(dir / "tok.json");
  fanout::test::file_write(dir / "a.txt", corpus_text(50));
  auto r = run_fanout({"prepare", "--tokenizer", dir / "tok.json", "--data", dir / "a.txt", "--out",
                       dir / "prep", "--val-fraction", "0.1"},
                      kTimeout);
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.err.empty());
  CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
  CHECK(has(r.out, "prepare: 50 documents (45 train, 5 val)"));
  CHECK(has(r.out, "as uint16 -> " + dir / "prep/train.bin" + ", " + dir / "prep/val.bin"));
  CHECK(has(r.out, "tokens/s"));
  auto tok = fanout::data::tokenizer_load(dir / "tok.json");
  CHECK(fanout::data::token_file_load(dir / "prep/train.bin", {}, *tok).token_count() > 0);
  CHECK(fanout::data::token_file_load(dir / "prep/val.bin", {}, *tok).token_count() > 0);
  // --packing off: the same files (documents come apart at [EOT]).
  auto off = run_fanout({"prepare", "--tokenizer", dir / "tok.json", "--data", dir / "a.txt",
                         "--out", dir / "off", "--val-fraction", "0.1", "--packing", "off"},
                        kTimeout);
  REQUIRE(off.rc == 0);
  CHECK(fanout::test::file_read(dir / "off/train.bin") ==
        fanout::test::file_read(dir / "prep/train.bin"));
}

TEST_CASE("prepare refuses bad flags and files with one line") {
  TempDir dir("fanout-cmd-prepare");
  bpe_write(dir / "tok.json");
  fanout::test::file_write(dir / "a.txt", corpus_text(5));
  fanout::test::file_write(dir / "file", "x");
  auto args = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"prepare"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::string tok = dir / "tok.json", data = dir / "a.txt", out = dir / "out";
  struct Case {
    std::vector<std::string> args;
    int rc;
    std::string part;
  };
  const std::vector<Case> cases = {
      {{"--tokenizer", tok, "--data", data, "--out", dir / "file"},
       1,
       "is a file, not a directory"},
      {{"--tokenizer", tok, "--data", dir / "none.txt", "--out", out}, 1, "none.txt"},
      {{"--tokenizer", dir / "none.json", "--data", data, "--out", out}, 1, "none.json"},
      {{"--tokenizer", tok, "--data", data, "--out", out, "--val-fraction", "0"},
       1,
       "--val-fraction must be in (0, 1)"},
      {{"--tokenizer", tok, "--data", data, "--out", out, "--val-fraction", "0.95"},
       1,
       "leaves no document for training"},
      {{"--tokenizer", tok, "--data", data, "--out", out, "--val-fraction", "x"},
       2,
       "--val-fraction"},
      {{"--tokenizer", tok, "--data", data, "--out", out, "--packing", "maybe"}, 2, "--packing"},
      {{"--data", data, "--out", out}, 2, "--tokenizer"},
      {{"--tokenizer", tok, "--out", out}, 2, "--data"},
  };
  for (const Case& c : cases) {
    auto r = run_fanout(args(c.args), kTimeout);
    CAPTURE(r.err);
    CHECK(r.rc == c.rc);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, c.part));
    CHECK(!std::filesystem::exists(out));
  }
}

TEST_CASE("prepare takes the tokenizer names tokenizer encode takes: byte") {
  TempDir dir("fanout-cmd-prepare");
  fanout::test::file_write(dir / "a.txt", "Hi there.\n\nA second one.\n\nA third.");
  auto r = run_fanout({"prepare", "--tokenizer", "byte", "--data", dir / "a.txt", "--out",
                       dir / "prep", "--val-fraction", "0.3"},
                      kTimeout);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  const auto byte = fanout::data::byte_tokenizer();
  const auto train = fanout::data::token_file_load(dir / "prep/train.bin", {}, *byte);
  std::vector<int32_t> ids(static_cast<size_t>(train.token_count()));
  train.tokens_copy(0, train.token_count(), ids.data());
  std::vector<int32_t> want = {fanout::data::kBot};
  for (unsigned char c : std::string("Hi there.")) want.push_back(c);
  want.push_back(fanout::data::kEot);
  CHECK(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<long>(want.size())) == want);
  // The same name in the help of both.
  auto help = run_fanout({"prepare", "--help"}, kTimeout);
  CHECK(has(help.out, "or byte"));
}

TEST_CASE("prepare leaves the tokenizer it used beside the token files") {
  TempDir dir("fanout-cmd-prepare");
  bpe_write(dir / "tok.json");
  fanout::test::file_write(dir / "a.txt", corpus_text(20));
  const auto tok = fanout::data::tokenizer_load(dir / "tok.json");
  auto r = run_fanout(
      {"prepare", "--tokenizer", dir / "tok.json", "--data", dir / "a.txt", "--out", dir / "prep"},
      kTimeout);
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "tokenizer beside them: " + dir / "prep/tokenizer.json"));
  CHECK(fanout::data::tokenizer_load(dir / "prep/tokenizer.json")->to_json() == tok->to_json());
  // Prepared again with bytes into the same folder: the tokenizer beside follows.
  r = run_fanout({"prepare", "--tokenizer", "byte", "--data", dir / "a.txt", "--out", dir / "prep"},
                 kTimeout);
  REQUIRE(r.rc == 0);
  CHECK(fanout::data::tokenizer_load(dir / "prep/tokenizer.json")->is_byte());
  // The tokenizer named from the output folder itself is left as it is.
  std::filesystem::create_directories(dir / "own");
  std::filesystem::create_directories(dir / "theirs");
  fanout::test::file_write(dir / "own/tokenizer.json", fanout::test::file_read(dir / "tok.json"));
  r = run_fanout({"prepare", "--tokenizer", dir / "own/tokenizer.json", "--data", dir / "a.txt",
                  "--out", dir / "own"},
                 kTimeout);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(fanout::test::file_read(dir / "own/tokenizer.json") ==
        fanout::test::file_read(dir / "tok.json"));
  // Someone else's tokenizer.json where no prepare wrote token files: refused, kept.
  fanout::test::file_write(dir / "theirs/tokenizer.json",
                           fanout::test::file_read(dir / "tok.json"));
  r = run_fanout(
      {"prepare", "--tokenizer", "byte", "--data", dir / "a.txt", "--out", dir / "theirs"},
      kTimeout);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "holds a tokenizer.json that is not --tokenizer's"));
  CHECK(!std::filesystem::exists(dir / "theirs/train.bin"));
  CHECK(fanout::test::file_read(dir / "theirs/tokenizer.json") ==
        fanout::test::file_read(dir / "tok.json"));
}

TEST_CASE("prepare reads JSON Lines: by name or --format, one document per line") {
  TempDir dir("fanout-cmd-prepare");
  std::vector<std::string> docs = fanout::data::default_corpus().train_documents;
  docs.resize(10);
  docs[3] += "\n\nwith a blank line inside";  // one document still
  std::string jsonl;
  for (const std::string& d : docs) {
    jsonl += nlohmann::json({{"id", jsonl.size()}, {"body", d}}).dump() + "\n";
  }
  fanout::test::file_write(dir / "c.jsonl", jsonl);
  fanout::test::file_write(dir / "c.json-lines", jsonl);
  auto by_name = run_fanout({"prepare", "--tokenizer", "byte", "--data", dir / "c.jsonl",
                             "--text-field", "body", "--out", dir / "a", "--val-fraction", "0.2"},
                            kTimeout);
  CAPTURE(by_name.err);
  REQUIRE(by_name.rc == 0);
  CHECK(has(by_name.out, "prepare: 10 documents (8 train, 2 val)"));
  auto by_flag =
      run_fanout({"prepare", "--tokenizer", "byte", "--data", dir / "c.json-lines", "--format",
                  "jsonl", "--text-field", "body", "--out", dir / "b", "--val-fraction", "0.2"},
                 kTimeout);
  REQUIRE(by_flag.rc == 0);
  CHECK(fanout::test::file_read(dir / "a/train.bin") ==
        fanout::test::file_read(dir / "b/train.bin"));
  // The documents are the "body" strings: their bytes between [BOT] and [EOT].
  const auto train =
      fanout::data::token_file_load(dir / "a/train.bin", {}, *fanout::data::byte_tokenizer());
  std::vector<int32_t> ids(static_cast<size_t>(train.token_count()));
  train.tokens_copy(0, train.token_count(), ids.data());
  std::vector<int32_t> first = {fanout::data::kBot};
  for (unsigned char c : docs[0]) first.push_back(c);
  first.push_back(fanout::data::kEot);
  CHECK(std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<long>(first.size())) == first);
  // --help says so.
  auto help = run_fanout({"prepare", "--help"}, kTimeout);
  CHECK(has(help.out, "--format"));
  CHECK(has(help.out, "--text-field"));
  CHECK(has(help.out, ".jsonl"));
}

TEST_CASE("prepare names a bad JSON Lines line as file:line, in one line") {
  TempDir dir("fanout-cmd-prepare");
  struct Case {
    std::string line, says;
  };
  const Case cases[] = {
      {"{\"text\": ", ":2: not valid JSON"},
      {"[1, 2]", ":2: a JSON array, not an object"},
      {"{\"txt\": \"a\"}", ":2: no \"text\" field"},
      {"{\"text\": {\"a\": 1}}", ":2: \"text\" holds an object, not a string"},
      {"{\"text\": " + std::string(100000, '[') + "}", ":2: JSON nested deeper than 512 levels"},
  };
  for (const Case& c : cases) {
    fanout::test::file_write(dir / "bad.jsonl", "{\"text\": \"fine\"}\n" + c.line + "\n");
    auto r = run_fanout(
        {"prepare", "--tokenizer", "byte", "--data", dir / "bad.jsonl", "--out", dir / "out"},
        kTimeout);
    CAPTURE(c.says);
    CAPTURE(r.err.substr(0, 300));
    CHECK(r.rc == 1);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, "fanout: error: " + dir / "bad.jsonl" + c.says));
    CHECK(!std::filesystem::exists(dir / "out"));
  }
  // A text file read as JSON Lines by --format, and a bad --format, a usage error.
  fanout::test::file_write(dir / "a.txt", "plain text\n");
  auto r = run_fanout({"prepare", "--tokenizer", "byte", "--data", dir / "a.txt", "--format",
                       "jsonl", "--out", dir / "out"},
                      kTimeout);
  CHECK(r.rc == 1);
  CHECK(has(r.err, dir / "a.txt" + ":1: not valid JSON"));
  r = run_fanout({"prepare", "--tokenizer", "byte", "--data", dir / "a.txt", "--format", "csv",
                  "--out", dir / "out"},
                 kTimeout);
  CHECK(r.rc == 2);
  CHECK(has(r.err, "--format"));
}
