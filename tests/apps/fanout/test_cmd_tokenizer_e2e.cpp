// A user's tokenizer end to end through the real binary: prepare -> train (the
// small preset, from the .bin files) -> a checkpoint carrying tokenizer.json ->
// eval and generate encoding and decoding with it; old checkpoints without one
// fall back to bytes; mismatches are one line; printed text has no raw controls.

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "apps/data/bpe_trainer.h"
#include "apps/data/corpus.h"
#include "apps/data/terminal_text.h"
#include "apps/data/token_file.h"
#include "apps/data/tokenizer.h"
#include "engine/core/file_io.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"

using fanout::test::file_read;
using fanout::test::file_write;
using fanout::test::has;
using fanout::test::last_json_line;
using fanout::test::run_fanout;
using fanout::test::TempDir;

namespace {
constexpr const char* kTimeout = "timeout -k 5 120";  // bounds every run

std::string corpus_text(size_t first, size_t documents) {
  std::vector<std::string> docs = fanout::data::default_corpus().train_documents;
  std::string text;
  for (size_t i = first; i < first + documents; ++i) {
    text += (text.empty() ? "" : "\n\n") + docs[i];
  }
  return text;
}

std::shared_ptr<const fanout::data::TextTokenizer> bpe_write(const std::string& path,
                                                             int64_t vocab) {
  fanout::data::BpeTrainOptions options;
  options.vocab_size = vocab;
  auto tok = fanout::data::bpe_tokenizer(
      fanout::data::bpe_train_texts({corpus_text(0, 200)}, options), path);
  fanout::file_write_atomic(path, tok->to_json(), "test");
  return tok;
}

// Nothing below 0x20 but '\n' and '\t', no DEL, and valid UTF-8 without C1 controls:
// the output escaped is the output.
bool printable(const std::string& out) {
  for (char c : out) {
    const unsigned char u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) return false;
  }
  return fanout::data::terminal_text_escape(out) == out;
}
}  // namespace

TEST_CASE("prepare, train --tokenizer, eval and generate use the user's tokenizer") {
  TempDir dir("fanout-tok-e2e");
  auto tok = bpe_write(dir / "tok.json", 400);
  file_write(dir / "data.txt", corpus_text(0, 120));
  auto prep = run_fanout({"prepare", "--tokenizer", dir / "tok.json", "--data", dir / "data.txt",
                          "--out", dir / "prep", "--val-fraction", "0.1"},
                         kTimeout);
  REQUIRE(prep.rc == 0);

  auto train = run_fanout({"train",
                           "--preset",
                           "small",
                           "--data",
                           dir / "prep/train.bin",
                           "--val-data",
                           dir / "prep/val.bin",
                           "--tokenizer",
                           dir / "tok.json",
                           "--devices",
                           "cpu:0,cpu:1",
                           "--batch-size",
                           "2",
                           "--seq-len",
                           "32",
                           "--steps",
                           "3",
                           "--warmup",
                           "0",
                           "--eval-every",
                           "0",
                           "--out",
                           dir / "run"},
                          kTimeout);
  CAPTURE(train.out);
  CAPTURE(train.err);
  REQUIRE(train.rc == 0);
  CHECK(has(train.out, "tokenizer: " + tok->describe()));
  CHECK(has(train.out, "sample:"));
  CHECK(printable(train.out));
  // The checkpoint is an HF model folder with its tokenizer.
  const std::string ckpt = dir / "run/final";
  REQUIRE(std::filesystem::exists(ckpt + "/tokenizer.json"));
  CHECK(fanout::data::tokenizer_load(ckpt + "/tokenizer.json")->to_json() == tok->to_json());

  // eval encodes a text file with the checkpoint's tokenizer: the same loss as the
  // tokens written by hand.
  file_write(dir / "held.txt", corpus_text(300, 20));
  fanout::data::token_file_write_bin(
      dir / "held.bin", fanout::data::token_file_load(dir / "held.txt", {}, *tok).tokens);
  auto eval_text = run_fanout({"eval", "--checkpoint", ckpt, "--data", dir / "held.txt",
                               "--batch-size", "2", "--seq-len", "32", "--max-batches", "3"},
                              kTimeout);
  auto eval_bin = run_fanout({"eval", "--checkpoint", ckpt, "--data", dir / "held.bin",
                              "--batch-size", "2", "--seq-len", "32", "--max-batches", "3"},
                             kTimeout);
  CAPTURE(eval_text.err);
  REQUIRE(eval_text.rc == 0);
  REQUIRE(eval_bin.rc == 0);
  CHECK(has(eval_text.out, "eval: loss "));
  CHECK(eval_text.out == eval_bin.out);

  // generate: the prompt encodes with the BPE, the ids decode with it.
  const std::string prompt = "The little fox";
  auto gen = run_fanout(
      {"generate", "--checkpoint", ckpt, "--prompt", prompt, "--max-new-tokens", "12", "--json"},
      kTimeout);
  CAPTURE(gen.err);
  REQUIRE(gen.rc == 0);
  const nlohmann::json j = last_json_line(gen.out);
  std::vector<int32_t> want = {tok->bot()};
  for (int32_t id : tok->encode(prompt)) want.push_back(id);
  CHECK(j["prompt_ids"].get<std::vector<int32_t>>() == want);
  CHECK(want.size() < prompt.size());  // merged: not one id per byte
  const std::vector<int32_t> ids = j["ids"].get<std::vector<int32_t>>();
  CHECK(j["text"].get<std::string>() == tok->decode(ids));
  auto plain = run_fanout(
      {"generate", "--checkpoint", ckpt, "--prompt", prompt, "--max-new-tokens", "12"}, kTimeout);
  REQUIRE(plain.rc == 0);
  CHECK(plain.out == fanout::data::terminal_text_escape(prompt + tok->decode(ids)) + "\n");

  // A resumed run keeps the checkpoint's tokenizer: another one is refused.
  bpe_write(dir / "other.json", 300);
  auto other = run_fanout({"train", "--resume", ckpt, "--tokenizer", dir / "other.json", "--steps",
                           "4", "--devices", "cpu:0"},
                          kTimeout);
  CAPTURE(other.err);
  CHECK(other.rc == 1);
  CHECK(other.err_lines() == 1);
  CHECK(has(other.err, "is not the tokenizer checkpoint " + ckpt + " was trained with"));
}

