// `fanout generate`: sampling from a checkpoint with a KV cache — greedy when
// --temperature is 0, else temperature and optional top-k from a seeded RNG. A
// checkpoint with NaN or Inf weights is refused by the reader, naming the tensor.
// Text goes through the checkpoint's tokenizer.json, and control characters in
// what is printed are made visible (terminal_text.h).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/data/terminal_text.h"
#include "apps/data/tokenizer.h"
#include "apps/fanout/cli_flags.h"
#include "apps/fanout/commands.h"
#include "apps/train/checkpoint.h"
#include "apps/train/device_memory.h"
#include "apps/train/train_options.h"
#include "engine/core/check.h"
#include "engine/core/checked_math.h"
#include "models/llama_checkpoint.h"
#include "models/llama_generate.h"

namespace fanout::app {

namespace {
struct GenerateArgs {
  std::string checkpoint, prompt, prompt_ids, device = "cpu:0";
  int64_t max_new_tokens = 64, top_k = 0;
  double temperature = 0.8;
  uint64_t seed = 1234;
  bool json = false, stop_at_eot = false;
  std::string precision = "fp32";
  std::string device_memory;  // "": no cap
};

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (...) {
      used = 0;
    }
    FANOUT_CHECK(used > 0 && used == item.size() && v >= 0 && v < (1ll << 31), "--prompt-ids: '",
                 item, "' is not a token id");
    ids.push_back(static_cast<int32_t>(v));
  }
  FANOUT_CHECK(!ids.empty(), "--prompt-ids is empty");
  return ids;
}

int32_t sample(std::vector<float> logits, double temperature, int64_t top_k, std::mt19937_64& rng) {
  if (temperature <= 0) return models::argmax(logits);
  int64_t V = static_cast<int64_t>(logits.size());
  std::vector<int32_t> order(V);
  for (int64_t i = 0; i < V; ++i) order[i] = static_cast<int32_t>(i);
  int64_t k = (top_k > 0 && top_k < V) ? top_k : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  double max = logits[order[0]], total = 0;
  std::vector<double> p(k);
  for (int64_t i = 0; i < k; ++i) total += p[i] = std::exp((logits[order[i]] - max) / temperature);
  double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  for (int64_t i = 0; i < k; ++i) {
    if ((u -= p[i]) <= 0) return order[i];
  }
  return order[k - 1];
}

int run_generate(const GenerateArgs& a) {
  FANOUT_CHECK(a.prompt.empty() != a.prompt_ids.empty(),
               "give exactly one of --prompt and --prompt-ids");
  // add_number checked each flag's range; these guard the arithmetic below anyway.
  FANOUT_CHECK(a.max_new_tokens >= 0 && a.max_new_tokens <= train::kMaxCount,
               "--max-new-tokens must be within 0..", train::kMaxCount);
  FANOUT_CHECK(std::isfinite(a.temperature) && a.temperature >= 0,
               "--temperature must be a finite number >= 0, got ", a.temperature);
  FANOUT_CHECK(a.top_k >= 0, "--top-k must not be negative");
  Device device = device_parse(a.device);
  FANOUT_CHECK(!device.is_bare(), "--device needs an index, e.g. cpu:0");
  devices_check_available({device});
  if (!a.device_memory.empty()) {
    train::apply_device_memory(train::parse_byte_size(a.device_memory, "--device-memory"),
                               {device});
  }
  auto model = models::llama_load(a.checkpoint, device, train::precision_dtype(a.precision));
  // The checkpoint's tokenizer.json encodes and decodes (bytes for checkpoints without one).
  const auto tokenizer = train::checkpoint_tokenizer(a.checkpoint);
  const int64_t vocab = model->config().vocab_size;
  std::vector<int32_t> prompt;
  if (!a.prompt_ids.empty()) {
    prompt = parse_ids(a.prompt_ids);
  } else {
    prompt = tokenizer->encode(a.prompt);
    if (tokenizer->bot() >= 0 && tokenizer->bot() < vocab) {
      prompt.insert(prompt.begin(), tokenizer->bot());
    }
    for (const int32_t id : prompt) {
      FANOUT_CHECK(id < vocab, "--prompt encodes to id ", id, " but the model has ", vocab,
                   " tokens (the checkpoint's tokenizer does not fit its model)");
    }
  }
  const int64_t total = size_add("the prompt plus --max-new-tokens",
                                 {static_cast<int64_t>(prompt.size()), a.max_new_tokens});
  FANOUT_CHECK(total <= model->config().max_position_embeddings, "prompt plus --max-new-tokens (",
               total, ") exceeds max_position_embeddings (",
               model->config().max_position_embeddings, ")");
  models::LlamaGenerator gen(*model, std::max<int64_t>(total, 1));
  std::mt19937_64 rng(a.seed);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits = gen.feed(prompt);
  std::vector<int32_t> out;
  for (int64_t i = 0; i < a.max_new_tokens; ++i) {
    int32_t next = sample(logits, a.temperature, a.top_k, rng);
    out.push_back(next);
    if (a.stop_at_eot && next == tokenizer->eot()) break;
    if (i + 1 < a.max_new_tokens) logits = gen.feed({next});
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string text = tokenizer->decode(out);
  if (a.json) {
    nlohmann::json j = {{"prompt_ids", prompt}, {"ids", out}, {"text", text}};
    // Sampled bytes need not be valid UTF-8: replace what is not.
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    // Sampled text may hold terminal control sequences: printed visible (terminal_text.h).
    std::printf("%s\n", data::terminal_text_escape(a.prompt + text).c_str());
  }
  std::fprintf(stderr, "generated %zu tokens in %.2f s (%.1f tokens/s)\n", out.size(), secs,
               out.size() / std::max(secs, 1e-9));
  return 0;
}
}  // namespace

Command add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Sample text from a checkpoint (KV cache)");
  auto a = std::make_shared<GenerateArgs>();
  cmd->add_option("--checkpoint", a->checkpoint, "Checkpoint directory")->required();
  cmd->add_option("--prompt", a->prompt,
                  "Prompt text, encoded with the checkpoint's tokenizer.json (else as bytes)");
  cmd->add_option("--prompt-ids", a->prompt_ids, "Prompt as token ids, e.g. 256,72,105");
  add_number(cmd, "--max-new-tokens", a->max_new_tokens, "Tokens to generate", int64_t{0},
             train::kMaxCount);
  add_number(cmd, "--temperature", a->temperature, "0 = greedy", 0.0, 1e6);
  add_number(cmd, "--top-k", a->top_k, "Sample among the k likeliest (0 = all)", int64_t{0},
             int64_t{std::numeric_limits<int32_t>::max()});
  add_number(cmd, "--seed", a->seed, "Sampling seed", uint64_t{0},
             std::numeric_limits<uint64_t>::max());
  cmd->add_option("--device", a->device, "Device to run on")->capture_default_str();
  cmd->add_option("--device-memory", a->device_memory, train::kDeviceMemoryHelp)
      ->type_name("SIZE")
      ->check(CLI::Validator(
          [](std::string& text) { return train::byte_size_problem(text, "--device-memory"); }, ""));
  cmd->add_flag("--stop-at-eot", a->stop_at_eot, "Stop when the model emits EOT");
  cmd->add_option("--precision", a->precision, "fp32, or bf16 (mixed precision weights)")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print prompt ids, generated ids and text as JSON");
  return [cmd, a]() -> int { return cmd->parsed() ? run_generate(*a) : -1; };
}

}  // namespace fanout::app
