#pragma once
// Numeric flags of every subcommand go through add_number: the text must be a
// whole number (integers) or a finite number (reals) inside [lo, hi]. CLI11 alone
// takes an empty string for the default and wraps "-1" into an unsigned, so
// `--seed -1` or `--seq-len ''` would be accepted silently; here they are usage
// errors naming the flag and the accepted range. Text flags take not_empty, so an
// empty value is refused rather than read as "not given".

#include <cstdint>
#include <string>
#include <type_traits>

#include <CLI/CLI.hpp>

#include "engine/core/number_text.h"

namespace fanout::app {

template <typename T>
CLI::Validator number_in(T lo, T hi) {
  static_assert(std::is_arithmetic_v<T>);
  return CLI::Validator(
      [lo, hi](std::string& text) {
        if constexpr (std::is_integral_v<T>) {
          std::string why =
              number_problem(text, true, std::is_unsigned_v<T>, 0, 0, static_cast<int64_t>(lo),
                             static_cast<int64_t>(hi), static_cast<uint64_t>(hi));
          // CLI11 converts with base 0 ("0300" would become 192): hand it the plain digits.
          if (why.empty()) text = canonical_whole_number(text);
          return why;
        } else {
          return number_problem(text, false, false, static_cast<double>(lo),
                                static_cast<double>(hi), 0, 0, 0);
        }
      },
      "NUMBER");
}

// cmd->add_option(flag, member, help) with the range check and the default shown.
template <typename T>
CLI::Option* add_number(CLI::App* cmd, const std::string& flag, T& member, const std::string& help,
                        T lo, T hi) {
  return cmd->add_option(flag, member, help)->capture_default_str()->transform(number_in(lo, hi));
}

// `--labels ""`: a usage error, not the default quietly.
inline CLI::Validator not_empty() {
  return CLI::Validator(
      [](std::string& text) {
        const char* why = "an empty value is not allowed: give one or leave the flag out";
        return text.empty() ? std::string(why) : std::string();
      },
      "");
}

}  // namespace fanout::app
