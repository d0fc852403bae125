// fanout: one binary for single-process data-parallel training of a Llama model.
// main parses the subcommand, runs it, and turns every error into one line on
// stderr and a non-zero exit code (2: bad usage, 1: any other error).

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/fanout/commands.h"
#include "engine/core/check.h"

namespace {

// Edit distance, for "did you mean" on a mistyped subcommand.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// "" when `word` is a subcommand or an option, else the error for it.
std::string unknown_command(const CLI::App& app, const std::string& word) {
  if (word.empty() || word[0] == '-') return "";
  std::string best;
  size_t best_d = 3;  // suggest only close names
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == word) return "";
    const size_t d = edit_distance(word, sub->get_name());
    if (d < best_d) best_d = d, best = sub->get_name();
  }
  return "unknown command '" + word + "'" +
         (best.empty() ? std::string(" (see fanout --help)") : "; did you mean '" + best + "'?");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fanout;
  // A file-size limit (ulimit -f) must fail a write with EFBIG, not kill the process.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"fanout: data-parallel training of a Llama transformer from one process"};
  app.set_version_flag("--version", std::string("fanout ") + FANOUT_VERSION);
  app.require_subcommand(1);
  std::vector<app::Command> commands = {
      app::add_train_command(app),       app::add_devices_command(app),
      app::add_eval_command(app),        app::add_generate_command(app),
      app::add_bench_command(app),       app::add_launch_command(app),
      app::add_walkthrough_command(app), app::add_tokenizer_command(app),
      app::add_prepare_command(app),     app::add_plot_command(app),
      app::add_report_command(app),
  };
  if (argc > 1) {
    if (std::string why = unknown_command(app, argv[1]); !why.empty()) {
      std::fprintf(stderr, "fanout: error: %s\n", why.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "fanout: error: %s (see fanout --help)\n", e.what());
    return 2;
  }
  try {
    for (auto& run : commands) {
      int rc = run();
      if (rc >= 0) return rc;
    }
    std::fprintf(stderr, "fanout: error: no command given (see fanout --help)\n");
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "fanout: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "fanout: error: out of memory (a size asked for more than the machine has)\n");
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path problem the command did not name itself: still the user's, in one line.
    std::string what = e.code().message();
    if (!e.path1().empty()) what = e.path1().string() + ": " + what;
    std::fprintf(stderr, "fanout: error: %s\n", what.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fanout: internal error: %s\n", e.what());
    return 1;
  }
}
