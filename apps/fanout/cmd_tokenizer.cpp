// `fanout tokenizer`: the tokenizer commands. `tokenizer train --data FILE...
// --vocab-size N --out tokenizer.json` trains a byte-level BPE with [BOT], [EOT]
// and [PAD] (bpe_trainer.h) and writes it as HF's tokenizer.json; a progress bar
// on a terminal, plain lines otherwise (about every 10 %), and the throughput at the end.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "apps/data/bpe_tokenizer.h"
#include "apps/data/bpe_trainer.h"
#include "apps/data/output_kinds.h"
#include "apps/data/terminal_text.h"
#include "apps/fanout/cli_flags.h"
#include "apps/fanout/commands.h"
#include "engine/core/check.h"
#include "engine/core/file_io.h"

namespace fanout::app {

namespace {

using Clock = std::chrono::steady_clock;

struct TrainFlags {
  std::vector<std::string> data;
  int64_t vocab_size = 8192;
  std::string out;
  std::string format;               // "", text or jsonl (data::BpeTrainOptions)
  std::string text_field = "text";  // JSON Lines: the member holding each document
};

std::string mb_str(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  return buf;
}

// A bar redrawn in place on stderr when it is a terminal (at most 10 times a
// second, fitted to its width); else plain lines on stdout (a log, a pipe): each
// phase's start, every further 10 % of it or 10 seconds, whichever comes first,
// and its end with the final count.
class TrainDisplay {
 public:
  TrainDisplay() : tty_(::isatty(STDERR_FILENO) != 0) {}

  void update(const data::BpeTrainProgress& p) {
    const auto now = Clock::now();
    const bool counting = p.phase == data::BpeTrainProgress::Phase::kCounting;
    const bool new_phase = !shown_ || p.phase != phase_;
    const bool last = p.done >= p.total;
    const double since = std::chrono::duration<double>(now - last_).count();
    if (tty_) {
      if (!new_phase && !last && since < 0.1) return;
    } else {
      // The next tenth of the phase, or 10 seconds on; the end once.
      const bool tenth = p.total > 0 && p.done * 10 / p.total > shown_done_ * 10 / p.total;
      if (!new_phase && !(last ? p.done > shown_done_ : tenth || since >= 10.0)) return;
    }
    if (new_phase) phase_start_ = now;
    phase_ = p.phase;
    shown_ = true;
    shown_done_ = p.done;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - phase_start_).count();
    char stats[128];
    if (counting) {
      int n = std::snprintf(stats, sizeof stats, "counting %s of %s",
                            mb_str(static_cast<double>(p.done)).c_str(),
                            mb_str(static_cast<double>(p.total)).c_str());
      if (elapsed > 0.2 && n > 0) {
        std::snprintf(stats + n, sizeof stats - n, ", %.1f MB/s",
                      static_cast<double>(p.done) / 1e6 / elapsed);
      }
    } else {
      std::snprintf(stats, sizeof stats, "merging %lld of %lld merges",
                    static_cast<long long>(p.done), static_cast<long long>(p.total));
    }
    if (!tty_) {
      std::printf("%s\n", stats);
      std::fflush(stdout);
      return;
    }
    // The bar's width stays put while the text beside it (at most ~50 columns) changes.
    const int width = std::clamp(static_cast<int>(data::terminal_width(STDERR_FILENO)) - 55, 0, 40);
    const int filled =
        p.total > 0 ? static_cast<int>(width * std::min(p.done, p.total) / p.total) : width;
    std::fprintf(stderr, "\r\033[K");
    if (width >= 5) {
      std::fprintf(stderr, "[%s%s] ", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str());
    }
    std::fprintf(stderr, "%s", stats);
    std::fflush(stderr);
  }

  // Clears the bar before the summary.
  void finish() {
    if (tty_ && shown_) std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  }

