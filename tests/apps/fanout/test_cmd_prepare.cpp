// `fanout prepare` through the real binary: one summary line and the two token
// files; every bad input one line on stderr and a non-zero exit.

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "apps/data/bpe_trainer.h"
#include "apps/data/corpus.h"
#include "apps/data/token_file.h"
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
