// The embedded default corpus: the same seed gives the same documents (pinned by a
// checksum), sizes stay in range, held-out documents are new, arithmetic facts are
// right, the token data equals what token_file_load reads from the same documents
// in a text file, and unigram_entropy matches closed forms.

#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <unordered_set>
#include <vector>

#include "apps/data/corpus.h"
#include "apps/data/token_file.h"
#include "apps/data/tokenizer.h"
#include "engine/core/check.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using namespace fanout::data;

using fanout::test::TempDir;

namespace {

size_t total_bytes(const std::vector<std::string>& docs) {
  size_t n = 0;
  for (const auto& d : docs) n += d.size();
  return n;
}

// A fresh directory, removed with its contents at scope exit.

// Writes the documents as a text file separated by blank lines and loads it back.
TokenData load_as_text_file(const std::vector<std::string>& docs) {
  TempDir dir;
  std::string path = dir / "corpus.txt";
  {
    std::ofstream out(path, std::ios::binary);
    for (size_t i = 0; i < docs.size(); ++i) out << (i > 0 ? "\n\n" : "") << docs[i];
    out << "\n";
  }
  return token_file_load(path);
}

}  // namespace

TEST_CASE("default_corpus is deterministic for a seed and differs between seeds") {
  auto start = std::chrono::steady_clock::now();
  Corpus a = default_corpus();
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("default_corpus() took ", ms, " ms");
  Corpus b = default_corpus(kDefaultCorpusSeed);
  CHECK(a.name == b.name);
  CHECK(a.train_documents == b.train_documents);
  CHECK(a.heldout_documents == b.heldout_documents);
  Corpus c = default_corpus(7);
  CHECK(c.train_documents != a.train_documents);
  CHECK(c.heldout_documents != a.heldout_documents);
  CHECK(c.name != a.name);
}

// The corpus bytes are pinned: a change to the grammar must update this on purpose,
// and a compiler or standard library that draws differently fails here. (GCC and
// Clang evaluate operands in different orders; both give this value.)
TEST_CASE("default corpus bytes match the pinned checksum") {
  Corpus c = default_corpus();
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64, a 0xff byte after each document
  auto mix = [&h](unsigned char byte) { h = (h ^ byte) * 1099511628211ull; };
  for (const auto* docs : {&c.train_documents, &c.heldout_documents}) {
    for (const std::string& d : *docs) {
      for (unsigned char ch : d) mix(ch);
      mix(0xff);
    }
  }
  CHECK(h == 0xe0d9bb93921bb821ull);
  CHECK(c.train_documents[0].rfind("One day, Emma went to the hill with Tom.", 0) == 0);
}

