// What the commands that create files may write over (Note [Replacing an existing
// output] in engine/core/file_io.h), through the binary: never one of their inputs,
// whatever name reaches it (the path, a symlink, a hard link), including the files
// plot and report read from a run directory by themselves; over an existing file only
// when it is empty or of the kind they write; and an empty value for a text flag is
// a usage error, not "not given". Each refusal is one line and changes nothing.

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "apps/data/bpe_trainer.h"
#include "apps/data/corpus.h"
#include "apps/data/token_file.h"
#include "engine/core/file_io.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/file_limit_util.h"

using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

std::string corpus_text(size_t documents) {
  const std::vector<std::string> docs = fanout::data::default_corpus().train_documents;
  std::string text;
  for (size_t i = 0; i < documents; ++i) text += (text.empty() ? "" : "\n\n") + docs[i];
  return text;
}

void bpe_write(const std::string& path) {
  fanout::data::BpeTrainOptions options;
  options.vocab_size = 300;
  auto tok =
      fanout::data::bpe_tokenizer(fanout::data::bpe_train_texts({corpus_text(50)}, options), path);
  fanout::file_write_atomic(path, tok->to_json(), "test");
}

// A run directory as plot and report read it: metrics, a trace, a bench result and
// a checkpoint's state.
void make_run(const std::string& dir) {
  fs::create_directories(dir + "/final");
  file_write(dir + "/metrics.jsonl", "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"loss\":2.0}\n");
  file_write(dir + "/trace.json", "{\"traceEvents\": []}\n");
  file_write(dir + "/bench-cpu.json", "{\"results\": []}\n");
  file_write(dir + "/final/trainer_state.json", "{\"flags\": {}, \"step\": 2}\n");
}

struct Refusal {
  std::vector<std::string> args;
  std::string message;
};

// Each command fails with one line holding `message`, and no file changes.
void check_refusals(const std::string& dir, const std::vector<Refusal>& cases, int rc = 1) {
  std::vector<std::pair<std::string, std::string>> before;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) before.emplace_back(e.path().string(), file_read(e.path().string()));
  }
  for (const Refusal& c : cases) {
    std::string args;
    for (const std::string& a : c.args) args += a + " ";
    CAPTURE(args);
    const CliResult r = run_fanout(c.args);
    CAPTURE(r.err);
    CHECK(r.rc == rc);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, c.message));
    for (const auto& [path, bytes] : before) CHECK(file_read(path) == bytes);
    CHECK(temp_leftovers(dir).empty());
  }
}
}  // namespace

TEST_CASE("plot and report never write over a file they read, by any name") {
  TempDir tmp("fanout-outputs");
  const std::string run = tmp / "run";
  make_run(run);
  fs::create_symlink(run + "/metrics.jsonl", tmp / "soft.svg");
  REQUIRE(::link((run + "/metrics.jsonl").c_str(), (tmp / "hard.html").c_str()) == 0);
  file_write(tmp / "bench.json", "{\"results\": []}\n");
  const std::string same = " is the same file as the input ";
  std::vector<Refusal> cases;
  for (const char* cmd : {"plot", "report"}) {
    for (const std::string& input : {run + "/metrics.jsonl", run + "/trace.json",
                                     run + "/bench-cpu.json", run + "/final/trainer_state.json"}) {
      cases.push_back({{cmd, run, "--out", input}, "--out " + input + same + input});
    }
    cases.push_back({{cmd, run, "--out", tmp / "soft.svg"}, same + run + "/metrics.jsonl"});
    cases.push_back({{cmd, run, "--out", tmp / "hard.html"}, same + run + "/metrics.jsonl"});
  }
  cases.push_back({{"report", run, "--bench", tmp / "bench.json", "--out", tmp / "bench.json"},
                   "--out " + (tmp / "bench.json") + same + (tmp / "bench.json")});
  check_refusals(tmp.path, cases);
}

TEST_CASE("plot and report replace only an empty file or one of their own outputs") {
  TempDir tmp("fanout-outputs");
  const std::string run = tmp / "run";
  fs::create_directories(run);
  file_write(run + "/metrics.jsonl", "{\"step\":1,\"loss\":2.5}\n");
  file_write(tmp / "notes.txt", "my notes\n");
  file_write(tmp / "mine.svg", "<svg xmlns='http://www.w3.org/2000/svg'/>\n");
  REQUIRE(run_fanout({"plot", run, "--out", tmp / "plot.svg"}).rc == 0);
  REQUIRE(run_fanout({"report", run, "--out", tmp / "page.html"}).rc == 0);
  check_refusals(
      tmp.path,
      {{{"plot", run, "--out", tmp / "notes.txt"},
        "--out " + (tmp / "notes.txt") + ": exists and is not an SVG written by fanout"},
       {{"plot", run, "--out", tmp / "mine.svg"}, "is not an SVG written by fanout"},
       {{"plot", run, "--out", tmp / "page.html"}, "is not an SVG written by fanout"},
       {{"report", run, "--out", tmp / "notes.txt"}, "is not an HTML page written by fanout"},
       {{"report", run, "--out", tmp / "plot.svg"}, "is not an HTML page written by fanout"}});
  // Their own earlier outputs, and an empty file, are replaced.
  file_write(tmp / "empty.svg", "");
  for (const std::string& out : {tmp / "plot.svg", tmp / "empty.svg"}) {
    const CliResult r = run_fanout({"plot", run, "--out", out, "--title", "again"});
    CAPTURE(r.err);
    CHECK(r.rc == 0);
    CHECK(has(file_read(out), "again"));
  }
  const CliResult r = run_fanout({"report", run, "--out", tmp / "page.html", "--title", "again"});
  CAPTURE(r.err);
  CHECK(r.rc == 0);
  CHECK(has(file_read(tmp / "page.html"), "<title>again</title>"));
}

