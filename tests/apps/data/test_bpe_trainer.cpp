// The BPE trainer: chunk cuts that keep the pre-tokenizer's pieces, merges on a
// corpus small enough to work out by hand (ties to the smallest ids, as HF), a
// dense vocabulary of the asked size, merges whose halves come first, special
// tokens kept whole, the same result for 1 and 2 threads and any chunk size, a
// trained tokenizer that compresses text, and every bad input as one error.

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <tbb/global_control.h>

#include "apps/data/bpe_trainer.h"
#include "apps/data/byte_level.h"
#include "apps/data/corpus.h"
#include "apps/data/token_file.h"
#include "engine/core/file_io.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout::data;
using fanout::test::error_of;
using fanout::test::has;
using fanout::test::TempDir;

namespace {

// The embedded corpus as a text file holds it: documents between blank lines.
std::string corpus_text(size_t min_bytes) {
  std::string text;
  for (uint64_t seed = kDefaultCorpusSeed; text.size() < min_bytes; ++seed) {
    for (const std::string& doc : default_corpus(seed).train_documents) {
      if (!text.empty()) text += "\n\n";
      text += doc;
    }
  }
  return text;
}

// Text with many distinct words (so that large vocabularies are reachable): made-up
// words from a fixed generator, with digits, punctuation, runs of spaces and
// newlines, contractions and some non-ASCII letters.
std::string varied_text(size_t bytes, uint64_t seed) {
  const char* syllables[] = {"ka",  "lo",        "mi",        "tre", "sun", "pa", "ver", "o",  "en",
                             "qui", "\xC3\xA9t", "z\xC3\xBC", "ing", "st",  "ar", "the", "ph", "y"};
  const char* joins[] = {" ",    " ",    " ",   " ",   ", ", ". ", "'s ", "  ",    "\n",
                         "\n\n", " 42 ", "!\n", " - ", "\t", " (", ") ",  " 2026", "'ll "};
  std::string text;
  uint64_t x = seed;
  auto next = [&x](uint64_t n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return (x >> 33) % n;
  };
  while (text.size() < bytes) {
    const uint64_t len = 1 + next(4);
    for (uint64_t i = 0; i < len; ++i) text += syllables[next(std::size(syllables))];
    text += joins[next(std::size(joins))];
  }
  return text;
}

void write_text(const std::string& path, const std::string& text) {
  fanout::file_write_atomic(path, text, "test");
}

bool same_model(const BpeModel& a, const BpeModel& b) {
  if (a.vocab != b.vocab || a.merges != b.merges || a.added.size() != b.added.size()) return false;
  for (size_t i = 0; i < a.added.size(); ++i) {
    if (a.added[i].id != b.added[i].id || a.added[i].content != b.added[i].content) return false;
  }
  return true;
}

// The BPE training loop written plainly: count every pair of every word, merge the
// most frequent (ties: smallest ids), repeat. Same ids as bpe_train: specials, bytes
// in code point order, then each new string.
std::vector<std::pair<std::string, std::string>> bpe_train_naive(const std::string& text,
                                                                 int64_t vocab_size) {
  std::map<std::string, int64_t> counts;
  for (std::string_view piece : gpt2_pretokenize(text)) ++counts[std::string(piece)];
  std::vector<std::string> vocab = {"[BOT]", "[EOT]", "[PAD]"};
  std::vector<std::string> alphabet(byte_level_alphabet().begin(), byte_level_alphabet().end());
  std::map<std::string, int32_t> id;
  for (int b = 0; b < 256; ++b) id[alphabet[b]] = 0;
  for (auto& [chars, i] : id) i = static_cast<int32_t>(vocab.size()), vocab.push_back(chars);
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [word, n] : counts) {
    std::vector<int32_t> symbols;
    for (unsigned char c : word) symbols.push_back(id[alphabet[c]]);
    words.emplace_back(symbols, n);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  while (static_cast<int64_t>(vocab.size()) < vocab_size) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
    for (const auto& [s, n] : words) {
      for (size_t i = 0; i + 1 < s.size(); ++i) pairs[{s[i], s[i + 1]}] += n;
    }
    if (pairs.empty()) break;
    auto best = pairs.begin();  // the smallest pair among the most frequent
    for (auto it = pairs.begin(); it != pairs.end(); ++it) {
      if (it->second > best->second) best = it;
    }
    const auto [a, b] = best->first;
    const std::string joined = vocab[a] + vocab[b];
    auto [it, added] = id.emplace(joined, static_cast<int32_t>(vocab.size()));
    if (added) vocab.push_back(joined);
    merges.emplace_back(vocab[a], vocab[b]);
    for (auto& [s, n] : words) {
      std::vector<int32_t> out;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          out.push_back(it->second);
          ++i;
        } else {
          out.push_back(s[i]);
        }
      }
      s = out;
    }
  }
  return merges;
}

}  // namespace

