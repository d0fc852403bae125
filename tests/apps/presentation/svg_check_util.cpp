#include "tests/apps/presentation/svg_check_util.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>

namespace fanout::test {

namespace {

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ':';
}

const std::set<std::string> kVoid = {"meta", "br", "hr", "img", "link", "input", "wbr"};

// Attribute (name, value) pairs of the start tag beginning at `at` ('<').
std::vector<std::pair<std::string, std::string>> attributes(const std::string& t, size_t at) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t i = at + 1;
  while (i < t.size() && name_char(t[i])) ++i;
  while (i < t.size() && t[i] != '>') {
    if (std::isspace(static_cast<unsigned char>(t[i])) || t[i] == '/') {
      ++i;
      continue;
    }
    const size_t n0 = i;
    while (i < t.size() && name_char(t[i])) ++i;
    const std::string name = t.substr(n0, i - n0);
    if (name.empty() || i >= t.size() || t[i] != '=') return out;
    const char q = t[i + 1];
    const size_t end = t.find(q, i + 2);
    if (end == std::string::npos) return out;
    out.emplace_back(name, t.substr(i + 2, end - i - 2));
    i = end + 1;
  }
  return out;
}

}  // namespace

std::string xml_problem(const std::string& t) {
  std::vector<std::string> open;
  auto at = [](size_t i) { return " at offset " + std::to_string(i); };
  for (size_t i = 0; i < t.size();) {
    if (t[i] == '&') {
      const size_t semi = t.find(';', i);
      if (semi == std::string::npos || semi - i > 8) return "a bare '&'" + at(i);
      const std::string e = t.substr(i, semi - i + 1);
      if (e != "&amp;" && e != "&lt;" && e != "&gt;" && e != "&quot;" && e != "&#39;" &&
          e.rfind("&#", 0) != 0)
        return "unknown entity " + e + at(i);
      i = semi + 1;
      continue;
    }
    if (t[i] == '>' && open.empty()) return "a '>' outside any element" + at(i);
    if (t[i] != '<') {
      ++i;
      continue;
    }
    if (t.compare(i, 4, "<!--") == 0) {
      const size_t end = t.find("-->", i);
      if (end == std::string::npos) return "an unclosed comment" + at(i);
      i = end + 3;
      continue;
    }
    if (t.compare(i, 2, "<!") == 0 || t.compare(i, 2, "<?") == 0) {
      i = t.find('>', i) + 1;
      if (i == 0) return "an unclosed declaration";
      continue;
    }
    const bool closing = i + 1 < t.size() && t[i + 1] == '/';
    size_t n0 = i + (closing ? 2 : 1), n1 = n0;
    while (n1 < t.size() && name_char(t[n1])) ++n1;
    const std::string name = t.substr(n0, n1 - n0);
    if (name.empty()) return "a '<' that starts no tag" + at(i);
    // The tag's end: the first '>' outside quotes.
    size_t j = n1;
    char quote = 0;
    for (; j < t.size(); ++j) {
      if (quote) {
        if (t[j] == quote)
          quote = 0;
        else if (t[j] == '<')
          return "a '<' inside an attribute of <" + name + ">" + at(j);
      } else if (t[j] == '\'' || t[j] == '"') {
        quote = t[j];
      } else if (t[j] == '=' && j + 1 < t.size() && t[j + 1] != '\'' && t[j + 1] != '"') {
        return "an unquoted attribute in <" + name + ">" + at(j);
      } else if (t[j] == '>') {
        break;
      }
    }
    if (j >= t.size()) return "an unclosed tag <" + name + ">" + at(i);
    if (closing) {
      if (open.empty() || open.back() != name)
        return "</" + name + "> closes " + (open.empty() ? "nothing" : "<" + open.back() + ">") +
               at(i);
      open.pop_back();
    } else if (t[j - 1] != '/' && !kVoid.count(name)) {
      open.push_back(name);
      // Style and script bodies are text up to their closing tag.
      if (name == "style" || name == "script") {
        const size_t end = t.find("</" + name + ">", j);
        if (end == std::string::npos) return "an unclosed <" + name + ">";
        j = end - 1;
      }
    }
    i = j + 1;
  }
  if (!open.empty()) return "<" + open.back() + "> is never closed";
  return "";
}

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

std::vector<std::string> attr_values(const std::string& text, const std::string& tag,
                                     const std::string& name) {
  std::vector<std::string> out;
  const std::string start = "<" + tag;
  for (size_t at = text.find(start); at != std::string::npos; at = text.find(start, at + 1)) {
    const char next = at + start.size() < text.size() ? text[at + start.size()] : '>';
    if (name_char(next)) continue;  // "<pathology" is not "<path"
    for (const auto& [n, v] : attributes(text, at))
      if (n == name) out.push_back(v);
  }
  return out;
}

std::vector<double> numbers_in(const std::string& text) {
  std::vector<double> out;
  const char* p = text.c_str();
  while (*p) {
    if (std::isdigit(static_cast<unsigned char>(*p)) || *p == '-' || *p == '.') {
      char* end = nullptr;
      const double v = std::strtod(p, &end);
      if (end != p) {
        out.push_back(v);
        p = end;
        continue;
      }
    }
    ++p;
  }
  return out;
}

bool has_non_finite_coordinate(const std::string& svg) {
  for (const char* tag : {"path", "rect", "line", "circle", "text", "svg"}) {
    for (const char* name :
         {"x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "width", "height", "d", "viewBox"}) {
      for (std::string v : attr_values(svg, tag, name)) {
        std::transform(v.begin(), v.end(), v.begin(),
                       [](unsigned char c) { return std::tolower(c); });
        if (v.find("nan") != std::string::npos || v.find("inf") != std::string::npos) return true;
      }
    }
  }
  return false;
}

std::vector<std::string> texts_of_class(const std::string& svg, const std::string& cls) {
  std::vector<std::string> out;
  for (const std::string q : {"'", "\""}) {
    const std::string start = "<text class=" + q + cls + q;
    for (size_t at = svg.find(start); at != std::string::npos; at = svg.find(start, at + 1)) {
      const size_t open_end = svg.find('>', at), close = svg.find("</text>", at);
      if (open_end == std::string::npos || close == std::string::npos) break;
      out.push_back(svg.substr(open_end + 1, close - open_end - 1));
    }
  }
  return out;
}

}  // namespace fanout::test
