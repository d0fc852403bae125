#pragma once
// Numeric flags of every subcommand go through add_number: the text must be a
// whole number (integers) or a finite number (reals) inside [lo, hi]. CLI11 alone
// takes an empty string for the default and wraps "-1" into an unsigned, so
// `--seed -1` or `--seq-len ''` would be accepted silently; here they are usage
// errors naming the flag and the accepted range.

#include <cstdint>
#include <string>
#include <type_traits>

#include <CLI/CLI.hpp>

namespace fanout::app {

// "" if `text` is a number of kind T within [lo, hi], else why not.
std::string number_problem(const std::string& text, bool integral, bool is_unsigned, double lo_d,
                           double hi_d, int64_t lo_i, int64_t hi_i, uint64_t hi_u);

template <typename T>
CLI::Validator number_in(T lo, T hi) {
  static_assert(std::is_arithmetic_v<T>);
  return CLI::Validator(
      [lo, hi](std::string& text) {
        if constexpr (std::is_integral_v<T>) {
          return number_problem(text, true, std::is_unsigned_v<T>, 0, 0, static_cast<int64_t>(lo),
                                static_cast<int64_t>(hi), static_cast<uint64_t>(hi));
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
  return cmd->add_option(flag, member, help)->capture_default_str()->check(number_in(lo, hi));
}

}  // namespace fanout::app
