// fanout prepare as a library: text files -> OUT/train.bin and OUT/val.bin read back
// by token_file_load as [BOT] doc [EOT] of each document's encoding, the uint16 /
// uint32 choice by vocabulary, the deterministic split, and refusals before writing.

#include "apps/data/prepare.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "apps/data/bpe_trainer.h"
#include "apps/data/byte_level.h"
#include "apps/data/corpus.h"
#include "apps/data/data_loader.h"
#include "apps/data/token_file.h"
#include "apps/data/tokenizer.h"
#include "engine/core/file_io.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout::data;
using fanout::test::error_of;
using fanout::test::file_read;
using fanout::test::file_write;
using fanout::test::has;
using fanout::test::TempDir;

namespace {

// `n` documents of the embedded corpus, joined by blank lines.
std::vector<std::string> corpus_docs(size_t n) {
  std::vector<std::string> docs = default_corpus().train_documents;
  docs.resize(n);
  return docs;
}
std::string join(const std::vector<std::string>& docs) {
  std::string text;
  for (const std::string& d : docs) text += (text.empty() ? "" : "\n\n") + d;
  return text;
}

// A byte-level BPE trained on the corpus, written to `path`.
std::shared_ptr<const TextTokenizer> bpe_write(const std::string& path, int64_t vocab = 400) {
  BpeTrainOptions options;
  options.vocab_size = vocab;
  auto tok = bpe_tokenizer(bpe_train_texts({join(corpus_docs(200))}, options), path);
  fanout::file_write_atomic(path, tok->to_json(), "test");
  return tok;
}

std::vector<int32_t> all_tokens(const TokenData& d) {
  std::vector<int32_t> out(static_cast<size_t>(d.token_count()));
  d.tokens_copy(0, d.token_count(), out.data());
  return out;
}

int32_t magic_of(const std::string& path) {
  const std::string bytes = file_read(path);
  int32_t magic = 0;
  std::memcpy(&magic, bytes.data(), 4);
  return magic;
}

}  // namespace

TEST_CASE("prepare writes [BOT] doc [EOT] of each document, split between train and val") {
  TempDir dir("fanout-prepare");
  auto tok = bpe_write(dir / "tok.json");
  REQUIRE(tok->vocab_size() == 400);
  const std::vector<std::string> a = corpus_docs(30), b = {"Second file.", "Its last one."};
  file_write(dir / "a.txt", join(a) + "\n");
  file_write(dir / "b.txt", "\n\n" + join(b));
  PrepareOptions o;
  o.tokenizer = dir / "tok.json";
  o.data = {dir / "a.txt", dir / "b.txt"};
  o.out = dir / "out/nested";  // created
  o.val_fraction = 0.1;
  const PrepareResult r = prepare_run(o);
  CHECK(r.documents == 32);
  CHECK(r.val_documents == 3);  // round(0.1 * 32)
  CHECK(r.train_documents == 29);
  CHECK(r.token_bytes == 2);
  REQUIRE(r.files.size() == 2);

  // Expected: the documents in file order, each to the side prepare_is_val picks.
  std::vector<std::string> docs = a;
  docs.insert(docs.end(), b.begin(), b.end());
  std::vector<int32_t> train, val;
  for (size_t i = 0; i < docs.size(); ++i) {
    std::vector<int32_t>& to = prepare_is_val(static_cast<int64_t>(i), 32, 3) ? val : train;
    to.push_back(tok->bot());
    for (int32_t id : tok->encode(docs[i])) to.push_back(id);
    to.push_back(tok->eot());
  }
  const TokenData train_bin = token_file_load(dir / "out/nested/train.bin", "--data", *tok);
  const TokenData val_bin = token_file_load(dir / "out/nested/val.bin", "--data", *tok);
  CHECK(train_bin.from_bin);
  CHECK(all_tokens(train_bin) == train);
  CHECK(all_tokens(val_bin) == val);
  CHECK(r.train_tokens == static_cast<int64_t>(train.size()));
  CHECK(r.val_tokens == static_cast<int64_t>(val.size()));
  CHECK(magic_of(dir / "out/nested/train.bin") == kBinMagicU16);
  // Merged tokens (ids past the 3 specials and 256 bytes): the encoding is the BPE's.
  CHECK(*std::max_element(train.begin(), train.end()) > 258);
  CHECK(train.size() < join(a).size());

  // The same as the text path of token_file_load with this tokenizer, for one file
  // whose documents all go to train.bin (one document: no val.bin).
  file_write(dir / "one.txt", a[0]);
  o.data = {dir / "one.txt"};
  o.out = dir / "one";
  const PrepareResult one = prepare_run(o);
  CHECK(one.val_documents == 0);
  CHECK(one.files == std::vector<std::string>{dir / "one/train.bin"});
  CHECK(!std::filesystem::exists(dir / "one/val.bin"));
  CHECK(all_tokens(token_file_load(dir / "one/train.bin", {}, *tok)) ==
        token_file_load(dir / "one.txt", {}, *tok).tokens);
  CHECK(has(prepare_summary(r), "prepare: 32 documents (29 train, 3 val)"));
  CHECK(has(prepare_summary(r), "as uint16 -> "));
  CHECK(has(prepare_summary(r), "tokens/s"));
}

