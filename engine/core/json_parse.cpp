#include "engine/core/json_parse.h"

#include "engine/core/check.h"

namespace fanout {

std::string json_error_text(const std::exception& e) {
  std::string why = e.what();
  if (auto pos = why.find("] "); pos != std::string::npos) why = why.substr(pos + 2);
  return why;
}

nlohmann::json json_parse(const std::string& text, const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    detail::throw_error(detail::str_cat(what, ": ", json_error_text(e)));
  }
}

}  // namespace fanout
