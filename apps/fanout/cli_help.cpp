#include "apps/fanout/cli_help.h"

#include <sstream>
#include <vector>

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

void help_install(CLI::App& app) {
  app.formatter(std::make_shared<HelpFormatter>());
}

}  // namespace fanout::app
