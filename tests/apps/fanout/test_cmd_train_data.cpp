// What `fanout train` makes of its data, through the real binary: the tokenizer
// `fanout prepare` left beside token files (taken, or a different one refused),
// the held-out split of --data when no --val-data is given (said, kept on resume,
// compared with the data's own unigram entropy), and an end-of-run sample that is
// empty saying why. eval refuses token files prepared with another tokenizer than
// its checkpoint's.

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/data/bpe_trainer.h"
#include "apps/data/corpus.h"
#include "apps/data/held_out.h"
#include "apps/data/text_tokenizer.h"
#include "apps/data/token_file.h"
#include "apps/data/tokenizer.h"
#include "engine/core/file_io.h"
#include "models/llama_checkpoint.h"
#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
namespace fs = std::filesystem;
constexpr const char* kTimeout = "timeout -k 5 120";  // bounds every run

std::string corpus_text(size_t documents) {
  std::vector<std::string> docs = data::default_corpus().train_documents;
  std::string text;
  for (size_t i = 0; i < documents; ++i) text += (text.empty() ? "" : "\n\n") + docs[i];
  return text;
}

std::shared_ptr<const data::TextTokenizer> bpe_write(const std::string& path, int64_t vocab) {
  data::BpeTrainOptions options;
  options.vocab_size = vocab;
  auto tok = data::bpe_tokenizer(data::bpe_train_texts({corpus_text(200)}, options), path);
  file_write_atomic(path, tok->to_json(), "test");
  return tok;
}

CliResult train(std::vector<std::string> args) {
  args.insert(args.begin(), "train");
  return run_fanout(args, kTimeout);
}

// The number after `prefix` in `text` (-1 if absent).
int64_t number_after(const std::string& text, const std::string& prefix) {
  const size_t at = text.find(prefix);
  return at == std::string::npos ? -1 : std::stoll(text.substr(at + prefix.size()));
}

}  // namespace

// --- the tokenizer beside token files ----------------------------------------------

