// What users read never cites the project's tracker: no string literal in the
// sources that build fanout and its libraries (apps/, engine/, ops/, models/)
// names an issue ("the CUDA issue", "[3/6]"); a message says what is not supported
// and what to use instead. The scan lexes C++ (comments, escapes, character and
// raw string literals), so words in comments do not count and text in strings does.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

// The string literals of a C++ source, comments skipped.
std::vector<std::string> string_literals(const std::string& src) {
  std::vector<std::string> out;
  size_t i = 0;
  const size_t n = src.size();
  while (i < n) {
    if (src.compare(i, 2, "//") == 0) {
      i = src.find('\n', i);
      if (i == std::string::npos) break;
    } else if (src.compare(i, 2, "/*") == 0) {
      i = src.find("*/", i + 2);
      if (i == std::string::npos) break;
      i += 2;
    } else if (src[i] == 'R' && i + 1 < n && src[i + 1] == '"' &&
               (i == 0 ||
                !(std::isalnum(static_cast<unsigned char>(src[i - 1])) || src[i - 1] == '_'))) {
      size_t open = src.find('(', i + 2);
      if (open == std::string::npos) break;
      const std::string close = ")" + src.substr(i + 2, open - i - 2) + "\"";
      size_t end = src.find(close, open + 1);
      if (end == std::string::npos) break;
      out.push_back(src.substr(open + 1, end - open - 1));
      i = end + close.size();
    } else if (src[i] == '"' || src[i] == '\'') {
      const char quote = src[i];
      std::string text;
      for (++i; i < n && src[i] != quote; ++i) {
        if (src[i] == '\\' && i + 1 < n) ++i;
        text += src[i];
      }
      if (quote == '"') out.push_back(text);
      ++i;
    } else {
      ++i;
    }
  }
  return out;
}

// "file: text" for every literal that cites the tracker.
std::vector<std::string> tracker_references(const std::string& name, const std::string& src) {
  static const std::regex tracker(R"(\[[0-9]+/[0-9]+\]|\bissues?\b)", std::regex::icase);
  std::vector<std::string> hits;
  for (const std::string& s : string_literals(src))
    if (std::regex_search(s, tracker)) hits.push_back(name + ": " + s);
  return hits;
}

}  // namespace

TEST_CASE("the scan finds tracker references in strings and nowhere else") {
  const std::string src = R"SRC(
    // the CUDA issue [3/6] in a comment is fine
    /* so is issue [1/8] here */
    f("bf16 arrives with the CUDA issue [3/6]");
    g("fine \"quoted\" text", 'x', '"');
    h(R"(raw: see issue 24)");
    k("done: [3/6] steps"); m("Bucket #0 of 3");
  )SRC";
  auto hits = tracker_references("x.cpp", src);
  REQUIRE(hits.size() == 3);
  CHECK(hits[0] == "x.cpp: bf16 arrives with the CUDA issue [3/6]");
  CHECK(hits[1] == "x.cpp: raw: see issue 24");
  CHECK(hits[2] == "x.cpp: done: [3/6] steps");
}

TEST_CASE("no user-facing string cites the project's tracker") {
  namespace fs = std::filesystem;
  const fs::path root = FANOUT_SOURCE_DIR;
  std::vector<std::string> hits;
  int files = 0;
  for (const char* dir : {"apps", "engine", "ops", "models"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() ||
          !(ext == ".cpp" || ext == ".h" || ext == ".cu" || ext == ".cuh"))
        continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      ++files;
      for (std::string& h :
           tracker_references(fs::relative(entry.path(), root).string(), text.str()))
        hits.push_back(std::move(h));
    }
  }
  CHECK(files > 100);  // the scan saw the sources
  for (const std::string& h : hits) MESSAGE("cites the tracker: ", h);
  CHECK(hits.empty());
}