TEST_CASE("bpe_train learns the merges of the plain recount-every-pair loop") {
  // Runs of one letter exercise merges that overlap ("aaa": (a,a) once, left first).
  std::string text = varied_text(20000, 5);
  for (int len = 1; len < 40; ++len) {
    for (int k = 0; k < 1 + (len * 7) % 5; ++k) text += " " + std::string(len, 'a') + " x";
  }
  for (int64_t n : {int64_t{300}, int64_t{700}}) {
    CAPTURE(n);
    BpeTrainOptions options;
    options.vocab_size = n;
    const BpeModel model = bpe_train_texts({text}, options);
    const auto naive = bpe_train_naive(text, n);
    CHECK(model.merges.size() == naive.size());
    CHECK(model.merges == naive);
    CHECK(static_cast<int64_t>(model.vocab.size()) == n);
  }
}

TEST_CASE("bpe_chunk_cut finds the last boundary after a printable character") {
  CHECK(bpe_chunk_cut("hello world") == 5);
  CHECK(bpe_chunk_cut("a b. c\nd") == 6);  // after 'c', before '\n'
  CHECK(bpe_chunk_cut("a  b") == 1);       // not inside the run of spaces
  CHECK(bpe_chunk_cut("word") == 0);
  CHECK(bpe_chunk_cut(" \n \n") == 0);      // only whitespace
  CHECK(bpe_chunk_cut("\xC3\xA9 x") == 0);  // a non-ASCII letter before the space
  CHECK(bpe_chunk_cut("") == 0);
}

TEST_CASE("text cut at bpe_chunk_cut pre-tokenizes into the same pieces as the whole") {
  const std::string text = varied_text(200000, 7) + corpus_text(50000) +
                           " x  y\n\n z'll \xE6\x97\xA5\xE6\x9C\xAC 12.5 \xF0\x9F\x8E\x89 end";
  std::vector<std::string> whole, parts;
  for (std::string_view p : gpt2_pretokenize(text)) whole.emplace_back(p);
  std::string_view rest = text;
  int cuts = 0;
  while (!rest.empty()) {
    size_t cut = bpe_chunk_cut(rest.substr(0, std::min<size_t>(rest.size(), 997)));
    if (cut == 0 || rest.size() <= 997) cut = rest.size();
    for (std::string_view p : gpt2_pretokenize(rest.substr(0, cut))) parts.emplace_back(p);
    rest.remove_prefix(cut);
    ++cuts;
  }
  CHECK(cuts > 200);
  CHECK(whole.size() > 50000);
  CHECK(parts == whole);
}

TEST_CASE("the first merges of a hand-checkable corpus, ties to the smallest ids") {
  // Pieces "aaab" once and " aaab" 49 times. (a,a) occurs twice per word: first. Then
  // (aa,a) and (a,b) both occur 50 times; HF takes the smaller ids: a < aa, so (a,b).
  // Then (aa,ab), then (Ġ,aaab), and then no pair is left: 4 merges, not 41.
  std::string text = "aaab";
  for (int i = 0; i < 49; ++i) text += " aaab";
  BpeTrainOptions options;
  options.vocab_size = 300;
  const BpeModel model = bpe_train_texts({text}, options);
  using M = std::vector<std::pair<std::string, std::string>>;
  CHECK(model.merges == M{{"a", "a"}, {"a", "b"}, {"aa", "ab"}, {"\xC4\xA0", "aaab"}});
  REQUIRE(model.vocab.size() == 263);
  CHECK(model.vocab[259] == "aa");
  CHECK(model.vocab[262] ==
        "\xC4\xA0"
        "aaab");
}

