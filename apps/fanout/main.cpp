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

#include "apps/fanout/cli_help.h"
#include "apps/fanout/cli_parse.h"
#include "apps/fanout/commands.h"
#include "engine/core/check.h"
#include "engine/core/cpu_device.h"

int main(int argc, char** argv) {
  using namespace fanout;
  // A file-size limit (ulimit -f) must fail a write with EFBIG, not kill the process.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"fanout: data-parallel training of a Llama transformer from one process", "fanout"};
  app::help_install(app);  // before the subcommands, which copy it
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
    if (std::string why = app::unknown_command(app, argv[1]); !why.empty()) {
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
    std::fprintf(stderr, "fanout: error: %s\n", app::parse_error_message(app, e).c_str());
    return 2;
  }
  try {
    // The environment every command's devices read is checked before any command
    // creates a file: a malformed value must not leave a half-made --out behind.
    cpu_threads_per_device();
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
