#include "engine/core/number_text.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "engine/core/check.h"

namespace fanout {

namespace {
std::string range_text(bool integral, double lo_d, double hi_d, int64_t lo_i, uint64_t hi_u) {
  if (integral) return std::to_string(lo_i) + ".." + std::to_string(hi_u);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%g..%g", lo_d, hi_d);
  return buf;
}
}  // namespace

std::string number_problem(std::string_view sv, bool integral, bool is_unsigned, double lo_d,
                           double hi_d, int64_t lo_i, int64_t hi_i, uint64_t hi_u) {
  const std::string text(sv);
  const std::string range = range_text(integral, lo_d, hi_d, lo_i, is_unsigned ? hi_u : hi_i);
  if (text.empty()) return "an empty value is not a number (expected " + range + ")";
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (integral) {
    if (is_unsigned) {
      uint64_t v = 0;
      auto [end, ec] = std::from_chars(first, last, v);
      if (text[0] == '-' && text != "-0")
        return "'" + text + "' is negative (expected " + range + ")";
      if (ec == std::errc::result_out_of_range || (ec == std::errc() && end == last && v > hi_u))
        return "'" + text + "' is out of range (expected " + range + ")";
      if (ec != std::errc() || end != last)
        return "'" + text + "' is not a whole number (expected " + range + ")";
      if (v < static_cast<uint64_t>(std::max<int64_t>(lo_i, 0)))
        return "'" + text + "' is out of range (expected " + range + ")";
      return "";
    }
    int64_t v = 0;
    auto [end, ec] = std::from_chars(first, last, v);
    if (ec == std::errc::result_out_of_range ||
        (ec == std::errc() && end == last && (v < lo_i || v > hi_i)))
      return "'" + text + "' is out of range (expected " + range + ")";
    if (ec != std::errc() || end != last)
      return "'" + text + "' is not a whole number (expected " + range + ")";
    return "";
  }
  // strtod also reads "inf", "nan" and hex floats: all refused below or fine.
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(first, &end);
  if (end != last || end == first || std::isspace(static_cast<unsigned char>(text[0])))
    return "'" + text + "' is not a number (expected " + range + ")";
  // "1e400" overflows (ERANGE): out of range; "inf" and "nan" are not numbers here.
  if (errno == ERANGE) return "'" + text + "' is out of range (expected " + range + ")";
  if (!std::isfinite(v)) return "'" + text + "' is not a finite number (expected " + range + ")";
  if (v < lo_d || v > hi_d) return "'" + text + "' is out of range (expected " + range + ")";
  return "";
}

std::string canonical_whole_number(std::string_view text) {
  const bool negative = !text.empty() && text[0] == '-';
  std::string_view digits = negative ? text.substr(1) : text;
  while (digits.size() > 1 && digits[0] == '0') digits.remove_prefix(1);
  if (digits == "0") return "0";
  return (negative ? "-" : "") + std::string(digits);
}

int64_t parse_whole_number(std::string_view text, int64_t lo, int64_t hi, std::string_view what) {
  const std::string why = number_problem(text, true, false, 0, 0, lo, hi,
                                         static_cast<uint64_t>(std::max<int64_t>(hi, 0)));
  if (!why.empty()) detail::throw_error(detail::str_cat(what, ": ", why));
  int64_t v = 0;
  std::from_chars(text.data(), text.data() + text.size(), v);
  return v;
}

}  // namespace fanout
