#pragma once
// The subcommands of the `fanout` binary. Each add_* registers its flags on the
// CLI11 app and returns the callback that runs it once parsing succeeded; the
// callback returns the process exit code. Errors are thrown as fanout::Error
// and printed by main as one line.

#include <functional>

#include <CLI/CLI.hpp>

namespace fanout::app {

using Command = std::function<int()>;

Command add_devices_command(CLI::App& app);
Command add_eval_command(CLI::App& app);
Command add_generate_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_train_command(CLI::App& app);
Command add_launch_command(CLI::App& app);
Command add_walkthrough_command(CLI::App& app);
Command add_tokenizer_command(CLI::App& app);
// `fanout tokenizer encode`, registered by add_tokenizer_command on its group.
Command add_tokenizer_encode_command(CLI::App& tokenizer);
Command add_prepare_command(CLI::App& app);
Command add_plot_command(CLI::App& app);
Command add_report_command(CLI::App& app);

}  // namespace fanout::app
