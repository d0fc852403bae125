#pragma once
// How `fanout ... --help` prints an option: one clean type name (INT, NUMBER,
// TEXT, SIZE, FILE, {on,off}) instead of CLI11's type and validator joined
// ("INT:NUMBER", "TEXT:TEXT"), its default after '=', and a negated flag without
// the value it sets ("--shuffle,--no-shuffle", not "...{false}"). main installs
// it on the root app before any subcommand is added, so every subcommand shares it.

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

namespace fanout::app {

// The name --help shows for what `opt` takes, e.g. "INT" for CLI11's "INT:NUMBER".
std::string help_type_name(const CLI::Option& opt);

class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
};

// Sets HelpFormatter on `app`; call it before adding subcommands (they copy it).
void help_install(CLI::App& app);

}  // namespace fanout::app