TEST_CASE("train takes the tokenizer prepare left beside the token files, refuses another") {
  TempDir dir("fanout-train-data");
  const auto tok = bpe_write(dir / "tok.json", 400);
  bpe_write(dir / "other.json", 300);
  file_write(dir / "a.txt", corpus_text(60));
  REQUIRE(run_fanout({"prepare", "--tokenizer", dir / "tok.json", "--data", dir / "a.txt", "--out",
                      dir / "prep", "--val-fraction", "0.2"},
                     kTimeout)
              .rc == 0);
  models::LlamaConfig c = cli_test_config();
  c.vocab_size = 400;
  models::llama_config_save(c, dir / "config.json");
  const std::string bin = dir / "prep/train.bin", beside = dir / "prep/tokenizer.json";
  auto args = [&](const std::string& data, std::vector<std::string> extra) {
    std::vector<std::string> a = {"--config",     dir / "config.json",
                                  "--data",       data,
                                  "--devices",    "cpu:0",
                                  "--batch-size", "2",
                                  "--seq-len",    "32",
                                  "--steps",      "2",
                                  "--eval-every", "0"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };

  // No --tokenizer: the one beside, said in one line, carried by the checkpoint.
  CliResult r = train(args(bin, {"--val-data", dir / "prep/val.bin", "--out", dir / "run"}));
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "tokenizer: " + tok->describe() + " (" + beside +
                       ", the one the data was prepared with)\n"));
  REQUIRE(fs::exists(dir / "run/final/tokenizer.json"));
  CHECK(data::tokenizer_load(dir / "run/final/tokenizer.json")->to_json() == tok->to_json());
  // The sample decodes with it: no id printed as <id> (past the byte tokenizer).
  CHECK(!has(r.out.substr(r.out.find("sample:")), "<"));

  // Another tokenizer (or bytes) named with --tokenizer: one line, nothing written.
  for (const std::string& other : {dir / "other.json", std::string("byte")}) {
    r = train(args(bin, {"--tokenizer", other, "--out", dir / "refused"}));
    CAPTURE(r.err);
    CHECK(r.rc == 1);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, "--tokenizer " + other));
    CHECK(has(r.err, "is not the tokenizer " + bin + " was prepared with (" + beside));
    CHECK(!fs::exists(dir / "refused"));
  }
  // The same tokenizer through another path is the same tokenizer.
  r = train(args(bin, {"--tokenizer", dir / "tok.json", "--out", dir / "same"}));
  CHECK(r.rc == 0);
  // --val-data prepared with another tokenizer than --data.
  REQUIRE(run_fanout({"prepare", "--tokenizer", "byte", "--data", dir / "a.txt", "--out",
                      dir / "bytes", "--val-fraction", "0.2"},
                     kTimeout)
              .rc == 0);
  r = train(args(bin, {"--val-data", dir / "bytes/val.bin", "--out", dir / "refused"}));
  CAPTURE(r.err);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "--val-data " + dir / "bytes/val.bin" + " was prepared with another tokenizer"));

  // Token files with nothing beside them (llm.c's, older fanout's) train as before.
  fs::create_directories(dir / "legacy");
  fs::copy_file(bin, dir / "legacy/train.bin");
  r = train(args(dir / "legacy/train.bin", {"--out", dir / "legacy_run"}));
  CAPTURE(r.err);
  CHECK(r.rc == 0);
  CHECK(!has(r.out, "tokenizer:"));
  CHECK(data::tokenizer_load(dir / "legacy_run/final/tokenizer.json")->is_byte());
  // train takes the tokenizer names prepare and tokenizer encode take.
  r = train(args(dir / "legacy/train.bin", {"--tokenizer", "byte", "--out", dir / "byte_run"}));
  CAPTURE(r.err);
  CHECK(r.rc == 0);

  // eval holds the checkpoint's tokenizer against the one beside the token file too.
  auto eval = [&](const std::string& checkpoint, const std::string& data) {
    return run_fanout({"eval", "--checkpoint", checkpoint, "--data", data, "--batch-size", "1",
                       "--seq-len", "16", "--max-batches", "2"},
                      kTimeout);
  };
  r = eval(dir / "run/final", dir / "prep/val.bin");
  CAPTURE(r.err);
  CHECK(r.rc == 0);
  r = eval(dir / "run/final", dir / "bytes/val.bin");
  CAPTURE(r.err);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "--data " + dir / "bytes/val.bin" + " was prepared with " +
                       dir / "bytes/tokenizer.json (byte)"));
  CHECK(has(r.err, "not the tokenizer checkpoint " + dir / "run/final" + " was trained with"));
  CHECK(has(r.err, "evaluate on data prepared with the checkpoint's tokenizer\n"));
  CHECK(!has(r.out, "loss"));
  // A checkpoint of bytes over the legacy copy (nothing beside it) evaluates as before.
  r = eval(dir / "legacy_run/final", dir / "legacy/train.bin");
  CAPTURE(r.err);
  CHECK(r.rc == 0);
}

// --- the held-out split of --data --------------------------------------------------

