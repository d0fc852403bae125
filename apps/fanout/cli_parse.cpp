#include "apps/fanout/cli_parse.h"

#include <algorithm>
#include <cstddef>

#include "apps/fanout/cli_help.h"

namespace fanout::app {

namespace {

// The root app and each subcommand the command line entered, outermost first.
std::vector<const CLI::App*> parsed_chain(const CLI::App& app) {
  std::vector<const CLI::App*> chain = {&app};
  while (true) {
    const std::vector<CLI::App*> subs = chain.back()->get_subcommands();
    if (subs.empty()) return chain;
    chain.push_back(subs.front());
  }
}

// "fanout tokenizer train" for the app `chain` ends with.
std::string command_path(const std::vector<const CLI::App*>& chain) {
  std::string path = "fanout";
  for (size_t i = 1; i < chain.size(); ++i) path += " " + chain[i]->get_name();
  return path;
}

// The subcommands `app` lists in its --help.
std::vector<std::string> visible_subcommands(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (!sub->get_name().empty() && !sub->get_group().empty()) names.push_back(sub->get_name());
  }
  return names;
}

// Every spelling of every option `app` lists in its --help: --steps, -h, --no-shuffle.
std::vector<std::string> visible_flags(const CLI::App& app) {
  std::vector<std::string> flags;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty() || opt->get_positional()) continue;
    for (const std::string& l : opt->get_lnames()) flags.push_back("--" + l);
    for (const std::string& s : opt->get_snames()) flags.push_back("-" + s);
  }
  return flags;
}

// The error for `word`, which the subcommand at the end of `chain` did not expect.
std::string unexpected_word(const std::vector<const CLI::App*>& chain, const std::string& word) {
  const CLI::App& app = *chain.back();
  const std::string path = command_path(chain);
  const std::string see = " (see " + path + " --help)";
  if (word.size() > 1 && word[0] == '-') {
    const std::string flag = word.substr(0, word.find('='));  // --stepz=5 names --stepz
    const std::string best = closest_name(flag, visible_flags(app));
    return "unknown flag " + flag + " for '" + path + "'" +
           (best.empty() ? see : "; did you mean " + best + "?");
  }
  const std::vector<std::string> commands = visible_subcommands(app);
  if (!commands.empty()) {
    const std::string best = closest_name(word, commands);
    return "unknown command '" + word + "' for '" + path + "'" +
           (best.empty() ? see : "; did you mean '" + best + "'?");
  }
  return "unexpected argument '" + word + "' for '" + path + "' (a flag takes one value; see " +
         path + " --help)";
}

// "5 and 6", "5, 6 and 7".
std::string and_list(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += i + 1 == items.size() ? " and " : ", ";
    out += items[i];
  }
  return out;
}

// The error for an option of `app` given more often than it takes values, or "".
// Options that take a list (--data FILE...) and flags (the last one counts) may repeat.
std::string repeated_option(const CLI::App& app) {
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_multi_option_policy() != CLI::MultiOptionPolicy::Throw) continue;
    const int most = opt->get_items_expected_max();
    if (most >= CLI::detail::expected_max_vector_size) continue;
    const std::vector<std::string>& given = opt->results();
    if (given.size() <= static_cast<size_t>(std::max(most, 1))) continue;
    std::string name = opt->get_name(false, true);
    std::replace(name.begin(), name.end(), ',', '/');  // --val-batches/--eval-batches
    const std::string times = given.size() == 2 ? "twice" : std::to_string(given.size()) + " times";
    return name + " given " + times + " (" + and_list(given) + "); give it once";
  }
  return "";
}

}  // namespace

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

std::string closest_name(const std::string& word, const std::vector<std::string>& names) {
  // Compared without the dashes, so "-x" is not one edit from every short flag.
  auto bare = [](const std::string& s) {
    return s.substr(std::min(s.find_first_not_of('-'), s.size()));
  };
  const std::string w = bare(word);
  if (w.empty()) return "";
  // Against the whole name, and (a little less close) its leading words: --vocb is
  // one edit from the "vocab" of --vocab-size.
  std::string best;
  size_t best_score = 5;  // at most two edits, and fewer than half the word
  for (const std::string& name : names) {
    const std::string n = bare(name);
    for (size_t end = 0; end != std::string::npos; end = n.find('-', end + 1)) {
      const bool whole = end == 0;
      const size_t d = edit_distance(w, whole ? n : n.substr(0, end));
      const size_t score = 2 * d + (whole ? 0 : 1);
      if (score < best_score && 2 * d < std::max<size_t>(w.size(), 2)) {
        best_score = score, best = name;
      }
    }
  }
  if (!best.empty() || w.size() < 3) return best;
  // A shortened name: --vocab for --vocab-size.
  for (const std::string& name : names) {
    if (bare(name).rfind(w, 0) == 0) return name;
  }
  return "";
}

std::string unknown_command(const CLI::App& app, const std::string& word) {
  if (word.empty() || word[0] == '-') return "";
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == word) return "";
  }
  const std::string best = closest_name(word, visible_subcommands(app));
  return "unknown command '" + word + "'" +
         (best.empty() ? std::string(" (see fanout --help)") : "; did you mean '" + best + "'?");
}

std::string parse_error_message(const CLI::App& app, const CLI::ParseError& error) {
  const std::vector<const CLI::App*> chain = parsed_chain(app);
  // A word nothing expected comes first: the errors CLI11 finds next (a required
  // flag "missing") are often only its consequence. CLI11 hands a positional word a
  // subcommand did not take up to its parents: it is the innermost command's.
  for (size_t i = chain.size(); i-- > 0;) {
    std::vector<std::string> extras = chain[i]->remaining();
    // CLI11 lists the "--" that ends the flags (launch's command follows it) among
    // the words it did not take when another error stopped it: it is not the error.
    std::erase(extras, std::string("--"));
    if (extras.empty()) continue;
    const std::string& word = extras.front();
    const bool flag = word.size() > 1 && word[0] == '-';
    const size_t owner = flag ? i + 1 : chain.size();
    return unexpected_word({chain.begin(), chain.begin() + static_cast<ptrdiff_t>(owner)}, word);
  }
  // CLI11 checks each value before it counts them: a bad value is named as such.
  const bool mismatch = dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr;
  for (const CLI::App* sub : chain) {
    if (std::string why = repeated_option(*sub); mismatch && !why.empty()) return why;
  }
  const std::string see = " (see " + command_path(chain) + " --help)";
  if (chain.size() == 1 && dynamic_cast<const CLI::RequiredError*>(&error) != nullptr &&
      app.get_subcommands().empty()) {
    return "no command given" + see;
  }
  // "--steps: 1 required INT:NUMBER missing": the flag ended the line without its value.
  const std::string what = error.what();
  if (mismatch && what.ends_with(" missing")) {
    const std::string name = what.substr(0, what.find(':'));
    if (const CLI::Option* opt = chain.back()->get_option_no_throw(name); opt != nullptr) {
      return name + " needs a value (" + help_type_name(*opt) + ")" + see;
    }
  }
  return what + see;
}

}  // namespace fanout::app
