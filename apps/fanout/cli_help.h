#pragma once
// How `fanout ... --help` prints an option: one clean type name (INT, NUMBER,
// TEXT, SIZE, FILE, {on,off}) instead of CLI11's type and validator joined
// ("INT:NUMBER", "TEXT:TEXT"), its default after '=', and a negated flag without
// the value it sets ("--shuffle,--no-shuffle", not "...{false}"), and descriptions
// wrapped at spaces to the terminal's width (data::terminal_columns), continued
// under the description column, when stdout is a terminal or COLUMNS is set (help
// piped to a program keeps a description on one line). main installs it on the root
// app before any subcommand is added, so every subcommand shares it.

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

namespace fanout::app {

// The name --help shows for what `opt` takes, e.g. "INT" for CLI11's "INT:NUMBER".
std::string help_type_name(const CLI::Option& opt);

// `text` with each line broken at spaces into lines of at most `width` columns
// (presentation::text_wrap); a word wider than `width` stays whole on its line.
std::string help_wrap(const std::string& text, size_t width);

class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override;
  std::string make_option_opts(const CLI::Option* opt) const override;
  std::string make_option_desc(const CLI::Option* opt) const override;
  std::string make_subcommand(const CLI::App* sub) const override;
  std::string make_description(const CLI::App* app) const override;

 private:
  // The columns a description may take: the terminal's, less the name column;
  // SIZE_MAX (no wrapping) off a terminal without COLUMNS.
  size_t description_width() const;
};

// Sets HelpFormatter on `app`; call it before adding subcommands (they copy it).
void help_install(CLI::App& app);

}  // namespace fanout::app