TEST_CASE("the vocabulary is dense: specials, the 256 byte characters, one token per merge") {
  const std::string text = varied_text(300000, 1);
  for (int64_t n : {kBpeMinVocab, int64_t{1000}, int64_t{4000}}) {
    CAPTURE(n);
    BpeTrainOptions options;
    options.vocab_size = n;
    const BpeModel model = bpe_train_texts({text}, options);
    REQUIRE(static_cast<int64_t>(model.vocab.size()) == n);
    CHECK(static_cast<int64_t>(model.merges.size()) >= n - 259);
    CHECK(std::set<std::string>(model.vocab.begin(), model.vocab.end()).size() ==
          model.vocab.size());
    CHECK(model.vocab[0] == "[BOT]");
    CHECK(model.vocab[1] == "[EOT]");
    CHECK(model.vocab[2] == "[PAD]");
    REQUIRE(model.added.size() == 3);
    for (int32_t i = 0; i < 3; ++i) {
      CHECK(model.added[i].id == i);
      CHECK(model.added[i].content == model.vocab[i]);
      CHECK(model.added[i].special);
    }
    // Ids 3..258: every byte's character, in code point (GPT-2's) order.
    std::vector<std::string> alphabet(byte_level_alphabet().begin(), byte_level_alphabet().end());
    std::sort(alphabet.begin(), alphabet.end());
    CHECK(std::vector<std::string>(model.vocab.begin() + 3, model.vocab.begin() + 259) == alphabet);
    CHECK(model.vocab[3] == "!");  // as GPT-2's vocab.json starts
  }
}

TEST_CASE("every merge's halves come earlier and its result is the next token") {
  BpeTrainOptions options;
  options.vocab_size = 3000;
  const BpeModel model = bpe_train_texts({varied_text(300000, 2), corpus_text(100000)}, options);
  REQUIRE(model.vocab.size() == 3000);
  // Each token's first merge: a merge's halves are bytes or results of earlier merges,
  // and each new token is the next id.
  std::map<std::string, size_t> made;  // token -> rank of the merge that made it
  for (size_t i = 3; i < 259; ++i) made[model.vocab[i]] = 0;
  size_t next_id = 259;
  int bad = 0;
  for (size_t r = 0; r < model.merges.size(); ++r) {
    const auto& [left, right] = model.merges[r];
    auto l = made.find(left), g = made.find(right);
    if (l == made.end() || g == made.end() || (l->second >= r + 1 && l->second != 0) ||
        (g->second >= r + 1 && g->second != 0)) {
      ++bad;
    }
    if (made.emplace(left + right, r + 1).second) {
      if (next_id >= model.vocab.size() || model.vocab[next_id] != left + right) ++bad;
      ++next_id;
    }
  }
  CHECK(bad == 0);
  CHECK(next_id == model.vocab.size());
}

TEST_CASE("special tokens' text in the training text is never merged") {
  std::string text;
  for (int i = 0; i < 300; ++i) text += "hello[EOT]world [BOT]hi[PAD][PAD] x\n";
  BpeTrainOptions options;
  options.vocab_size = 400;
  const BpeModel model = bpe_train_texts({text}, options);
  CHECK(model.merges.size() > 5);
  for (size_t i = 259; i < model.vocab.size(); ++i) {
    CAPTURE(model.vocab[i]);
    CHECK(model.vocab[i].find_first_of("[]EOTBPAD") == std::string::npos);
  }
}

TEST_CASE("training is the same for 1 and 2 threads and for any chunk size") {
  TempDir dir("fanout-bpe");
  write_text(dir / "a.txt", varied_text(400000, 3));
  write_text(dir / "b.txt", corpus_text(300000));
  const std::vector<std::string> files = {dir / "a.txt", dir / "b.txt"};
  BpeTrainOptions options;
  options.vocab_size = 2000;
  BpeModel one, two, small_chunks;
  {
    tbb::global_control threads(tbb::global_control::max_allowed_parallelism, 1);
    one = bpe_train(files, options);
  }
  {
    tbb::global_control threads(tbb::global_control::max_allowed_parallelism, 2);
    two = bpe_train(files, options);
    options.chunk_bytes = 1000;  // hundreds of chunks, counted in any order
    BpeTrainStats stats;
    int64_t calls = 0;
    small_chunks = bpe_train(
        files, options, [&](const BpeTrainProgress&) { ++calls; }, &stats);
    CHECK(calls > 100);
    CHECK(stats.bytes == static_cast<int64_t>(fanout::file_regular_size(files[0]) +
                                              fanout::file_regular_size(files[1])));
  }
  CHECK(one.vocab.size() == 2000);
  CHECK(same_model(one, two));
  CHECK(same_model(one, small_chunks));
  // The serialized tokenizer is byte-identical too.
  CHECK(bpe_tokenizer(one, "one")->to_json() == bpe_tokenizer(two, "two")->to_json());
}