TEST_CASE("a tokenizer larger than the model's vocabulary is refused with one line") {
  TempDir dir("fanout-tok-e2e");
  bpe_write(dir / "tok.json", 400);
  file_write(dir / "data.txt", corpus_text(0, 20));
  const std::string tok = dir / "tok.json";
  auto r = run_fanout({"train", "--data", dir / "data.txt", "--tokenizer", tok, "--steps", "1"},
                      kTimeout);
  CAPTURE(r.err);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, tok + " has 400 tokens but the preset 'tiny' has 259: use --preset small or a "
                         "config with vocab_size >= 400"));
  // A config names itself.
  fanout::models::LlamaConfig c = fanout::test::cli_test_config();
  c.vocab_size = 300;
  fanout::models::llama_config_save(c, dir / "config.json");
  r = run_fanout({"train", "--config", dir / "config.json", "--data", dir / "data.txt",
                  "--tokenizer", tok, "--steps", "1"},
                 kTimeout);
  CHECK(r.rc == 1);
  CHECK(has(r.err, "but the config " + dir / "config.json" +
                       " has vocab_size 300: use a config with vocab_size >= 400"));
}

TEST_CASE("text data with --tokenizer trains on its encoding, checkpoints without one use bytes") {
  TempDir dir("fanout-tok-e2e");
  auto tok = bpe_write(dir / "tok.json", 400);
  file_write(dir / "data.txt", corpus_text(0, 40));
  fanout::models::LlamaConfig c = fanout::test::cli_test_config();
  c.vocab_size = 400;
  fanout::models::llama_config_save(c, dir / "config.json");
  const int64_t tokens = fanout::data::token_file_load(dir / "data.txt", {}, *tok).token_count();
  auto r =
      run_fanout({"train", "--config", dir / "config.json", "--data", dir / "data.txt",
                  "--tokenizer", dir / "tok.json", "--steps", "2", "--batch-size", "2", "--seq-len",
                  "32", "--devices", "cpu:0", "--out", dir / "run", "--packing", "off"},
                 kTimeout);
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  const std::string count = std::to_string(tokens);
  CHECK(has(r.out, std::string("(").append(count).append(" tokens)")));
  CHECK(file_read(dir / "run/final/tokenizer.json") == tok->to_json());

  // A checkpoint from before tokenizers (no tokenizer.json): bytes, BOT first.
  std::filesystem::create_directories(dir / "old");
  fanout::test::checkpoint_write(dir / "old", fanout::test::cli_test_config());
  REQUIRE(!std::filesystem::exists(dir / "old/tokenizer.json"));
  auto gen = run_fanout({"generate", "--checkpoint", dir / "old", "--prompt", "hi",
                         "--max-new-tokens", "2", "--json"},
                        kTimeout);
  REQUIRE(gen.rc == 0);
  CHECK(last_json_line(gen.out)["prompt_ids"].get<std::vector<int32_t>>() ==
        std::vector<int32_t>{fanout::data::kBot, 'h', 'i'});
  // A byte run writes the byte tokenizer's tokenizer.json.
  r = run_fanout(
      {"train", "--config", dir / "old/config.json", "--data", dir / "data.txt", "--steps", "1",
       "--batch-size", "2", "--seq-len", "32", "--devices", "cpu:0", "--out", dir / "bytes"},
      kTimeout);
  REQUIRE(r.rc == 0);
  CHECK(file_read(dir / "bytes/final/tokenizer.json") == fanout::data::byte_tokenizer()->to_json());
}

TEST_CASE("generated text never reaches the output with raw control bytes") {
  TempDir dir("fanout-tok-e2e");
  // An untrained byte model at a high temperature samples nearly uniformly over 259
  // ids: control bytes and broken UTF-8 are all but certain in 50 tokens.
  std::filesystem::create_directories(dir / "ckpt");
  fanout::test::checkpoint_write(dir / "ckpt", fanout::test::cli_test_config());
  const std::vector<std::string> args = {"generate",
                                         "--checkpoint",
                                         dir / "ckpt",
                                         "--prompt",
                                         "\x1b[31mred\x07",
                                         "--max-new-tokens",
                                         "50",
                                         "--temperature",
                                         "50",
                                         "--seed",
                                         "7"};
  auto r = run_fanout(args, kTimeout);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(printable(r.out));
  CHECK(r.out.rfind("\\x1b[31mred\\x07", 0) == 0);
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  auto j = run_fanout(json_args, kTimeout);
  REQUIRE(j.rc == 0);
  const std::vector<int32_t> ids = last_json_line(j.out)["ids"].get<std::vector<int32_t>>();
  // The test means something only if raw controls were sampled.
  CHECK(std::any_of(ids.begin(), ids.end(), [](int32_t id) { return id < 0x20 && id != '\n'; }));
}