TEST_CASE("train --data alone holds out its last tokens, says so, and resumes with them") {
  TrainFiles f;
  const std::string run = f.dir / "run";
  const std::vector<std::string> base = {
      "--config",     f.config, "--data",    f.data, "--devices",    "cpu:0", "--steps", "4",
      "--batch-size", "4",      "--seq-len", "16",   "--save-every", "2",     "--json"};
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--eval-every", "2", "--out", run});
  CliResult r = train(args);
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  // What the file holds, and what 5% of it is.
  data::TokenData all = data::token_file_load(f.data);
  const int64_t total = all.token_count();
  const int64_t held = number_after(r.out, "held out the last ");
  CHECK(has(r.out, "| data " + f.data + " (" + std::to_string(total) + " tokens) |"));
  CHECK(has(r.out, "of " + f.data +
                       " for the held-out loss, not trained on (--val-data FILE "
                       "overrides; --val-split 0 trains on all)"));
  const int64_t want = data::held_out_count(total, 0.05);
  CHECK(held <= want);
  CHECK(held > want / 2);
  // The held-out loss is measured at --eval-every and at the end.
  int evals = 0;
  for (const nlohmann::json& j : metrics_read(run + "/metrics.jsonl"))
    evals += j.contains("val_loss");
  CHECK(evals == 2);
  // The end-of-run line compares with this data's own unigram entropy.
  data::TokenData heldout = data::token_data_hold_out(all, want);
  REQUIRE(heldout.token_count() == held);
  const double entropy = data::token_data_unigram_entropy(all, total);
  const nlohmann::json summary = last_json_line(r.out);
  REQUIRE(summary.contains("unigram_entropy"));
  CHECK(std::abs(summary["unigram_entropy"].get<double>() - entropy) < 1e-9);
  CHECK(has(r.out, "for the unigram entropy of " + f.data + " (a model that ignores context)"));
  CHECK(entropy < 3.5);  // words, not the embedded corpus's 3.27 nor ln 259

  // Resumed from step 2: the same split, so the same held-out losses after it;
  // another --val-split given again is said and ignored.
  CliResult again = train(
      {"--resume", run + "/step-000002", "--devices", "cpu:0", "--json", "--val-split", "0.2"});
  CAPTURE(again.out);
  CAPTURE(again.err);
  REQUIRE(again.rc == 0);
  CHECK(number_after(again.out, "held out the last ") == held);
  CHECK(has(again.out,
            "note: --val-split 0.2 is ignored: a resumed run keeps the held-out "
            "split it started with (0.05)"));
  CHECK(last_json_line(again.out)["val_loss"] == summary["val_loss"]);
}

TEST_CASE("train and eval read a .jsonl --data as its documents, as the same text file") {
  // A .jsonl file was text: the model trained on '{"text": "' around every document.
  TrainFiles f;
  std::string jsonl;
  for (const std::string& doc : data::split_documents(file_read_regular(f.data))) {
    jsonl += nlohmann::json{{"text", doc}, {"source", "test"}}.dump() + "\n";
  }
  const std::string lines = f.dir / "docs.jsonl";
  file_write(lines, jsonl);
  auto run = [&](const std::string& data, const std::string& out) {
    return train({"--config", f.config, "--data", data, "--devices", "cpu:0", "--steps", "3",
                  "--batch-size", "4", "--seq-len", "16", "--eval-every", "0", "--json", "--out",
                  out});
  };
  const CliResult text = run(f.data, f.dir / "text");
  const CliResult from_jsonl = run(lines, f.dir / "jsonl");
  CAPTURE(from_jsonl.err);
  REQUIRE(text.rc == 0);
  REQUIRE(from_jsonl.rc == 0);
  const int64_t tokens = data::token_file_load(f.data).token_count();
  CHECK(has(from_jsonl.out, "| data " + lines + " (" + std::to_string(tokens) + " tokens) |"));
  // The same tokens in the same order: the same losses, step for step.
  const auto losses = [](const std::string& path) {
    std::vector<double> out;
    for (const nlohmann::json& j : metrics_steps(path)) out.push_back(j["loss"].get<double>());
    return out;
  };
  CHECK(losses(f.dir / "text/metrics.jsonl").size() == 3);
  CHECK(losses(f.dir / "text/metrics.jsonl") == losses(f.dir / "jsonl/metrics.jsonl"));
  CHECK(last_json_line(text.out)["val_loss"] == last_json_line(from_jsonl.out)["val_loss"]);
  // eval: the same loss over either file.
  auto eval = [&](const std::string& data) {
    return run_fanout({"eval", "--checkpoint", f.dir / "text/final", "--data", data, "--batch-size",
                       "2", "--seq-len", "16", "--json"},
                      kTimeout);
  };
  const CliResult e_text = eval(f.data), e_jsonl = eval(lines);
  REQUIRE(e_text.rc == 0);
  REQUIRE(e_jsonl.rc == 0);
  CHECK(last_json_line(e_text.out)["loss"] == last_json_line(e_jsonl.out)["loss"]);
  // A line without "text" is one line naming it, and where another field can be read.
  file_write(lines, jsonl + "{\"body\": \"x\"}\n");
  const CliResult bad = run(lines, f.dir / "bad");
  CHECK(bad.rc == 1);
  CHECK(bad.err_lines() == 1);
  CHECK(has(bad.err,
            "docs.jsonl:" + std::to_string(std::count(jsonl.begin(), jsonl.end(), '\n') + 1) +
                ": no \"text\" field (a .jsonl data file is read by its \"text\" "
                "field; fanout prepare --text-field reads another)"));
  CHECK_FALSE(fs::exists(f.dir / "bad"));
}

