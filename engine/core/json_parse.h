#pragma once
// JSON text from a user's file, parsed or refused in one line: nlohmann's
// message without its "[json.exception.parse_error.101]" prefix. Every JSON a user
// can hand fanout (configs, tokenizer.json, safetensors indexes, metrics, bench
// and trace files) goes through here, so nesting is bounded in one place: values
// nested deeper than kJsonMaxDepth are refused before nlohmann builds them (a
// value 100,000 deep would overflow the stack of any recursive walk over it, such
// as dump() while an error message is built).

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fanout {

// The deepest nesting of arrays and objects accepted; real files stay under 10.
inline constexpr size_t kJsonMaxDepth = 512;

// "" when `text`'s arrays and objects nest at most kJsonMaxDepth deep, else
// "nested deeper than 512 levels (at byte N)". Strings are skipped, escapes
// included; text that is not JSON at all is left for the parser to name.
std::string json_depth_problem(std::string_view text);

// The parsed value; a fanout::Error "<source>: not valid JSON: <why>" when `text`
// is not JSON, or "<source>: JSON nested deeper than 512 levels (at byte N)".
// `source` names where the text came from, usually its path.
nlohmann::json json_parse(std::string_view text, const std::string& source);

// The same check, as a value: nlohmann's discarded value (is_discarded()) when
// `text` is not JSON or nests too deep; for readers that skip a bad line.
nlohmann::json json_parse_or_discarded(std::string_view text);

// nlohmann's message for `e` without the "[json.exception....] " prefix.
std::string json_error_text(const std::exception& e);

}  // namespace fanout
