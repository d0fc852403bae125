// `fanout tokenizer train` through the real binary: the tokenizer.json it writes
// loads back with the asked vocabulary and the reported special ids, the same
// input gives the same bytes, a terminal gets a bar and a pipe plain lines, JSON
// Lines train on their documents' text, and every bad input is one line and a
// non-zero exit.

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "apps/data/corpus.h"
#include "apps/data/text_tokenizer.h"
#include "apps/data/token_file.h"
#include "engine/core/file_io.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/command_util.h"
#include "tests/paths_util.h"

using fanout::test::has;
using fanout::test::run_fanout;
using fanout::test::TempDir;

namespace {

// About `bytes` of the embedded corpus as a text file (documents between blank lines).
void write_corpus(const std::string& path, size_t bytes) {
  std::string text;
  for (uint64_t seed = fanout::data::kDefaultCorpusSeed; text.size() < bytes; ++seed) {
    for (const std::string& doc : fanout::data::default_corpus(seed).train_documents) {
      if (!text.empty()) text += "\n\n";
      text += doc;
    }
  }
  fanout::file_write_atomic(path, text, "test");
}

std::vector<std::string> train_args(const std::string& data, const std::string& out,
                                    const std::string& vocab = "600") {
  return {"tokenizer", "train", "--data", data, "--vocab-size", vocab, "--out", out};
}

}  // namespace

TEST_CASE("tokenizer train writes a tokenizer.json that loads with the reported ids") {
  TempDir dir("fanout-tok");
  write_corpus(dir / "a.txt", 300000);
  write_corpus(dir / "b.txt", 100000);
  auto r = run_fanout({"tokenizer", "train", "--data", dir / "a.txt", dir / "b.txt", "--vocab-size",
                       "700", "--out", dir / "tokenizer.json"});
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.err.empty());
  CHECK(has(r.out, "trained 700 tokens (441 merges) on 1.0 MB in "));
  CHECK(has(r.out, "MB/s"));
  CHECK(has(r.out, "[BOT]=0 [EOT]=1 [PAD]=2"));
  CHECK(has(r.out, "counting"));  // plain progress lines: stdout is not a terminal
  auto tokenizer = fanout::data::tokenizer_load(dir / "tokenizer.json");
  CHECK(tokenizer->vocab_size() == 700);
  CHECK(tokenizer->bot() == 0);
  CHECK(tokenizer->eot() == 1);
  CHECK(tokenizer->pad() == 2);
  const std::string text = "One day, Emma went to the hill with Tom.";
  const std::vector<int32_t> ids = tokenizer->encode(text);
  CHECK(ids.size() < 15);
  CHECK(tokenizer->decode(ids) == text);
}

TEST_CASE("tokenizer train gives byte-identical files for the same input and overwrites") {
  TempDir dir("fanout-tok");
  write_corpus(dir / "a.txt", 200000);
  auto r1 = run_fanout(train_args(dir / "a.txt", dir / "one.json"));
  REQUIRE(r1.rc == 0);
  // An earlier tokenizer.json (a smaller one) is replaced; other files are not (test_cmd_outputs).
  REQUIRE(run_fanout(train_args(dir / "a.txt", dir / "two.json", "300")).rc == 0);
  auto r2 = run_fanout(train_args(dir / "a.txt", dir / "two.json"));
  REQUIRE(r2.rc == 0);
  const std::string one = fanout::file_read_regular(dir / "one.json");
  CHECK(one.size() > 1000);
  CHECK(one == fanout::file_read_regular(dir / "two.json"));
}

