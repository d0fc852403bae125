#pragma once
// Numbers a user types (flags, environment variables such as RANK or
// FANOUT_CPU_THREADS, fields of a spec like "4x2") are read by one set of rules:
// plain decimal digits, an optional '-' where negatives are allowed, nothing
// around them. "010" is ten (never octal), and " 3", "0x20", "3abc", "" and
// "1e3" (for a whole number) are refused with a message naming the text typed.

#include <cstdint>
#include <string>
#include <string_view>

namespace fanout {

// "" if `text` is a number of the kind described within its range, else why not,
// e.g. "'0x200' is not a whole number (expected 259..1048576)". Integers use
// [lo_i, hi_i] (hi_u for unsigned kinds); reals [lo_d, hi_d] and must be finite.
std::string number_problem(std::string_view text, bool integral, bool is_unsigned, double lo_d,
                           double hi_d, int64_t lo_i, int64_t hi_i, uint64_t hi_u);

// A whole number that number_problem accepted, without leading zeros ("0300" ->
// "300", "-0" -> "0"), for converters that would read a leading 0 as octal.
std::string canonical_whole_number(std::string_view text);

// The whole number `text` within [lo, hi]; else a fanout::Error "<what>: <problem>".
int64_t parse_whole_number(std::string_view text, int64_t lo, int64_t hi, std::string_view what);

}  // namespace fanout
