// The one set of number rules for flags and environment variables: plain decimal
// digits, a '-' only where negatives are allowed, nothing around them.

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "engine/core/number_text.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using fanout::test::error_of;

namespace {
std::string whole(const std::string& text, int64_t lo = 0, int64_t hi = 1000) {
  return number_problem(text, true, false, 0, 0, lo, hi, 0);
}
std::string real(const std::string& text) {
  return number_problem(text, false, false, 0.0, 1.0, 0, 0, 0);
}
}  // namespace

TEST_CASE("whole numbers are plain decimal: leading zeros are decimal, nothing else is taken") {
  CHECK(whole("300").empty());
  CHECK(whole("0300").empty());  // three hundred, never octal 192
  CHECK(whole("0").empty());
  for (const char* bad : {"0x200", " 300", "300 ", "+300", "3e2", "3.0", "3abc", "0o7", "--1"}) {
    CAPTURE(bad);
    CHECK(whole(bad) == std::string("'") + bad + "' is not a whole number (expected 0..1000)");
  }
  CHECK(whole("") == "an empty value is not a number (expected 0..1000)");
  CHECK(whole("1001") == "'1001' is out of range (expected 0..1000)");
  CHECK(whole("-1") == "'-1' is out of range (expected 0..1000)");
  CHECK(whole("99999999999999999999") ==
        "'99999999999999999999' is out of range (expected 0..1000)");
  CHECK(whole("-5", -10, 10).empty());
}

TEST_CASE("canonical_whole_number hands converters digits without leading zeros") {
  CHECK(canonical_whole_number("0300") == "300");
  CHECK(canonical_whole_number("000") == "0");
  CHECK(canonical_whole_number("-0") == "0");
  CHECK(canonical_whole_number("-007") == "-7");
  CHECK(canonical_whole_number("42") == "42");
}

TEST_CASE("parse_whole_number returns the value or one line naming what was read") {
  CHECK(parse_whole_number("010", 0, 100, "RANK") == 10);
  CHECK(parse_whole_number("-3", -5, 5, "X") == -3);
  CHECK(error_of([] { parse_whole_number(" 0", 0, 7, "RANK"); }) ==
        "RANK: ' 0' is not a whole number (expected 0..7)");
  CHECK(error_of([] { parse_whole_number("8", 0, 7, "RANK"); }) ==
        "RANK: '8' is out of range (expected 0..7)");
  CHECK(parse_whole_number("9223372036854775807", 0, std::numeric_limits<int64_t>::max(), "N") ==
        std::numeric_limits<int64_t>::max());
}

TEST_CASE("reals must be finite numbers in range, with no space around them") {
  CHECK(real("0.5").empty());
  CHECK(real("1e-3").empty());
  CHECK(real(" 0.5") == "' 0.5' is not a number (expected 0..1)");
  CHECK(real("0.5x") == "'0.5x' is not a number (expected 0..1)");
  CHECK(real("nan") == "'nan' is not a finite number (expected 0..1)");
  CHECK(real("1e400") == "'1e400' is out of range (expected 0..1)");
  CHECK(real("2") == "'2' is out of range (expected 0..1)");
}
