// A run's own held-out split (held_out.h): the share in tokens (capped), the tail
// cut off after the first [EOT] in its first half, token files cut as a window of
// the same file, text documents divided with their tokens, and the unigram entropy
// of any token data agreeing with the in-memory one.

#include <doctest/doctest.h>

#include <cmath>
#include <numeric>

#include "apps/data/corpus.h"
#include "apps/data/held_out.h"
#include "apps/data/token_file.h"
#include "apps/data/tokenizer.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout;
using namespace fanout::data;
using fanout::test::TempDir;

namespace {

std::vector<int32_t> all_tokens(const TokenData& d) {
  std::vector<int32_t> out(static_cast<size_t>(d.token_count()));
  d.tokens_copy(0, d.token_count(), out.data());
  return out;
}

// Documents of `lengths` bytes ('a' + their index), packed as [BOT] doc [EOT].
TokenData documents(const std::vector<int>& lengths) {
  TokenData d;
  d.path = "docs.txt";
  for (size_t i = 0; i < lengths.size(); ++i) {
    d.documents.emplace_back(lengths[i], static_cast<int32_t>('a' + i));
    d.tokens.push_back(kBot);
    d.tokens.insert(d.tokens.end(), d.documents.back().begin(), d.documents.back().end());
    d.tokens.push_back(kEot);
  }
  return d;
}

}  // namespace

TEST_CASE("the held-out count is the share of the tokens, at least one, capped") {
  CHECK(held_out_count(1000, 0.05) == 50);
  CHECK(held_out_count(1000, 0) == 0);
  CHECK(held_out_count(1, 0.05) == 0);  // nothing would be left to train on
  CHECK(held_out_count(10, 0.01) == 1);
  CHECK(held_out_count(3, 0.5) == 2);
  CHECK(held_out_count(int64_t{1} << 30, 0.05) == kHeldOutMaxTokens);
}

TEST_CASE("a token file's held-out part is its tail, starting after an [EOT]") {
  TempDir dir("fanout-held-out");
  std::vector<int32_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), 0);  // no id is kEot (257) but one
  for (int32_t& t : tokens) t %= 250;
  tokens[930] = kEot;  // inside the first half of the last 100
  token_file_write_bin(dir / "a.bin", tokens);
  TokenData train = token_file_load(dir / "a.bin");
  const TokenData held = token_data_hold_out(train, 100);
  CHECK(train.token_count() == 931);
  CHECK(held.token_count() == 69);
  CHECK(held.from_bin);
  CHECK(held.map == train.map);  // the same open file, not a copy
  const std::vector<int32_t> a = all_tokens(train), b = all_tokens(held);
  CHECK(std::vector<int32_t>(tokens.begin(), tokens.begin() + 931) == a);
  CHECK(std::vector<int32_t>(tokens.begin() + 931, tokens.end()) == b);
  CHECK(held.token_at(0) == tokens[931]);
  CHECK(held.path == dir / "a.bin" + " (held out)");

  // An [EOT] past the first half (or none) leaves the cut where the share puts it.
  tokens[930] = 3, tokens[960] = kEot;
  token_file_write_bin(dir / "b.bin", tokens);
  TokenData late = token_file_load(dir / "b.bin");
  CHECK(token_data_hold_out(late, 100).token_count() == 100);
  CHECK(late.token_count() == 900);
}

TEST_CASE("a text file's documents are divided with its tokens") {
  // Each document is 2 + its length tokens: 12, 22, 7, 32 (73 in all).
  SUBCASE("the cut moves to a document's start") {
    TokenData d = documents({10, 20, 5, 30});
    const TokenData held = token_data_hold_out(d, 38);  // from 35: the [EOT] at 40 ends doc 2
    CHECK(d.token_count() == 41);
    CHECK(held.token_count() == 32);
    REQUIRE(d.documents.size() == 3);
    REQUIRE(held.documents.size() == 1);
    CHECK(held.documents[0] == std::vector<int32_t>(30, 'd'));
    CHECK(held.tokens.front() == kBot);
  }
  SUBCASE("no [EOT] in the first half: the document the cut falls in is divided") {
    TokenData d = documents({10, 60});
    const TokenData held = token_data_hold_out(d, 30);  // from 44: inside the 60-byte one
    CHECK(d.token_count() == 44);
    CHECK(held.token_count() == 30);
    REQUIRE(d.documents.size() == 2);
    REQUIRE(held.documents.size() == 1);
    CHECK(d.documents[1].size() == 31);  // [BOT] at 12, bytes 13..43
    CHECK(held.documents[0].size() == 29);
    CHECK(d.documents[1].size() + held.documents[0].size() == 60);
  }
  SUBCASE("the whole stream is kept: every token on one side or the other") {
    TokenData d = documents({3, 4, 5, 6, 7, 8});
    const std::vector<int32_t> before = d.tokens;
    const TokenData held = token_data_hold_out(d, 11);
    std::vector<int32_t> joined = d.tokens;
    joined.insert(joined.end(), held.tokens.begin(), held.tokens.end());
    CHECK(joined == before);
    CHECK(d.documents.size() + held.documents.size() == 6);
  }
}

TEST_CASE("the unigram entropy of token data agrees with the in-memory one, file or not") {
  TempDir dir("fanout-held-out");
  std::vector<int32_t> tokens;
  for (int i = 0; i < 5000; ++i) tokens.push_back((i * i + 3 * i) % 97);
  token_file_write_bin(dir / "a.bin", tokens);
  const TokenData file = token_file_load(dir / "a.bin");
  const double want = unigram_entropy(tokens);
  CHECK(want > 3.0);
  CHECK(std::abs(token_data_unigram_entropy(file, int64_t{1} << 40) - want) < 1e-12);
  TokenData memory;
  memory.tokens = tokens;
  CHECK(std::abs(token_data_unigram_entropy(memory, 1000) -
                 unigram_entropy({tokens.begin(), tokens.begin() + 1000})) < 1e-12);
}
