#include "apps/data/tokenizer.h"

namespace fanout::data {

std::vector<int32_t> byte_encode(std::string_view text) {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string byte_decode(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    if (id >= 0 && id < 256) {
      out.push_back(static_cast<char>(id));
    } else if (id > kPad || id < 0) {
      out += "<" + std::to_string(id) + ">";
    }
  }
  return out;
}

std::vector<std::string> split_documents(std::string_view text) {
  std::vector<std::string> docs;
  std::string current;
  size_t pos = 0;
  bool blank_run = false;
  auto flush = [&] {
    while (!current.empty() && (current.back() == '\n' || current.back() == '\r'))
      current.pop_back();
    if (!current.empty()) docs.push_back(current);
    current.clear();
  };
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos + 1);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    bool blank = line.find_first_not_of(" \t\r\n") == std::string_view::npos;
    if (blank) {
      if (!blank_run) flush();
      blank_run = true;
      continue;
    }
    blank_run = false;
    current += line;
  }
  flush();
  return docs;
}

}  // namespace fanout::data
