#include "engine/core/json_parse.h"

#include "engine/core/check.h"

namespace fanout {

std::string json_error_text(const std::exception& e) {
  std::string why = e.what();
  if (auto pos = why.find("] "); pos != std::string::npos) why = why.substr(pos + 2);
  return why;
}

std::string json_depth_problem(std::string_view text) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kJsonMaxDepth)
        return detail::str_cat("nested deeper than ", kJsonMaxDepth, " levels (at byte ", i, ")");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return "";
}

nlohmann::json json_parse(std::string_view text, const std::string& source) {
  if (std::string why = json_depth_problem(text); !why.empty())
    detail::throw_error(detail::str_cat(source, ": JSON ", why));
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    detail::throw_error(detail::str_cat(source, ": not valid JSON: ", json_error_text(e)));
  }
}

nlohmann::json json_parse_or_discarded(std::string_view text) {
  if (!json_depth_problem(text).empty()) return nlohmann::json(nlohmann::json::value_t::discarded);
  return nlohmann::json::parse(text, nullptr, false);
}

}  // namespace fanout