TEST_CASE("prepare writes uint16 tokens when the vocabulary fits 65536 ids, else uint32") {
  TempDir dir("fanout-prepare");
  // Every pair of the 256 byte-level characters merged: 3 + 256 + 65536 tokens, so
  // two-byte pieces get ids past 65535.
  BpeModel m;
  for (const char* s : {kBotToken, kEotToken, kPadToken}) m.vocab.push_back(s);
  std::vector<std::string> alphabet(byte_level_alphabet().begin(), byte_level_alphabet().end());
  std::sort(alphabet.begin(), alphabet.end(), [](const std::string& x, const std::string& y) {
    return x.size() != y.size() ? x.size() < y.size() : x < y;  // code point order
  });
  for (const std::string& c : alphabet) m.vocab.push_back(c);
  // Pairs starting with a lowercase letter last: "zz" gets an id past 65535.
  std::vector<std::string> firsts = alphabet;
  std::stable_partition(firsts.begin(), firsts.end(), [](const std::string& c) {
    return !(c.size() == 1 && std::islower(c[0]));
  });
  for (const std::string& x : firsts) {
    for (const std::string& y : alphabet) {
      m.merges.emplace_back(x, y);
      m.vocab.push_back(x + y);
    }
  }
  for (int32_t i = 0; i < 3; ++i) m.added.push_back({i, m.vocab[i], true});
  auto wide = bpe_tokenizer(m, "wide");
  REQUIRE(wide->vocab_size() == 3 + 256 + 65536);
  fanout::file_write_atomic(dir / "wide.json", wide->to_json(), "test");
  file_write(dir / "t.txt", "zz yy\n\nxx ww\n\nvv uu");
  PrepareOptions o;
  o.tokenizer = dir / "wide.json";
  o.data = {dir / "t.txt"};
  o.out = dir / "w";
  o.val_fraction = 0.3;
  const PrepareResult r = prepare_run(o);
  CHECK(r.token_bytes == 4);
  CHECK(magic_of(dir / "w/train.bin") == kBinMagicU32);
  const std::vector<int32_t> ids = all_tokens(token_file_load(dir / "w/train.bin", {}, *wide));
  CHECK(*std::max_element(ids.begin(), ids.end()) >= 65536);
  CHECK(has(prepare_summary(r), "as uint32"));

  // A tokenizer of 65536 ids or fewer writes uint16 even when its largest id is small.
  bpe_write(dir / "narrow.json");
  o.tokenizer = dir / "narrow.json";
  o.out = dir / "n";
  CHECK(prepare_run(o).token_bytes == 2);
  CHECK(magic_of(dir / "n/train.bin") == kBinMagicU16);
}

TEST_CASE("the validation split is deterministic, spread out and never empty") {
  CHECK(prepare_val_count(1, 0.01) == 0);
  CHECK(prepare_val_count(2, 0.01) == 1);
  CHECK(prepare_val_count(100, 0.01) == 1);
  CHECK(prepare_val_count(1000, 0.05) == 50);
  CHECK(prepare_val_count(3, 0.5) == 2);
  CHECK(has(error_of([] { prepare_val_count(2, 0.9); }), "leaves no document for training"));
  for (double bad : {0.0, 1.0, -0.5, 2.0, std::nan("")}) {
    CHECK(has(error_of([&] { prepare_val_count(10, bad); }), "--val-fraction must be in (0, 1)"));
  }
  // Exactly `val` of `n` held out, at most one in any run of n / val documents.
  for (int64_t n : {2, 7, 100, 1001}) {
    for (int64_t val : {int64_t{1}, n / 3 + 1, n - 1}) {
      int64_t count = 0, last = -n;
      for (int64_t i = 0; i < n; ++i) {
        if (!prepare_is_val(i, n, val)) continue;
        ++count;
        CHECK(i - last >= n / val);
        last = i;
      }
      CHECK(count == val);
    }
  }
  // The same inputs give the same bytes.
  TempDir dir("fanout-prepare");
  bpe_write(dir / "tok.json");
  file_write(dir / "a.txt", join(corpus_docs(40)));
  PrepareOptions o;
  o.tokenizer = dir / "tok.json";
  o.data = {dir / "a.txt"};
  o.val_fraction = 0.2;
  o.out = dir / "x";
  prepare_run(o);
  o.out = dir / "y";
  prepare_run(o);
  CHECK(file_read(dir / "x/train.bin") == file_read(dir / "y/train.bin"));
  CHECK(file_read(dir / "x/val.bin") == file_read(dir / "y/val.bin"));
}

