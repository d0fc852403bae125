// `fanout generate` through the real binary on a tiny random checkpoint: greedy
// decoding gives exactly --max-new-tokens ids and repeats itself, sampling repeats
// per seed and differs across seeds, --prompt-ids feeds ids as given, and bad
// flags, non-finite weights and a FIFO as config.json are a non-zero exit with one
// line on stderr.

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/input_util.h"

using namespace fanout::test;

namespace {
// A random checkpoint with vocab 259 and 64 positions.
struct GenerateFiles {
  TempDir dir{"fanout-generate"};
  std::string ckpt = dir / "ckpt";
  GenerateFiles() {
    std::filesystem::create_directory(ckpt);
    checkpoint_write(ckpt, cli_test_config(), 3);
  }
};

CliResult generate(const std::string& ckpt, const std::vector<std::string>& flags) {
  std::vector<std::string> args = {"generate", "--checkpoint", ckpt};
  args.insert(args.end(), flags.begin(), flags.end());
  return run_fanout(args);
}

// The JSON of a successful --json run.
nlohmann::json generate_json(const std::string& ckpt, std::vector<std::string> flags) {
  flags.push_back("--json");
  CliResult r = generate(ckpt, flags);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  nlohmann::json j = last_json_line(r.out);
  REQUIRE(j.is_object());
  REQUIRE(j.contains("ids"));
  REQUIRE(j.contains("prompt_ids"));
  return j;
}

std::vector<int32_t> sampled_ids(const std::string& ckpt, uint64_t seed) {
  return generate_json(ckpt, {"--prompt", "Hello", "--max-new-tokens", "20", "--temperature", "1",
                              "--top-k", "5", "--seed", std::to_string(seed)})["ids"]
      .get<std::vector<int32_t>>();
}

void check_fails(const CliResult& r, const std::string& phrase) {
  INFO("rc " << r.rc << " stderr: " << r.err);
  CHECK(r.rc != 0);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.find(phrase) != std::string::npos);
}

const std::vector<std::string> kGreedy = {"--prompt", "Hello",         "--max-new-tokens",
                                          "20",       "--temperature", "0"};
}  // namespace

TEST_CASE("greedy generate gives exactly max-new-tokens ids after BOT and the prompt bytes") {
  GenerateFiles f;
  nlohmann::json j = generate_json(f.ckpt, kGreedy);
  CHECK(j["prompt_ids"].get<std::vector<int32_t>>() ==
        std::vector<int32_t>{256, 'H', 'e', 'l', 'l', 'o'});
  std::vector<int32_t> ids = j["ids"].get<std::vector<int32_t>>();
  CHECK(ids.size() == 20);
  for (int32_t id : ids) {
    CHECK(id >= 0);
    CHECK(id < 259);
  }
  CHECK(j["text"].is_string());
}

TEST_CASE("two greedy generate runs give identical ids") {
  GenerateFiles f;
  CHECK(generate_json(f.ckpt, kGreedy)["ids"] == generate_json(f.ckpt, kGreedy)["ids"]);
}

TEST_CASE("sampled generate repeats for a seed and differs across seeds") {
  GenerateFiles f;
  std::vector<int32_t> first = sampled_ids(f.ckpt, 11);
  CHECK(first.size() == 20);
  CHECK(sampled_ids(f.ckpt, 11) == first);
  // A random model is nearly uniform over its top 5: some other seed must differ.
  bool differs = false;
  for (uint64_t seed : {12, 13, 14, 15}) differs |= sampled_ids(f.ckpt, seed) != first;
  CHECK(differs);
}

TEST_CASE("sampling with top-k 1 is greedy") {
  GenerateFiles f;
  nlohmann::json greedy = generate_json(f.ckpt, kGreedy);
  nlohmann::json top1 = generate_json(f.ckpt, {"--prompt", "Hello", "--max-new-tokens", "20",
                                               "--temperature", "1", "--top-k", "1"});
  CHECK(top1["ids"] == greedy["ids"]);
}

TEST_CASE("generate --prompt-ids feeds the ids as given") {
  GenerateFiles f;
  nlohmann::json j = generate_json(
      f.ckpt, {"--prompt-ids", "256,72,105", "--max-new-tokens", "5", "--temperature", "0"});
  CHECK(j["prompt_ids"].get<std::vector<int32_t>>() == std::vector<int32_t>{256, 72, 105});
  CHECK(j["ids"].size() == 5);
  // The same ids as text ("Hi" after BOT) are the same prompt.
  nlohmann::json t =
      generate_json(f.ckpt, {"--prompt", "Hi", "--max-new-tokens", "5", "--temperature", "0"});
  CHECK(t["ids"] == j["ids"]);
}

TEST_CASE("generate with zero new tokens prints an empty list") {
  GenerateFiles f;
  nlohmann::json j =
      generate_json(f.ckpt, {"--prompt", "Hello", "--max-new-tokens", "0", "--temperature", "0"});
  CHECK(j["ids"].empty());
}