TEST_CASE("the trained tokenizer compresses held-out text and decodes it back") {
  const Corpus corpus = default_corpus();
  std::string train, heldout;
  for (const std::string& d : corpus.train_documents) train += d + "\n\n";
  for (const std::string& d : corpus.heldout_documents) heldout += d + "\n\n";
  BpeTrainOptions options;
  options.vocab_size = 1024;
  BpeTrainStats stats;
  TempDir dir("fanout-bpe");
  write_text(dir / "train.txt", train);
  auto tokenizer = bpe_tokenizer(bpe_train({dir / "train.txt"}, options, {}, &stats), "t");
  CHECK(stats.bytes == static_cast<int64_t>(train.size()));
  CHECK(stats.pieces > 50000);
  const std::vector<int32_t> ids = tokenizer->encode(heldout);
  CAPTURE(ids.size());
  CAPTURE(heldout.size());
  // Whole words of a small vocabulary become single tokens: well over 3 bytes a token.
  CHECK(ids.size() * 3 < heldout.size());
  CHECK(tokenizer->decode(ids) == heldout);
  CHECK(tokenizer->bot() == 0);
  CHECK(tokenizer->eot() == 1);
  CHECK(tokenizer->pad() == 2);
}

TEST_CASE("bad inputs to bpe_train are one error naming the file") {
  TempDir dir("fanout-bpe");
  BpeTrainOptions options;
  options.vocab_size = 300;
  write_text(dir / "ok.txt", "some text");
  CHECK(has(error_of([&] { bpe_train({dir / "missing.txt"}, options); }), "no such file"));
  CHECK(has(error_of([&] { bpe_train({dir.path}, options); }), "is a directory"));
  write_text(dir / "empty.txt", "");
  CHECK(has(error_of([&] {
              bpe_train({dir / "ok.txt", dir / "empty.txt"}, options);
            }),
            "empty.txt: is empty"));
  token_file_write_bin(dir / "tokens.bin", {1, 2, 3, 4});
  CHECK(has(error_of([&] { bpe_train({dir / "tokens.bin"}, options); }),
            "tokens.bin: is a token file, not text"));
  // A token file's header is recognised whatever the name.
  std::string bin = fanout::file_read_regular(dir / "tokens.bin");
  write_text(dir / "tokens.txt", bin);
  CHECK(has(error_of([&] { bpe_train({dir / "tokens.txt"}, options); }), "is a token file"));
  CHECK(has(error_of([&] { bpe_train({}, options); }), "no text file"));
  for (int64_t n : {int64_t{-1}, int64_t{0}, int64_t{258}, kBpeMinVocab - 1, int64_t{1} << 40}) {
    CAPTURE(n);
    options.vocab_size = n;
    CHECK(has(error_of([&] { bpe_train({dir / "ok.txt"}, options); }), "is not possible"));
  }
}

// --- JSON Lines -----------------------------------------------------------------------

namespace {
// `text` escaped as a JSON string's contents.
std::string json_escaped(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += c;
    }
  }
  return out;
}
}  // namespace