TEST_CASE("prepare with packing off writes documents that come apart whole") {
  TempDir dir("fanout-prepare");
  auto tok = bpe_write(dir / "tok.json");
  const std::vector<std::string> docs = corpus_docs(12);
  file_write(dir / "a.txt", join(docs));
  PrepareOptions o;
  o.tokenizer = dir / "tok.json";
  o.data = {dir / "a.txt"};
  o.out = dir / "off";
  o.val_fraction = 0.25;
  o.packing = false;
  prepare_run(o);
  TokenData train = token_file_load(dir / "off/train.bin", {}, *tok);
  CHECK(train.documents.empty());  // a token file is one stream until split
  token_data_split_documents(train);
  std::vector<std::vector<int32_t>> expected;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (!prepare_is_val(static_cast<int64_t>(i), 12, 3)) expected.push_back(tok->encode(docs[i]));
  }
  CHECK(train.documents == expected);
  CHECK(train.pad == tok->pad());
  // Packing off builds its rows from the tokenizer's specials, not the byte ids.
  const int64_t T = 200;  // longer than any document: every row ends in padding
  DataLoader loader(train, 2, T, false, false, 0, -100);
  const Batch b = loader.next();
  for (int64_t r = 0; r < 2; ++r) {
    const std::vector<int32_t>& doc = expected[static_cast<size_t>(r)];
    REQUIRE(static_cast<int64_t>(doc.size()) + 2 < T);
    CHECK(b.inputs[r * T] == tok->bot());
    CHECK(b.targets[r * T + static_cast<int64_t>(doc.size())] == tok->eot());
    CHECK(b.inputs[r * T + static_cast<int64_t>(doc.size()) + 2] == tok->pad());
    CHECK(b.targets[r * T + T - 1] == -100);
  }

  // A document holding a special token's text would be cut apart: refused, naming it.
  file_write(dir / "special.txt", "fine\n\nnot [EOT] fine");
  o.data = {dir / "special.txt"};
  o.out = dir / "special";
  const std::string why = error_of([&] { prepare_run(o); });
  CHECK(has(why, "special.txt: document 2 holds the text of a special token"));
  CHECK(!std::filesystem::exists(dir / "special"));
  o.packing = true;  // one stream: allowed
  prepare_run(o);
  // The byte tokenizer's ids work the same way.
  fanout::file_write_atomic(dir / "byte.json", byte_tokenizer()->to_json(), "test");
  o.tokenizer = dir / "byte.json";
  o.out = dir / "bytes";
  prepare_run(o);
  CHECK(all_tokens(token_file_load(dir / "bytes/train.bin")) ==
        std::vector<int32_t>{kBot, 'f', 'i', 'n', 'e', kEot});
}

TEST_CASE("prepare refuses bad inputs with one line, before writing anything") {
  TempDir dir("fanout-prepare");
  bpe_write(dir / "tok.json");
  file_write(dir / "a.txt", "one\n\ntwo\n\nthree");
  file_write(dir / "blank.txt", "\n  \n\t\n");
  file_write(dir / "file", "x");
  token_file_write_bin(dir / "tokens.bin", {1, 2, 3});
  file_write(dir / "tokens.txt", file_read(dir / "tokens.bin"));
  // Good options but for what `change` sets.
  auto options = [&](const std::function<void(PrepareOptions&)>& change) {
    PrepareOptions o;
    o.tokenizer = dir / "tok.json";
    o.data = {dir / "a.txt"};
    o.out = dir / "out";
    change(o);
    return o;
  };
  auto fails = [&](const std::function<void(PrepareOptions&)>& change, const std::string& part) {
    const PrepareOptions o = options(change);
    const std::string why = error_of([&] { prepare_run(o); });
    CAPTURE(why);
    CHECK(has(why, part));
    CHECK(why.find('\n') == std::string::npos);
    CHECK(!std::filesystem::exists(dir / "out"));
  };
  fails([&](PrepareOptions& o) { o.out = dir / "file"; }, "is a file, not a directory");
  fails([&](PrepareOptions& o) { o.data = {dir / "missing.txt"}; }, "missing.txt");
  fails([&](PrepareOptions& o) { o.data = {dir / "blank.txt"}; }, "blank.txt: holds no text");
  fails([&](PrepareOptions& o) { o.data = {dir / "tokens.txt"}; },
        "is an llm.c token file already");
  fails([&](PrepareOptions& o) { o.tokenizer = dir / "nope.json"; }, "nope.json");
  fails([](PrepareOptions& o) { o.val_fraction = 0; }, "--val-fraction must be in (0, 1)");
  fails([](PrepareOptions& o) { o.val_fraction = 1; }, "--val-fraction must be in (0, 1)");
  fails([](PrepareOptions& o) { o.val_fraction = 0.99; }, "leaves no document for training");
  // Under a file: the directory cannot be created.
  const PrepareOptions under = options([&](PrepareOptions& o) { o.out = dir / "file/sub"; });
  CHECK(has(error_of([&] { prepare_run(under); }), "cannot create the directory"));
}