TEST_CASE("tokenizer train on JSON Lines learns the documents' text, not the JSON around it") {
  // It learned merges of '{"text": "' and '"}' from every line.
  TempDir dir("fanout-tok");
  std::string jsonl, text, other;
  for (uint64_t seed = fanout::data::kDefaultCorpusSeed; text.size() < 100000; ++seed) {
    for (const std::string& doc : fanout::data::default_corpus(seed).train_documents) {
      nlohmann::json line = {{"id", seed}, {"text", doc}};
      jsonl += line.dump() + "\n";
      other += nlohmann::json{{"body", doc}}.dump() + "\n";
      if (!text.empty()) text += "\n\n";
      text += doc;
    }
  }
  fanout::file_write_atomic(dir / "docs.jsonl", jsonl, "test");
  fanout::file_write_atomic(dir / "docs.txt", text, "test");
  fanout::file_write_atomic(dir / "other.data", other, "test");
  REQUIRE(run_fanout(train_args(dir / "docs.txt", dir / "from_text.json")).rc == 0);
  auto r = run_fanout(train_args(dir / "docs.jsonl", dir / "from_jsonl.json"));
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  const std::string from_text = fanout::file_read_regular(dir / "from_text.json");
  CHECK(from_text == fanout::file_read_regular(dir / "from_jsonl.json"));
  CHECK_FALSE(has(fanout::file_read_regular(dir / "from_jsonl.json"), "\\\"text"));
  // --format and --text-field as prepare takes them.
  auto args = train_args(dir / "other.data", dir / "from_other.json");
  for (const char* extra : {"--format", "jsonl", "--text-field", "body"}) args.push_back(extra);
  r = run_fanout(args);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(from_text == fanout::file_read_regular(dir / "from_other.json"));
  // A line without the field names itself and the flag, and nothing is written.
  r = run_fanout(train_args(dir / "other.data", dir / "none.json"));  // text by name: fine
  CHECK(r.rc == 0);
  args = train_args(dir / "other.data", dir / "missing.json");
  for (const char* extra : {"--format", "jsonl"}) args.push_back(extra);
  r = run_fanout(args);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err,
            "other.data:1: no \"text\" field (name the field that holds the text with "
            "--text-field)"));
  CHECK_FALSE(std::filesystem::exists(dir / "missing.json"));
  args.back() = "csv";
  r = run_fanout(args);
  CHECK(r.rc == 2);
  CHECK(has(r.err, "--format"));
}

TEST_CASE("tokenizer train with too little text says the vocabulary is smaller") {
  TempDir dir("fanout-tok");
  fanout::file_write_atomic(dir / "a.txt", "the cat and the hat", "test");
  auto r = run_fanout(train_args(dir / "a.txt", dir / "t.json", "8192"));
  CAPTURE(r.out);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "note: the text allows only"));
  CHECK(fanout::data::tokenizer_load(dir / "t.json")->vocab_size() < 8192);
}

TEST_CASE("tokenizer train draws a bar on a terminal") {
  if (fanout::test::shell("command -v script") != 0) return;  // util-linux's pty runner
  TempDir dir("fanout-tok");
  write_corpus(dir / "a.txt", 100000);
  const std::string log = dir / "pty.log";
  // In a subshell: shell() sends the command's own output to /dev/null.
  std::string cmd = "(timeout 60 script -qec \"" + fanout::test::fanout_binary() +
                    " tokenizer train --data " + (dir / "a.txt") + " --vocab-size 400 --out " +
                    (dir / "t.json") + "\" /dev/null </dev/null > " + log + " 2>&1)";
  REQUIRE(fanout::test::shell(cmd) == 0);
  const std::string out = fanout::file_read_regular(log);
  CAPTURE(out);
  CHECK(has(out, "\r\033[K"));  // redrawn in place
  CHECK(has(out, "] merging"));
  CHECK(has(out, "trained 400 tokens"));
}

TEST_CASE("tokenizer train refuses bad inputs with one line") {
  TempDir dir("fanout-tok");
  write_corpus(dir / "ok.txt", 20000);
  fanout::file_write_atomic(dir / "empty.txt", "", "test");
  fanout::data::token_file_write_bin(dir / "tokens.bin", {1, 2, 3});
  struct Case {
    std::vector<std::string> args;
    std::string message;
    int rc;
  };
  const std::string ok = dir / "ok.txt", out = dir / "t.json";
  const std::vector<Case> cases = {
      {train_args(dir / "missing.txt", out), "missing.txt: no such file", 1},
      {train_args(dir.path, out), "is a directory", 1},
      {train_args(dir / "empty.txt", out), "empty.txt: is empty", 1},
      {train_args(dir / "tokens.bin", out), "tokens.bin: is a token file, not text", 1},
      {train_args(ok, out, "258"), "--vocab-size: '258' is out of range (expected 260..16777216)",
       2},
      {train_args(ok, out, "-5"), "--vocab-size: '-5' is out of range (expected 260..", 2},
      {train_args(ok, out, "99999999999"), "--vocab-size: '99999999999' is out of range", 2},
      // The shared number rules: decimal only, nothing around the digits.
      {train_args(ok, out, "0x200"), "--vocab-size: '0x200' is not a whole number", 2},
      {train_args(ok, out, " 300"), "--vocab-size: ' 300' is not a whole number", 2},
      {train_args(ok, out, "1e3"), "--vocab-size: '1e3' is not a whole number", 2},
      {train_args(ok, out, "lots"), "--vocab-size", 2},
      {train_args(ok, dir / "no-such-folder/t.json"), "does not exist", 1},
      {train_args(ok, dir.path), "--out", 1},
      {{"tokenizer", "train", "--vocab-size", "300", "--out", out}, "--data", 2},
      {{"tokenizer", "train", "--data", ok}, "--out", 2},
      {{"tokenizer"}, "fanout tokenizer needs a command: train", 2},
      {{"tokenizer", "trian"}, "unknown command 'trian' for 'fanout tokenizer'", 2},
  };
  for (const Case& c : cases) {
    auto r = run_fanout(c.args);
    std::string args;
    for (const std::string& a : c.args) args += a + " ";
    CAPTURE(args);
    CAPTURE(r.err);
    CHECK(r.rc == c.rc);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, c.message));
  }
  CHECK(!fanout::test::has(fanout::file_read_regular(ok), "{"));  // inputs untouched
  CHECK(::access(out.c_str(), F_OK) != 0);                        // nothing half-written
}