TEST_CASE("train --data too small to hold out a batch trains on all of it and says so") {
  TrainFiles f(2);  // about 260 tokens: 5% is less than one batch of 4 x 16 + 1
  const std::string run = f.dir / "run";
  CliResult r = train({"--config", f.config, "--data", f.data, "--devices", "cpu:0", "--steps", "2",
                       "--batch-size", "4", "--seq-len", "16", "--save-every", "1", "--out", run});
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, f.data + ": "));
  CHECK(has(r.out, " tokens are too few to hold out "));
  CHECK(has(r.out,
            "in batches of 4 x 16: training on all of them, with no held-out loss (give "
            "--val-data FILE)"));
  CHECK(!has(r.out, "\nheld-out loss"));
  for (const nlohmann::json& j : metrics_read(run + "/metrics.jsonl"))
    CHECK(!j.contains("val_loss"));
  // --save-best has nothing to compare: one line.
  CliResult best = train({"--config", f.config, "--data", f.data, "--devices", "cpu:0", "--steps",
                          "2", "--batch-size", "4", "--seq-len", "16", "--save-best",
                          "--eval-every", "1", "--out", f.dir / "best"});
  CHECK(best.rc == 1);
  CHECK(best.err_lines() == 1);
  CHECK(has(best.err, "--save-best compares held-out losses, and " + f.data));
  CHECK(!fs::exists(f.dir / "best"));
  // Its checkpoints say nothing was held out, and a resumed run keeps it so.
  CliResult again = train({"--resume", run + "/step-000001", "--devices", "cpu:0"});
  CAPTURE(again.out);
  REQUIRE(again.rc == 0);
  CHECK(!has(again.out, "held out"));
  CHECK(!has(again.out, "\nheld-out loss"));
}

TEST_CASE("a checkpoint from before --val-split resumes on all of its --data") {
  TrainFiles f;
  const std::string run = f.dir / "run";
  CliResult r = train({"--config", f.config, "--data", f.data, "--devices", "cpu:0", "--steps", "2",
                       "--batch-size", "4", "--seq-len", "16", "--save-every", "1", "--out", run});
  REQUIRE(r.rc == 0);
  // What a checkpoint written before the setting existed holds: no "val-split".
  const std::string state = run + "/step-000001/trainer_state.json";
  nlohmann::json j = nlohmann::json::parse(file_read(state));
  REQUIRE(j["flags"].contains("val-split"));
  j["flags"].erase("val-split");
  file_write(state, j.dump());
  CliResult again = train({"--resume", run + "/step-000001", "--devices", "cpu:0"});
  CAPTURE(again.out);
  CAPTURE(again.err);
  REQUIRE(again.rc == 0);
  CHECK(!has(again.out, "held out"));
  CHECK(!has(again.out, "\nheld-out loss"));
}

// --- the end-of-run sample -----------------------------------------------------------

TEST_CASE("an empty end-of-run sample says the model ended the text at once") {
  TrainFiles f;
  // Nothing but empty documents: after [BOT] the model learns [EOT].
  std::vector<int32_t> tokens;
  for (int i = 0; i < 2000; ++i) tokens.insert(tokens.end(), {data::kBot, data::kEot});
  data::token_file_write_bin(f.dir / "empty.bin", tokens);
  CliResult r = train({"--config",     f.config,     "--data",       f.dir / "empty.bin",
                       "--devices",    "cpu:0",      "--steps",      "60",
                       "--batch-size", "4",          "--seq-len",    "16",
                       "--lr",         "0.01",       "--warmup",     "0",
                       "--save-every", "0",          "--eval-every", "0",
                       "--out",        f.dir / "run"});
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "sample:\n  (empty: the model ended the text at once, [EOT] first)\n"));
}
