#include "apps/data/jsonl_documents.h"

#include <algorithm>
#include <cctype>

#include "engine/core/check.h"
#include "engine/core/json_parse.h"

namespace fanout::data {

namespace {
bool blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// "a number", "an array", "an object".
std::string kind_of(const nlohmann::json& j) {
  const std::string name = j.type_name();
  return (name[0] == 'a' || name[0] == 'o' ? "an " : "a ") + name;
}
}  // namespace

std::vector<JsonlDocument> jsonl_documents(std::string_view text, const std::string& path,
                                           const std::string& field, int64_t first_line,
                                           const char* field_hint) {
  std::vector<JsonlDocument> docs;
  int64_t line = first_line - 1;
  for (size_t pos = 0; pos < text.size();) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    const std::string_view row = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line;
    if (blank(row)) continue;
    const std::string where = path + ":" + std::to_string(line);
    const nlohmann::json j = json_parse(row, where);
    FANOUT_CHECK(j.is_object(), where, ": a JSON ", j.type_name(),
                 ", not an object (each line is one document, {\"", field, "\": \"...\"})");
    const auto it = j.find(field);
    FANOUT_CHECK(it != j.end(), where, ": no \"", field, "\" field (", field_hint, ")");
    FANOUT_CHECK(it->is_string(), where, ": \"", field, "\" holds ", kind_of(*it),
                 ", not a string");
    std::string doc = it->get<std::string>();
    if (!blank(doc)) docs.push_back({std::move(doc), line});
  }
  return docs;
}

bool jsonl_name(const std::string& path) {
  constexpr std::string_view kExt = ".jsonl";
  if (path.size() < kExt.size()) return false;
  return std::equal(
      kExt.begin(), kExt.end(), path.end() - static_cast<std::ptrdiff_t>(kExt.size()),
      [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); });
}

}  // namespace fanout::data