TEST_CASE("tokenizer encode refuses bad inputs with one line") {
  TempDir dir("fanout-tok");
  fanout::file_write_atomic(dir / "text.txt", "hello", "test");
  fanout::file_write_atomic(dir / "bad.json", "{not json", "test");
  fanout::file_write_atomic(dir / "wordpiece.json", R"({"model": {"type": "WordPiece"}})", "test");
  struct Case {
    std::vector<std::string> args;
    std::string message;
    int rc;
  };
  const std::string text = dir / "text.txt";
  auto encode = [](std::vector<std::string> more) {
    more.insert(more.begin(), {"tokenizer", "encode"});
    return more;
  };
  const std::vector<Case> cases = {
      {encode({"--tokenizer", dir / "none.json", "--data", text}), "none.json: no such file", 1},
      {encode({"--tokenizer", dir / "bad.json", "--data", text}), "bad.json: not valid JSON", 1},
      {encode({"--tokenizer", dir / "wordpiece.json", "--data", text}),
       "model type 'WordPiece' is not supported (only BPE)", 1},
      {encode({"--tokenizer", "byte", "--data", dir / "none.txt"}), "none.txt: no such file", 1},
      {encode({"--tokenizer", "byte", "--data", dir.path}), "is a directory", 1},
      {encode({"--tokenizer", "byte", "--data", text, "--write-tokenizer", dir / "no/t.json"}),
       "does not exist", 1},
      {encode({"--data", text}), "--tokenizer is required", 2},
      {encode({"--tokenizer", "byte"}), "--data is required", 2},
  };
  for (const Case& c : cases) {
    auto r = run_fanout(c.args);
    std::string args;
    for (const std::string& a : c.args) args += a + " ";
    CAPTURE(args);
    CAPTURE(r.err);
    CHECK(r.rc == c.rc);
    CHECK(r.out.empty());
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, c.message));
  }
}

TEST_CASE("tokenizer train reads --vocab-size as decimal, leading zeros included") {
  // CLI11 alone converts with base 0: "0400" would be octal 256 (below the minimum).
  TempDir dir("fanout-tok-zeros");
  write_corpus(dir / "a.txt", 100000);
  auto r = run_fanout(train_args(dir / "a.txt", dir / "t.json", "0400"));
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "trained 400 tokens (141 merges)"));
}

TEST_CASE("tokenizer train off a terminal reports every tenth of the merges and the last count") {
  TempDir dir("fanout-tok-progress");
  write_corpus(dir / "a.txt", 300000);
  auto r = run_fanout(train_args(dir / "a.txt", dir / "t.json", "1000"));  // 741 merges
  CAPTURE(r.out);
  REQUIRE(r.rc == 0);
  std::vector<long> done;
  for (size_t at = r.out.find("merging "); at != std::string::npos;
       at = r.out.find("merging ", at + 1)) {
    done.push_back(std::stol(r.out.substr(at + 8)));
    CHECK(has(r.out.substr(at, r.out.find('\n', at) - at), " of 741 merges"));
  }
  // The start, about every 74 merges (progress comes every 64), and the end.
  REQUIRE(done.size() >= 8);
  CHECK(done.size() <= 12);
  CHECK(done.front() == 0);
  CHECK(done.back() == 741);
  CHECK(std::is_sorted(done.begin(), done.end()));
  CHECK(std::adjacent_find(done.begin(), done.end()) == done.end());  // no line twice
  CHECK(has(r.out, "trained 1000 tokens (741 merges)"));
}
