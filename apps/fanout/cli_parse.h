#pragma once
// What `fanout` says when its command line does not parse: one line naming the
// word that was wrong for the (sub)command it was given to, e.g. "unknown flag
// --stepz for 'fanout train'; did you mean --steps?", "--steps given twice (5 and
// 6); give it once", instead of CLI11's own texts ("The following arguments were
// not expected: 5 --stepz", "At Most 1 required but received 2").

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace fanout::app {

// Edit distance (insertions, deletions, substitutions) of two words.
size_t edit_distance(const std::string& a, const std::string& b);

// The entry of `names` closest to `word` (a small edit distance, or `word` a prefix
// of it), or "" when none is close enough to be a likely typo.
std::string closest_name(const std::string& word, const std::vector<std::string>& names);

// "" when `word` (argv[1]) is a subcommand of `app` or an option, else the error for it.
std::string unknown_command(const CLI::App& app, const std::string& word);

// The one line (without "fanout: error: ") for `error`, thrown by app.parse().
std::string parse_error_message(const CLI::App& app, const CLI::ParseError& error);

}  // namespace fanout::app
