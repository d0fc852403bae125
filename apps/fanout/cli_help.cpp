#include "apps/fanout/cli_help.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "apps/data/terminal_text.h"
#include "apps/presentation/text_table.h"

namespace fanout::app {

namespace {

std::vector<std::string> split_colons(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, ':');) parts.push_back(part);
  return parts;
}

}  // namespace

std::string help_type_name(const CLI::Option& opt) {
  // CLI11 writes the converter's type, then each validator's description: "INT:NUMBER".
  const std::vector<std::string> parts = split_colons(opt.get_type_name());
  if (parts.empty()) return "";
  std::string base = parts[0];
  if (base == "FLOAT" || base == "DOUBLE") base = "NUMBER";
  if (base == "UINT") base = "INT";
  std::string label = base;
  // A validator that names what it accepts ("FILE", "DIR", "{on,off}") says more than
  // the type; "NUMBER" and "TEXT" (the range and non-empty checks) say nothing new.
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string& v = parts[i];
    if (v.empty() || v == "NUMBER" || v == "TEXT" || v == parts[0]) continue;
    label = v == "PATH(existing)" ? "PATH" : v;
  }
  return label;
}

std::string HelpFormatter::make_option_name(const CLI::Option* opt, bool is_positional) const {
  // "--shuffle,--no-shuffle{false}": the value a negated flag sets is not news.
  std::string name = CLI::Formatter::make_option_name(opt, is_positional);
  for (size_t open; (open = name.find('{')) != std::string::npos;) {
    const size_t close = name.find('}', open);
    if (close == std::string::npos) break;
    name.erase(open, close - open + 1);
  }
  return name;
}

std::string HelpFormatter::make_option_opts(const CLI::Option* opt) const {
  if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
  if (opt->get_type_size() == 0) return "";  // a flag: no value
  std::string out;
  const std::string type = help_type_name(*opt);
  if (!type.empty()) out += " " + type;
  if (!opt->get_default_str().empty()) out += "=" + opt->get_default_str();
  const bool many = opt->get_expected_max() >= CLI::detail::expected_max_vector_size;
  if (many && !type.ends_with("...")) {
    out += " ...";
  } else if (!many && opt->get_expected_min() > 1) {
    out += " x " + std::to_string(opt->get_expected());
  }
  if (opt->get_required()) out += " REQUIRED";
  return out;
}

std::string help_wrap(const std::string& text, size_t width) {
  // Each line of `text` wrapped as the tables' prose is (text_table.h).
  std::string out;
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) out += presentation::text_wrap(line, width);
  if (!out.empty()) out.pop_back();  // text_wrap ends every line; the last is CLI11's to end
  return out;
}

size_t HelpFormatter::description_width() const {
  // Help read by a program (a pipe or a file, COLUMNS unset) keeps each description
  // on one line, for grep; a terminal, or a width asked for, gets it wrapped.
  if (::isatty(STDOUT_FILENO) == 0 && std::getenv("COLUMNS") == nullptr) return SIZE_MAX;
  // Narrower than 30 columns a description would take more lines than it is worth.
  const size_t columns = data::terminal_columns();
  return std::max<size_t>(30, columns > column_width_ ? columns - column_width_ : 0);
}

std::string HelpFormatter::make_option_desc(const CLI::Option* opt) const {
  return help_wrap(opt->get_description(), description_width());
}

std::string HelpFormatter::make_subcommand(const CLI::App* sub) const {
  std::stringstream out;
  CLI::detail::format_help(out, sub->get_display_name(true),
                           help_wrap(sub->get_description(), description_width()), column_width_);
  return out.str();
}

std::string HelpFormatter::make_description(const CLI::App* app) const {
  const std::string desc = CLI::Formatter::make_description(app);
  if (desc.empty() || description_width() == SIZE_MAX) return desc;
  return help_wrap(desc, data::terminal_columns()) + "\n";
}

void help_install(CLI::App& app) {
  app.formatter(std::make_shared<HelpFormatter>());
}

}  // namespace fanout::app