TEST_CASE("default_corpus sizes are in range and documents are single paragraphs") {
  Corpus c = default_corpus();
  size_t train = total_bytes(c.train_documents), heldout = total_bytes(c.heldout_documents);
  MESSAGE("train: ", train, " bytes in ", c.train_documents.size(),
          " documents; held out: ", heldout, " bytes in ", c.heldout_documents.size(),
          " documents");
  CHECK(train >= 400'000);
  CHECK(train <= 600'000);
  CHECK(heldout >= train * 3 / 100);
  CHECK(heldout <= train * 7 / 100);
  for (const auto* docs : {&c.train_documents, &c.heldout_documents}) {
    for (const std::string& d : *docs) {
      REQUIRE(!d.empty());
      // Sentences start with a capital (or a digit) and every document ends a sentence.
      CHECK(((d[0] >= 'A' && d[0] <= 'Z') || (d[0] >= '0' && d[0] <= '9')));
      CHECK(d.back() == '.');
      CHECK(d.find("\n\n") == std::string::npos);
      CHECK(split_documents(d) == std::vector<std::string>{d});
    }
  }
}

TEST_CASE("default corpus held-out documents are non-empty and not in the training set") {
  Corpus c = default_corpus();
  REQUIRE(!c.heldout_documents.empty());
  std::unordered_set<std::string> train(c.train_documents.begin(), c.train_documents.end());
  CHECK(train.size() == c.train_documents.size());
  std::unordered_set<std::string> heldout;
  for (const std::string& d : c.heldout_documents) {
    CHECK(!d.empty());
    CHECK(train.count(d) == 0);
    CHECK(heldout.insert(d).second);
  }
}

TEST_CASE("arithmetic facts in the corpus are correct") {
  Corpus c = default_corpus();
  // "3 + 4 = 7." and "Q: What is 3 + 4? A: 7."
  const std::regex fact(R"((\d+) ([-+*]) (\d+) = (\d+)\.)");
  const std::regex question(R"(What is (\d+) ([-+*]) (\d+)\? A: (\d+)\.)");
  int checked = 0, wrong = 0;
  for (const auto* docs : {&c.train_documents, &c.heldout_documents}) {
    for (const std::string& d : *docs) {
      if (d.find(" = ") == std::string::npos && d.find("What is") == std::string::npos) continue;
      for (const std::regex* re : {&fact, &question}) {
        for (std::sregex_iterator it(d.begin(), d.end(), *re), end; it != end; ++it) {
          long a = std::stol((*it)[1]), b = std::stol((*it)[3]), got = std::stol((*it)[4]);
          char op = (*it)[2].str()[0];
          long want = op == '+' ? a + b : op == '-' ? a - b : a * b;
          ++checked;
          if (got != want) {
            ++wrong;
            MESSAGE("wrong: ", it->str());
          }
        }
      }
    }
  }
  MESSAGE(checked, " arithmetic facts checked");
  CHECK(checked > 1000);
  CHECK(wrong == 0);
}

TEST_CASE("corpus_token_data equals token_file_load of the same documents as a text file") {
  Corpus c = default_corpus();
  for (const auto* docs : {&c.heldout_documents, &c.train_documents}) {
    TokenData embedded = corpus_token_data(*docs, "<embedded default corpus: test>");
    TokenData file = load_as_text_file(*docs);
    CHECK(embedded.path == "<embedded default corpus: test>");
    CHECK(!embedded.from_bin);
    CHECK(embedded.tokens == file.tokens);
    CHECK(embedded.documents == file.documents);
    CHECK(embedded.documents.size() == docs->size());
    CHECK(embedded.tokens.size() == total_bytes(*docs) + 2 * docs->size());
  }
  // Documents a text file would split or trim are refused.
  CHECK_THROWS_AS(corpus_token_data({"one.\n\ntwo."}, "x"), Error);
  CHECK_THROWS_AS(corpus_token_data({"one.\n"}, "x"), Error);
  CHECK_THROWS_AS(corpus_token_data({""}, "x"), Error);
  CHECK_THROWS_AS(corpus_token_data({}, "x"), Error);
  TokenData two_lines = corpus_token_data({"one.\ntwo."}, "x");
  CHECK(two_lines.tokens == load_as_text_file({"one.\ntwo."}).tokens);
}

TEST_CASE("corpus unigram_entropy is ln 4 for a uniform 4-symbol stream and 0 for a constant one") {
  std::vector<int32_t> uniform;
  for (int i = 0; i < 1000; ++i) uniform.push_back(i % 4 == 3 ? kEot : i % 4);
  CHECK(unigram_entropy(uniform) == doctest::Approx(std::log(4.0)).epsilon(1e-12));
  CHECK(unigram_entropy(std::vector<int32_t>(77, 'a')) == 0.0);
  // Two symbols at 1/4 and 3/4.
  CHECK(unigram_entropy({1, 2, 2, 2}) ==
        doctest::Approx(-(0.25 * std::log(0.25) + 0.75 * std::log(0.75))).epsilon(1e-12));
  CHECK_THROWS_AS(unigram_entropy({}), Error);
}

TEST_CASE("the default corpus byte entropy is well below ln 256") {
  Corpus c = default_corpus();
  double train = unigram_entropy(corpus_token_data(c.train_documents, "train").tokens);
  double heldout = unigram_entropy(corpus_token_data(c.heldout_documents, "heldout").tokens);
  MESSAGE("unigram entropy (nats/token): train ", train, ", held out ", heldout,
          ", ln 256 = ", std::log(256.0));
  CHECK(train < 0.75 * std::log(256.0));
  CHECK(train > 2.0);  // not degenerate
  CHECK(std::abs(train - heldout) < 0.1);
}
