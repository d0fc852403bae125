// fanout: one binary for single-process data-parallel training of a Llama model.
// main parses the subcommand, runs it, and turns every error into one line on
// stderr and a non-zero exit code (2: bad usage, 1: any other error).

#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "apps/fanout/commands.h"
#include "engine/core/check.h"

int main(int argc, char** argv) {
  using namespace fanout;
  CLI::App app{"fanout: data-parallel training of a Llama transformer from one process"};
  app.set_version_flag("--version", std::string("fanout ") + FANOUT_VERSION);
  app.require_subcommand(1);
  std::vector<app::Command> commands = {
      app::add_train_command(app),       app::add_devices_command(app),
      app::add_eval_command(app),        app::add_generate_command(app),
      app::add_bench_command(app),       app::add_launch_command(app),
      app::add_walkthrough_command(app),
  };
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fanout: internal error: %s\n", e.what());
    return 1;
  }
}
