// `fanout tokenizer encode --tokenizer T --data FILE [--json] [--write-tokenizer OUT]`:
// a text file's ids with a tokenizer.json (or `byte`), one line of ids on stdout,
// or with --json {"ids": [...], "decoded": "..."} (decode of those ids). The
// encode throughput goes to stderr. --write-tokenizer writes the tokenizer back
// as fanout writes it (tests/reference/hf_tokenizers.js loads that in HF).

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "apps/data/output_kinds.h"
#include "apps/data/text_tokenizer.h"
#include "apps/fanout/cli_flags.h"
#include "apps/fanout/commands.h"
#include "engine/core/file_io.h"

namespace fanout::app {

namespace {

struct EncodeFlags {
  std::string tokenizer;
  std::string data;
  bool json = false;
  std::string write_tokenizer;
};

int run_encode(const EncodeFlags& flags) {
  // Never over --data or the tokenizer read, nor over a file that is no tokenizer.json.
  const OutputRules rules =
      data::tokenizer_json_output({flags.data, flags.tokenizer == "byte" ? "" : flags.tokenizer});
  const bool write = !flags.write_tokenizer.empty();
  if (write) file_check_output(flags.write_tokenizer, "--write-tokenizer", rules);
  auto tokenizer = data::tokenizer_resolve(flags.tokenizer);
  if (write) {
    file_write_atomic(flags.write_tokenizer, tokenizer->to_json(), "--write-tokenizer", rules);
  }
  const std::string text = file_read_regular(flags.data);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tokenizer->encode(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::string out = flags.json ? "{\"ids\": [" : "";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += flags.json ? "," : " ";
    out += std::to_string(ids[i]);
  }
  if (flags.json) {
    // Bytes that are not UTF-8 become U+FFFD, as HF's decode makes them.
    out += "], \"decoded\": " +
           nlohmann::json(tokenizer->decode(ids))
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
           "}";
  }
  out += "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  std::fprintf(stderr, "encoded %.2f MB into %zu tokens with %s in %.3f s: %.2f MB/s\n",
               static_cast<double>(text.size()) / 1e6, ids.size(), tokenizer->describe().c_str(),
               seconds, seconds > 0 ? static_cast<double>(text.size()) / 1e6 / seconds : 0.0);
  return 0;
}

}  // namespace

Command add_tokenizer_encode_command(CLI::App& tokenizer) {
  auto* cmd = tokenizer.add_subcommand("encode", "Print a text file's token ids");
  auto flags = std::make_shared<EncodeFlags>();
  cmd->add_option("--tokenizer", flags->tokenizer, data::kTokenizerNamesHelp)->required();
  cmd->add_option("--data", flags->data, "The text file to encode")->required();
  cmd->add_flag("--json", flags->json, "Print {\"ids\": [...], \"decoded\": \"...\"}");
  cmd->add_option("--write-tokenizer", flags->write_tokenizer,
                  "Also write the tokenizer as fanout writes tokenizer.json: to a new file or "
                  "over a tokenizer.json (never over another file or an input)")
      ->check(not_empty());
  return [cmd, flags]() -> int {
    if (!cmd->parsed()) return -1;
    return run_encode(*flags);
  };
}

}  // namespace fanout::app