TEST_CASE("generate refuses both --prompt and --prompt-ids") {
  GenerateFiles f;
  check_fails(generate(f.ckpt, {"--prompt", "Hi", "--prompt-ids", "256,72"}),
              "exactly one of --prompt and --prompt-ids");
  check_fails(generate(f.ckpt, {"--max-new-tokens", "3"}),
              "exactly one of --prompt and --prompt-ids");
}

TEST_CASE("generate names a prompt id that is not a number") {
  GenerateFiles f;
  check_fails(generate(f.ckpt, {"--prompt-ids", "1,x"}), "'x' is not a token id");
  check_fails(generate(f.ckpt, {"--prompt-ids", "1,,2"}), "'' is not a token id");
  check_fails(generate(f.ckpt, {"--prompt-ids", "-3"}), "'-3' is not a token id");
}

TEST_CASE("generate refuses a prompt id outside the vocabulary") {
  GenerateFiles f;
  check_fails(generate(f.ckpt, {"--prompt-ids", "256,300", "--max-new-tokens", "2"}),
              "token id 300 is out of range for vocabulary size 259");
}

TEST_CASE("generate refuses more tokens than max_position_embeddings") {
  GenerateFiles f;
  // 6 prompt ids (BOT + 5 bytes) + 59 > 64 positions; 58 still fits.
  check_fails(generate(f.ckpt, {"--prompt", "Hello", "--max-new-tokens", "59"}),
              "prompt plus --max-new-tokens (65) exceeds max_position_embeddings (64)");
  nlohmann::json j =
      generate_json(f.ckpt, {"--prompt", "Hello", "--max-new-tokens", "58", "--temperature", "0"});
  CHECK(j["ids"].size() == 58);
}

TEST_CASE("generate refuses numeric flags out of range or empty naming the flag") {
  GenerateFiles f;
  struct Case {
    const char* flag;
    const char* value;
    const char* phrase;
  };
  for (const Case& c :
       {Case{"--temperature", "-1", "--temperature: '-1' is out of range"},
        Case{"--temperature", "inf", "--temperature: 'inf' is not a finite number"},
        Case{"--temperature", "nan", "--temperature: 'nan' is not a finite number"},
        Case{"--temperature", "", "--temperature: an empty value is not a number"},
        Case{"--top-k", "-1", "--top-k: '-1' is out of range"},
        Case{"--top-k", "", "--top-k: an empty value is not a number"},
        Case{"--seed", "-1", "--seed: '-1' is negative"},
        Case{"--seed", "", "--seed: an empty value is not a number"},
        Case{"--max-new-tokens", "-1", "--max-new-tokens: '-1' is out of range"},
        Case{"--max-new-tokens", "", "--max-new-tokens: an empty value is not a number"}}) {
    CAPTURE(c.flag);
    CAPTURE(c.value);
    std::vector<std::string> flags = {"--prompt", "Hi", "--max-new-tokens", "2"};
    if (std::string(c.flag) == "--max-new-tokens") {
      flags[3] = c.value;
    } else {
      flags.insert(flags.end(), {c.flag, c.value});
    }
    check_fails(generate(f.ckpt, flags), c.phrase);
  }
}

// UBSan found prompt length + --max-new-tokens overflowing at INT64_MAX; the old binary
// then said "generation would pass 1 positions".
TEST_CASE("generate refuses a --max-new-tokens that would overflow the position count") {
  GenerateFiles f;
  for (const char* n : {"9223372036854775807", "9223372036854775802", "1000000001"}) {
    CAPTURE(n);
    check_fails(generate(f.ckpt, {"--prompt", "Hello", "--max-new-tokens", n}),
                "--max-new-tokens: '" + std::string(n) + "' is out of range (expected 0..");
  }
  check_fails(generate(f.ckpt, {"--prompt", "Hello", "--max-new-tokens", "1000000000"}),
              "prompt plus --max-new-tokens (1000000006) exceeds max_position_embeddings (64)");
}

TEST_CASE("generate names the tensor of a checkpoint holding NaN") {
  GenerateFiles f;
  std::vector<HostTensor> w = weights_read(f.ckpt);
  for (HostTensor& t : w) {
    if (t.name == "lm_head.weight") t.data[0] = std::nanf("");
  }
  weights_write(f.ckpt, w);
  check_fails(
      generate(f.ckpt, kGreedy),
      "model.safetensors: tensor 'lm_head.weight' holds non-finite values (nan at index 0)");
}

TEST_CASE("generate refuses a FIFO as config.json without blocking") {
  GenerateFiles f;
  std::filesystem::remove(f.ckpt + "/config.json");
  Fifo fifo(f.ckpt + "/config.json");
  const LimitedRun r = run_fanout_limited({"generate", "--checkpoint", f.ckpt, "--prompt", "Hi"});
  INFO("stderr: " << r.err);
  CHECK_FALSE(r.timed_out);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(r.err.find(fifo.path() + ": is a FIFO, not a regular file") != std::string::npos);
}