TEST_CASE("a JSON Lines file trains as the text file of its documents joined by blank lines") {
  TempDir dir("fanout-bpe");
  // Documents with blank lines, tabs, quotes and non-ASCII letters inside, lines of
  // other members and blank lines between them, and documents of only whitespace.
  std::vector<std::string> docs;
  const std::string varied = varied_text(120000, 7);
  // Cut at UTF-8 character starts: JSON strings hold whole characters.
  auto char_start = [&](size_t at) {
    while (at < varied.size() && (static_cast<unsigned char>(varied[at]) & 0xC0) == 0x80) ++at;
    return std::min(at, varied.size());
  };
  for (size_t at = 0; at < varied.size();) {
    const size_t end = char_start(at + 1 + at % 997);
    docs.push_back(varied.substr(at, end - at));
    at = end;
  }
  std::string jsonl, text;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (i % 7 == 3) jsonl += "\n";
    if (i % 11 == 5) jsonl += "{\"text\": \" \\n \", \"id\": 0}\n";  // whitespace: dropped
    jsonl += "{\"id\": " + std::to_string(i) + ", \"text\": \"" + json_escaped(docs[i]) + "\"}\n";
    if (docs[i].find_first_not_of(" \t\r\n") == std::string::npos) continue;
    if (!text.empty()) text += "\n\n";
    text += docs[i];
  }
  write_text(dir / "docs.jsonl", jsonl);
  write_text(dir / "docs.txt", text);
  BpeTrainOptions options;
  options.vocab_size = 800;
  const BpeModel from_text = bpe_train({dir / "docs.txt"}, options);
  CHECK(from_text.vocab.size() == 800);
  // Whole lines and lines cut by every read, in chunks smaller than one line too.
  for (const int64_t chunk : {int64_t{8} << 20, int64_t{4096}, int64_t{100}, int64_t{7}}) {
    CAPTURE(chunk);
    options.chunk_bytes = chunk;
    BpeTrainStats stats;
    int64_t last_done = -1, last_total = -1;
    const BpeModel from_jsonl = bpe_train(
        {dir / "docs.jsonl"}, options,
        [&](const BpeTrainProgress& p) {
          if (p.phase != BpeTrainProgress::Phase::kCounting) return;
          CHECK(p.done >= last_done);
          last_done = p.done, last_total = p.total;
        },
        &stats);
    CHECK(same_model(from_text, from_jsonl));
    // Progress counts the file's bytes and ends at all of them.
    CHECK(last_done == static_cast<int64_t>(jsonl.size()));
    CHECK(last_total == static_cast<int64_t>(jsonl.size()));
    CHECK(stats.bytes == static_cast<int64_t>(jsonl.size()));
  }
  // --format decides for every file whatever its name; another member by text_field.
  write_text(dir / "docs.lines", jsonl);
  options.chunk_bytes = int64_t{8} << 20;
  options.format = "jsonl";
  CHECK(same_model(from_text, bpe_train({dir / "docs.lines"}, options)));
  options.format = "text";  // the JSON itself, as text
  CHECK_FALSE(same_model(from_text, bpe_train({dir / "docs.jsonl"}, options)));
  options.format = "";
  std::string renamed = jsonl;
  for (size_t at = 0; (at = renamed.find("\"text\":", at)) != std::string::npos; at += 7) {
    renamed.replace(at, 7, "\"body\":");
  }
  write_text(dir / "body.jsonl", renamed);
  options.text_field = "body";
  CHECK(same_model(from_text, bpe_train({dir / "body.jsonl"}, options)));
}

TEST_CASE("a bad JSON Lines line is one error naming its line, however the file is read") {
  TempDir dir("fanout-bpe");
  std::string jsonl;
  for (int i = 0; i < 200; ++i)
    jsonl += "{\"text\": \"document number " + std::to_string(i) + "\"}\n";
  BpeTrainOptions options;
  options.vocab_size = 300;
  for (const int64_t chunk : {int64_t{8} << 20, int64_t{64}, int64_t{5}}) {
    CAPTURE(chunk);
    options.chunk_bytes = chunk;
    write_text(dir / "bad.jsonl", jsonl + "\n{\"text\": 3}\n");
    CHECK(has(error_of([&] { bpe_train({dir / "bad.jsonl"}, options); }),
              "bad.jsonl:202: \"text\" holds a number, not a string"));
    write_text(dir / "bad.jsonl", jsonl + "{\"txt\": \"a\"}");  // the last line, unended
    CHECK(has(error_of([&] { bpe_train({dir / "bad.jsonl"}, options); }),
              "bad.jsonl:201: no \"text\" field (name the field that holds the text with "
              "--text-field)"));
    write_text(dir / "bad.jsonl", "[1]\n" + jsonl);
    CHECK(has(error_of([&] { bpe_train({dir / "bad.jsonl"}, options); }),
              "bad.jsonl:1: a JSON array, not an object"));
    write_text(dir / "bad.jsonl", jsonl.substr(0, 100) + "{\"text\": \"cut\n" + jsonl);
    CHECK(has(error_of([&] { bpe_train({dir / "bad.jsonl"}, options); }), "bad.jsonl:4: "));
    write_text(dir / "blank.jsonl", "\n{\"text\": \"  \"}\n\n{\"text\": \"\\n\"}\n");
    CHECK(has(error_of([&] { bpe_train({dir / "blank.jsonl"}, options); }),
              "blank.jsonl: holds no document (every line is blank or its text is)"));
  }
  options.format = "csv";
  CHECK(has(error_of([&] { bpe_train({dir / "bad.jsonl"}, options); }), "text or jsonl"));
  options.format = "", options.text_field = "";
  CHECK(has(error_of([&] { bpe_train({dir / "bad.jsonl"}, options); }), "field name"));
}
