// JSON nested 100,000 deep wherever fanout reads a user's JSON through a command:
// one line naming the file and the bound, never a crash (it was SIGSEGV while an
// error message was built). Report and plot inputs: test_cmd_report.cpp / _plot.

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout::test;
using nlohmann::json;

namespace {
namespace fs = std::filesystem;

const std::string kDeep = std::string(100000, '[') + std::string(100000, ']');
const std::string kBound = "JSON nested deeper than 512 levels (at byte ";

// `j` dumped with the value at `at` (a JSON pointer) replaced by 100,000 nested arrays.
std::string with_deep(json j, const std::string& at) {
  j[json::json_pointer(at)] = "@@deep@@";
  std::string text = j.dump();
  return text.replace(text.find("\"@@deep@@\""), 10, kDeep);
}

void check_refused(const CliResult& r, const std::string& file) {
  INFO("rc " << r.rc << " stderr: " << r.err);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.rfind("fanout: error: " + file + ": " + kBound, 0) == 0);
}
}  // namespace

TEST_CASE("a tokenizer.json field nested 100,000 deep is refused in one line") {
  TempDir dir("fanout-deep-tok");
  file_write(dir / "text.txt", "a few words to encode, a few more words\n");
  REQUIRE(run_fanout({"tokenizer", "train", "--data", dir / "text.txt", "--vocab-size", "262",
                      "--out", dir / "good.json"})
              .rc == 0);
  const json good = json::parse(file_read(dir / "good.json"));
  const std::string vocab_key = good["model"]["vocab"].begin().key();
  for (const std::string& at : std::vector<std::string>{
           "/normalizer", "/truncation", "/model/dropout", "/model/vocab/" + vocab_key,
           "/model/merges/0", "/added_tokens/0/special"}) {
    CAPTURE(at);
    file_write(dir / "t.json", with_deep(good, at));
    check_refused(run_fanout({"tokenizer", "encode", "--tokenizer", dir / "t.json", "--data",
                              dir / "text.txt"}),
                  dir / "t.json");
  }
}

TEST_CASE("a checkpoint's tokenizer.json or safetensors index nested too deep is refused") {
  TempDir dir("fanout-deep-ckpt");
  const std::string ckpt = dir / "ckpt";
  fs::create_directory(ckpt);
  checkpoint_write(ckpt, cli_test_config());
  file_write(dir / "text.txt", "The quick brown fox jumps over the lazy dog, twice over.\n");
  const std::vector<std::string> eval = {"eval",   "--checkpoint",   ckpt,
                                         "--data", dir / "text.txt", "--batch-size",
                                         "1",      "--seq-len",      "8"};
  // eval reads the checkpoint's tokenizer.json to encode text data.
  file_write(ckpt + "/tokenizer.json", "{\"model\": " + kDeep + "}");
  check_refused(run_fanout(eval), ckpt + "/tokenizer.json");
  fs::remove(ckpt + "/tokenizer.json");

  // A sharded checkpoint: the index names each tensor's shard.
  fs::remove(ckpt + "/model.safetensors");
  file_write(ckpt + "/model.safetensors.index.json",
             with_deep(json{{"weight_map", {{"model.norm.weight", "x"}}}},
                       "/weight_map/model.norm.weight"));
  check_refused(run_fanout(eval), ckpt + "/model.safetensors.index.json");
}
