#pragma once
// JSON text from a user's file, parsed or refused in one line: nlohmann's
// message without its "[json.exception.parse_error.101]" prefix.

#include <string>

#include <nlohmann/json.hpp>

namespace fanout {

// The parsed value; a fanout::Error "<what>: <why>" when `text` is not JSON, e.g.
// json_parse(text, path + ": not valid JSON").
nlohmann::json json_parse(const std::string& text, const std::string& what);

// nlohmann's message for `e` without the "[json.exception....] " prefix.
std::string json_error_text(const std::exception& e);

}  // namespace fanout
