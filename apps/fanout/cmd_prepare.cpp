// `fanout prepare --tokenizer tokenizer.json --data FILE... --out DIR`: text or
// JSON Lines files encoded with the user's tokenizer into llm.c token files
// DIR/train.bin and DIR/val.bin, with the tokenizer beside them as DIR/tokenizer.json
// (apps/data/prepare.h), for `fanout train --data DIR/train.bin --val-data DIR/val.bin`.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/data/prepare.h"
#include "apps/fanout/cli_flags.h"
#include "apps/fanout/commands.h"

namespace fanout::app {

Command add_prepare_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "prepare", "Encode text with a tokenizer into llm.c token files (train.bin, val.bin)");
  auto o = std::make_shared<data::PrepareOptions>();
  auto packing = std::make_shared<std::string>("on");
  cmd->add_option("--tokenizer", o->tokenizer, data::kTokenizerNamesHelp)->required();
  cmd->add_option("--data", o->data,
                  "UTF-8 text files (documents separated by blank lines) or JSON Lines files "
                  "(.jsonl: one {\"text\": ...} document per line)")
      ->required()
      ->expected(1, -1);
  cmd->add_option("--out", o->out,
                  "Directory for train.bin, val.bin and the tokenizer as tokenizer.json "
                  "(created if missing; a train.bin or val.bin there is replaced only when it is "
                  "a token file, never when it is a --data file)")
      ->required();
  cmd->add_option("--format", o->format,
                  "text or jsonl for every --data file (default: jsonl for names ending in "
                  ".jsonl, else text)")
      ->check(CLI::IsMember({"text", "jsonl"}));
  cmd->add_option("--text-field", o->text_field, "JSON Lines: the field holding each document")
      ->capture_default_str()
      ->check(not_empty());
  cmd->add_option("--val-fraction", o->val_fraction,
                  "Share of the documents held out in val.bin, in (0, 1)")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0));
  cmd->add_option("--packing", *packing,
                  "on: one stream of [BOT] doc [EOT]; off: the same, checked to come apart "
                  "into whole documents for train --packing off")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  return [cmd, o, packing]() -> int {
    if (!cmd->parsed()) return -1;
    o->packing = *packing == "on";
    const data::PrepareResult r = data::prepare_run(*o);
    std::printf("%s\n", data::prepare_summary(r).c_str());
    return 0;
  };
}

}  // namespace fanout::app