TEST_CASE("tokenizer train, tokenizer encode and prepare never write over an input") {
  TempDir tmp("fanout-outputs");
  const std::string text = tmp / "text.txt", tok = tmp / "tok.json";
  file_write(text, corpus_text(30));
  bpe_write(tok);
  fs::create_directories(tmp / "out");
  file_write(tmp / "out/train.bin", corpus_text(30));  // text that happens to be named so
  fs::create_directories(tmp / "linked");
  REQUIRE(::link(text.c_str(), (tmp / "linked/val.bin").c_str()) == 0);
  const std::string same = " is the same file as the input ";
  check_refusals(
      tmp.path,
      {{{"tokenizer", "train", "--data", text, "--vocab-size", "300", "--out", text},
        "--out " + text + same + text},
       {{"tokenizer", "encode", "--tokenizer", tok, "--data", text, "--write-tokenizer", text},
        "--write-tokenizer " + text + same + text},
       {{"tokenizer", "encode", "--tokenizer", tok, "--data", text, "--write-tokenizer", tok},
        "--write-tokenizer " + tok + same + tok},
       {{"prepare", "--tokenizer", tok, "--data", tmp / "out/train.bin", "--out", tmp / "out"},
        "--out " + (tmp / "out/train.bin") + same + (tmp / "out/train.bin")},
       {{"prepare", "--tokenizer", tok, "--data", text, "--out", tmp / "linked"},
        "--out " + (tmp / "linked/val.bin") + same + text}});
}

TEST_CASE("tokenizer train and prepare replace only a tokenizer.json or a token file") {
  TempDir tmp("fanout-outputs");
  const std::string text = tmp / "text.txt", tok = tmp / "tok.json";
  file_write(text, corpus_text(30));
  bpe_write(tok);
  file_write(tmp / "notes.txt", "my notes\n");
  fs::create_directories(tmp / "out");
  file_write(tmp / "out/val.bin", "my validation notes\n");
  check_refusals(
      tmp.path,
      {{{"tokenizer", "train", "--data", text, "--vocab-size", "300", "--out", tmp / "notes.txt"},
        "--out " + (tmp / "notes.txt") + ": exists and is not a tokenizer.json"},
       {{"tokenizer", "encode", "--tokenizer", "byte", "--data", text, "--write-tokenizer",
         tmp / "notes.txt"},
        "--write-tokenizer " + (tmp / "notes.txt") + ": exists and is not a tokenizer.json"},
       {{"prepare", "--tokenizer", tok, "--data", text, "--out", tmp / "out"},
        "--out " + (tmp / "out/val.bin") + ": exists and is not an llm.c token file"}});
  // A tokenizer.json and token files written before are replaced.
  fs::remove(tmp / "out/val.bin");
  for (int i = 0; i < 2; ++i) {
    const CliResult r =
        run_fanout({"prepare", "--tokenizer", tok, "--data", text, "--out", tmp / "out"});
    CAPTURE(r.err);
    CHECK(r.rc == 0);
  }
  const CliResult r = run_fanout(
      {"tokenizer", "encode", "--tokenizer", "byte", "--data", text, "--write-tokenizer", tok});
  CAPTURE(r.err);
  CHECK(r.rc == 0);
  CHECK(has(file_read(tok), "\"model\""));
}

TEST_CASE("an empty value for a text flag is a usage error, not the flag left out") {
  TempDir tmp("fanout-outputs");
  const std::string run = tmp / "run", text = tmp / "text.txt";
  make_run(run);
  file_write(text, "hello");
  const std::string empty = ": an empty value is not allowed";
  check_refusals(
      tmp.path,
      {{{"plot", run, "--out", tmp / "p.svg", "--labels", ""}, "--labels" + empty},
       {{"plot", run, "--out", tmp / "p.svg", "--title", ""}, "--title" + empty},
       {{"plot", run, "--out", tmp / "p.svg", "--metric", ""}, "--metric" + empty},
       {{"report", run, "--out", tmp / "r.html", "--labels", ""}, "--labels" + empty},
       {{"report", run, "--out", tmp / "r.html", "--title", ""}, "--title" + empty},
       {{"report", run, "--out", tmp / "r.html", "--bench", ""}, "--bench" + empty},
       {{"tokenizer", "encode", "--tokenizer", "byte", "--data", text, "--write-tokenizer", ""},
        "--write-tokenizer" + empty}},
      2);
}