 private:
  bool tty_;
  bool shown_ = false;
  int64_t shown_done_ = 0;  // `done` of the last line shown
  data::BpeTrainProgress::Phase phase_ = data::BpeTrainProgress::Phase::kCounting;
  Clock::time_point phase_start_, last_;
};

int run_train(const TrainFlags& flags) {
  // The output is checked before the work, and written atomically after it: never
  // over a --data file, nor over a file that is no tokenizer.json (file_io.h).
  const OutputRules rules = data::tokenizer_json_output(flags.data);
  file_check_output(flags.out, "--out", rules);
  const auto t0 = Clock::now();
  TrainDisplay display;
  data::BpeTrainOptions options;
  options.vocab_size = flags.vocab_size;
  options.format = flags.format;
  options.text_field = flags.text_field;
  data::BpeTrainStats stats;
  data::BpeModel model;
  try {
    model = data::bpe_train(
        flags.data, options, [&](const data::BpeTrainProgress& p) { display.update(p); }, &stats);
  } catch (...) {
    display.finish();
    throw;
  }
  display.finish();
  const auto merges = static_cast<int64_t>(model.merges.size());
  const auto tokens = static_cast<int64_t>(model.vocab.size());
  auto tokenizer = data::bpe_tokenizer(std::move(model), flags.out);
  file_write_atomic(flags.out, tokenizer->to_json(), "--out", rules);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  if (tokens < flags.vocab_size) {
    std::printf(
        "note: the text allows only %lld merges, so the vocabulary has %lld tokens, not "
        "%lld (more varied text allows more)\n",
        static_cast<long long>(merges), static_cast<long long>(tokens),
        static_cast<long long>(flags.vocab_size));
  }
  std::printf(
      "trained %lld tokens (%lld merges) on %s in %.1f s: %.1f MB/s (%lld pieces, %lld "
      "distinct), wrote %s, [BOT]=%d [EOT]=%d [PAD]=%d\n",
      static_cast<long long>(tokens), static_cast<long long>(merges),
      mb_str(static_cast<double>(stats.bytes)).c_str(), seconds,
      seconds > 0 ? static_cast<double>(stats.bytes) / 1e6 / seconds : 0.0,
      static_cast<long long>(stats.pieces), static_cast<long long>(stats.distinct),
      flags.out.c_str(), tokenizer->bot(), tokenizer->eot(), tokenizer->pad());
  return 0;
}

}  // namespace

Command add_tokenizer_command(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("tokenizer", "Byte-level BPE tokenizers: train one, encode with one");
  // A missing or mistyped subcommand is a usage error naming the commands.
  cmd->allow_extras();
  cmd->parse_complete_callback([cmd] {
    std::string names;
    for (const CLI::App* sub : cmd->get_subcommands({})) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    const std::vector<std::string> extras = cmd->remaining();
    if (!extras.empty()) {
      throw CLI::ValidationError("fanout tokenizer: unknown command or flag '" + extras[0] +
                                 "' (commands: " + names + ")");
    }
    if (cmd->get_subcommands().empty()) {
      throw CLI::ValidationError("fanout tokenizer needs a command: " + names);
    }
  });

  auto* train = cmd->add_subcommand(
      "train", "Train a byte-level BPE (GPT-2 / HF ByteLevel) with [BOT], [EOT], [PAD]");
  auto flags = std::make_shared<TrainFlags>();
  train
      ->add_option("--data", flags->data,
                   "Text files to train on (UTF-8; any bytes encode), or JSON Lines files "
                   "(.jsonl: one {\"text\": ...} document per line)")
      ->required()
      ->expected(1, -1);
  train
      ->add_option("--format", flags->format,
                   "text or jsonl for every --data file (default: jsonl for names ending in "
                   ".jsonl, else text)")
      ->check(CLI::IsMember({"text", "jsonl"}));
  train
      ->add_option("--text-field", flags->text_field, "JSON Lines: the field holding each document")
      ->capture_default_str()
      ->check(not_empty());
  add_number(train, "--vocab-size", flags->vocab_size,
             "Tokens in all: 3 special, 256 bytes and at least one merge", data::kBpeMinVocab,
             data::kBpeMaxVocab);
  train
      ->add_option("--out", flags->out,
                   "Where to write the tokenizer.json (HF's format): a new file or an existing "
                   "tokenizer.json (never another file or a --data file)")
      ->required();

  // Other subcommands of `fanout tokenizer` (encode: cmd_tokenizer_encode.cpp) go here,
  // each an add_tokenizer_<name>_command(*cmd) declared in commands.h.
  std::vector<Command> others = {add_tokenizer_encode_command(*cmd)};

  return [cmd, train, flags, others]() -> int {
    if (!cmd->parsed()) return -1;
    if (train->parsed()) return run_train(*flags);
    for (const Command& run : others) {
      if (int rc = run(); rc >= 0) return rc;
    }
    return -1;
  };
}

}  // namespace fanout::app
