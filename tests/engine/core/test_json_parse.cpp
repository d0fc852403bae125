// json_parse: the one entry point for a user's JSON. Nesting is bounded before
// nlohmann builds a value (a 100,000-deep array crashed the recursive walk that
// built an error message), and every refusal is one line naming the source.

#include <doctest/doctest.h>

#include <string>

#include "engine/core/check.h"
#include "engine/core/json_parse.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using fanout::test::error_of;

namespace {
std::string nested(size_t depth, const std::string& inner = "1") {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += i % 2 ? "{\"k\":" : "[";
  s += inner;
  for (size_t i = depth; i-- > 0;) s += i % 2 ? "}" : "]";
  return s;
}
}  // namespace

TEST_CASE("json_parse takes nesting up to the bound and refuses one level more by name") {
  CHECK(json_parse(nested(kJsonMaxDepth), "a.json").is_array());
  CHECK(json_depth_problem(nested(kJsonMaxDepth)).empty());
  const std::string deep = nested(kJsonMaxDepth + 1);
  // 256 "[" and 256 "{\"k\":" open the first 512 levels: the 513th starts at byte 1536.
  CHECK(error_of([&] { json_parse(deep, "a.json"); }) ==
        "a.json: JSON nested deeper than 512 levels (at byte 1536)");
  CHECK(json_parse_or_discarded(deep).is_discarded());
  CHECK(json_parse_or_discarded("[1, 2]").size() == 2);
  CHECK(json_parse_or_discarded("[1, ").is_discarded());
}

TEST_CASE("json_parse refuses 100,000 levels in one line without building them") {
  for (const char* open : {"[", "{\"a\":"}) {
    std::string text;
    for (int i = 0; i < 100000; ++i) text += open;
    const std::string why = error_of([&] { json_parse(text, "deep.json"); });
    CHECK(why.rfind("deep.json: JSON nested deeper than 512 levels (at byte ", 0) == 0);
    CHECK(why.find('\n') == std::string::npos);
  }
}

TEST_CASE("brackets inside strings, escaped quotes included, do not count as nesting") {
  const std::string brackets(100000, '[');
  const std::string text = "{\"a\": \"" + brackets + "\", \"b\": \"\\\"" + brackets + "\"}";
  const nlohmann::json j = json_parse(text, "s.json");
  CHECK(j["a"].get<std::string>().size() == 100000);
  CHECK(j["b"].get<std::string>().size() == 100001);
  // A closing bracket in a string does not lower the depth either.
  CHECK(!json_depth_problem("[\"" + std::string(1000, ']') + "\"," + nested(600) + "]").empty());
}

TEST_CASE("json_parse names the source and nlohmann's reason without its prefix") {
  const std::string why = error_of([] { json_parse("{\"a\": ", "cfg.json"); });
  CHECK(why.rfind("cfg.json: not valid JSON: parse error at line 1, column 7", 0) == 0);
  CHECK(why.find("json.exception") == std::string::npos);
}
