// `fanout walkthrough`: a narrated run of the data-parallel modes on a small
// Llama (dp-output, dp, dp-overlap, zero1, zero2, zero3: bench's and train's
// names) with the engine's real numbers, an ASCII timeline per mode, a Perfetto
// trace of all of it, a ddp step (computed), what bf16 mixed precision and bf16
// gradient sums change (measured bytes), and the modes' warm step times; fitted
// to the terminal's width (--wide: prose at 110 columns, tables whole).

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "apps/data/terminal_text.h"
#include "apps/fanout/cli_flags.h"
#include "apps/fanout/commands.h"
#include "apps/train/train_options.h"
#include "apps/walkthrough/walkthrough.h"
#include "apps/walkthrough/walkthrough_html.h"
#include "apps/walkthrough/walkthrough_page.h"
#include "engine/core/check.h"
#include "engine/core/cuda_runtime.h"
#include "engine/core/file_io.h"
#include "models/llama_config.h"

namespace fanout::app {

namespace {
struct WalkthroughArgs {
  std::string devices, trace = "walkthrough-trace.json", html, preset;
  int64_t batch_size = 5, seq_len = 32;
  int steps = 2, timed_steps = 5;
  bool no_color = false, wide = false;
};

// Every GPU when there are several; one GPU twice (two replicas, two streams) when
// there is one; else two simulated CPU devices.
std::string default_devices() {
  int gpus = cuda_device_count();
  if (gpus == 1) return "cuda:0,cuda:0";
  if (gpus > 1) {
    std::string list;
    for (int i = 0; i < gpus; ++i) list += (i ? ",cuda:" : "cuda:") + std::to_string(i);
    return list;
  }
  return "cpu:0,cpu:1";
}

// Note [Replacing an existing output]: over an existing file only when it is a
// page fanout wrote, and never the trace the same run writes.
OutputRules html_output_rules(const std::string& trace) {
  return written_by_fanout_rules("an HTML page written by fanout", "<!DOCTYPE html>", {trace});
}

// `word` as a POSIX shell reads it back: as it is when it is plain, else in
// single quotes.
std::string shell_word(const std::string& word) {
  const bool plain = !word.empty() && word.find_first_not_of(
                                          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                          "0123456789_./:,=+-") == std::string::npos;
  if (plain) return word;
  std::string q = "'";
  for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The command line that makes the same page, for the page to show.
std::string command_line(const WalkthroughArgs& a, const walkthrough::WalkthroughOptions& o) {
  std::string s = "fanout walkthrough --devices " + devices_str(o.devices);
  if (!a.preset.empty()) s += " --preset " + shell_word(a.preset);
  s += " --batch-size " + std::to_string(a.batch_size) + " --seq-len " + std::to_string(a.seq_len) +
       " --steps " + std::to_string(a.steps) + " --timed-steps " + std::to_string(a.timed_steps) +
       " --trace " + shell_word(a.trace) + " --html " + shell_word(a.html);
  return s;
}

int run_walkthrough(const WalkthroughArgs& a, bool devices_given) {
  walkthrough::WalkthroughOptions o;
  o.devices = devices_parse(devices_given ? a.devices : default_devices());
  devices_check_available(o.devices);
  if (!a.preset.empty()) {
    const std::vector<std::string> names = models::llama_preset_names();
    FANOUT_CHECK(std::find(names.begin(), names.end(), a.preset) != names.end(), "--preset ",
                 a.preset, ": not a preset (choose tiny, small or seed)");
    o.config = models::llama_preset(a.preset);
  }
  o.batch_size = a.batch_size, o.seq_len = a.seq_len, o.steps = a.steps;
  o.timed_steps = a.timed_steps;
  FANOUT_CHECK(a.batch_size > 0, "--batch-size must be positive, got ", a.batch_size);
  FANOUT_CHECK(a.seq_len > 0, "--seq-len must be positive, got ", a.seq_len);
  FANOUT_CHECK(a.steps > 0, "--steps must be positive, got ", a.steps);
  // Before the run: a FIFO, device, symlink or directory is refused, not replaced.
  file_check_output(a.trace, "--trace");
  if (!a.html.empty()) {
    std::error_code ec;
    const std::filesystem::path html = std::filesystem::weakly_canonical(a.html, ec);
    FANOUT_CHECK(ec || html != std::filesystem::weakly_canonical(a.trace, ec),
                 "--html and --trace name the same file: ", a.html);
    file_check_output(a.html, "--html", html_output_rules(a.trace));
  }
  o.trace_path = a.trace;
  o.color = !a.no_color && isatty(fileno(stdout)) && std::getenv("NO_COLOR") == nullptr;
  o.width = a.wide ? 0 : data::terminal_columns();
  const walkthrough::WalkthroughResult r = walkthrough::walkthrough_run(o, std::cout);
  if (!a.html.empty()) {
    const std::string page = walkthrough::walkthrough_html(
        walkthrough::walkthrough_sections(r, o),
        walkthrough::walkthrough_page_info(o, r.parameters, command_line(a, o)));
    // The mark goes before the doctype: HTML allows a comment there (no quirks mode).
    file_write_atomic(a.html, std::string(kWrittenByFanout) + page, "--html",
                      html_output_rules(a.trace));
    std::cout << "\n  page: " << a.html << " (" << bytes_str(page.size())
              << "), one section per mode with its devices, bytes and timeline\n";
  }
  std::cout.flush();
  return 0;
}
}  // namespace

Command add_walkthrough_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "walkthrough",
      "A narrated data-parallel step in every mode and in bf16, with real bytes and timings");
  auto a = std::make_shared<WalkthroughArgs>();
  cmd->add_option("--devices", a->devices,
                  "Devices (default: every GPU, else cpu:0,cpu:1; one GPU is used twice)");
  // Range-checked numbers (cli_flags.h): '', 'inf' and out-of-range values are usage errors.
  add_number(cmd, "--batch-size", a->batch_size, "Global rows per step (5: an uneven split)",
             int64_t{1}, train::kMaxCount);
  add_number(cmd, "--seq-len", a->seq_len, "Tokens per row", int64_t{1}, train::kMaxCount);
  add_number(cmd, "--steps", a->steps, "Narrated steps per mode", 1,
             static_cast<int>(train::kMaxCount));
  add_number(cmd, "--timed-steps", a->timed_steps,
             "Warm, untraced steps per mode whose median and spread the summary compares", 1,
             static_cast<int>(train::kMaxCount));
  cmd->add_option("--trace", a->trace, "Where to write the Perfetto trace")->capture_default_str();
  cmd->add_option("--html", a->html,
                  "Also write the run as one self-contained HTML page: each mode's devices, what "
                  "they hold, the bytes moved and the step's timeline (a new file, or a page "
                  "fanout wrote before)")
      ->type_name("FILE.html")
      ->check(not_empty());
  cmd->add_option("--preset", a->preset,
                  "The model: tiny, small or seed (default: tiny cut to 2 layers)")
      ->check(not_empty());
  cmd->add_flag("--no-color", a->no_color, "Plain text, no ANSI colours");
  cmd->add_flag("--wide", a->wide,
                "Prose at 110 columns and every table whole (by default the output fits the "
                "terminal, 80 columns when it is not one)");
  return [cmd, a]() -> int {
    if (!cmd->parsed()) return -1;
    return run_walkthrough(*a, cmd->count("--devices") > 0);
  };
}

}  // namespace fanout::app
