// The byte-level BPE: merges by rank, added tokens, decode, HF's tokenizer.json
// (GPT-2's layout, round trips, every refusal). HF itself is compared with in
// tests/reference/hf_tokenizers.js.

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "apps/data/bpe_tokenizer.h"
#include "apps/data/byte_level.h"
#include "apps/data/tokenizer_json.h"
#include "engine/core/check.h"

using namespace fanout::data;
using Ids = std::vector<int32_t>;
using Json = nlohmann::json;

namespace {

// The alphabet (byte b = id b) plus `tokens`, ids 256.. in order, and the merges.
BpeModel small_model(const std::vector<std::string>& tokens,
                     const std::vector<std::pair<std::string, std::string>>& merges) {
  BpeModel m;
  const auto& alphabet = byte_level_alphabet();
  m.vocab.assign(alphabet.begin(), alphabet.end());
  for (const std::string& t : tokens) m.vocab.push_back(t);
  m.merges = merges;
  return m;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const fanout::Error& e) {
    return e.what();
  }
  return "no error";
}

// A GPT-2-style tokenizer.json: merges as "a b" strings, "Ġ" for spaces, an
// <|endoftext|> that is both the last vocab entry and an added token.
Json gpt2_style_json() {
  Json vocab = Json::object();
  const auto& alphabet = byte_level_alphabet();
  // GPT-2 orders the alphabet by code point, not by byte.
  std::vector<std::string> chars(alphabet.begin(), alphabet.end());
  std::sort(chars.begin(), chars.end(), [](const std::string& a, const std::string& b) {
    auto cp = [](const std::string& s) {
      return s.size() == 1 ? static_cast<unsigned char>(s[0])
                           : (static_cast<unsigned char>(s[0]) & 0x1F) << 6 |
                                 (static_cast<unsigned char>(s[1]) & 0x3F);
    };
    return cp(a) < cp(b);
  });
  int id = 0;
  for (const std::string& c : chars) vocab[c] = id++;
  Json merges = Json::array();
  for (const char* m : {"\xC4\xA0 t", "h e", "\xC4\xA0t he", "i n", "\xC4\xA0 in"}) {
    std::string s = m;
    std::string a = s.substr(0, s.find(' ')), b = s.substr(s.find(' ') + 1);
    vocab[a + b] = id++;
    merges.push_back(s);
  }
  vocab["<|endoftext|>"] = id;
  Json added = Json::array({{{"id", id},
                             {"content", "<|endoftext|>"},
                             {"single_word", false},
                             {"lstrip", false},
                             {"rstrip", false},
                             {"normalized", true},
                             {"special", true}}});
  return Json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer",
               {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}}},
              {"post_processor", {{"type", "ByteLevel"}, {"trim_offsets", false}}},
              {"decoder", {{"type", "ByteLevel"}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", ""},
                {"end_of_word_suffix", ""},
                {"fuse_unk", false},
                {"vocab", vocab},
                {"merges", merges}}}};
}

std::shared_ptr<const TextTokenizer> load(const Json& j) {
  return bpe_tokenizer(bpe_model_from_json(j.dump(), "t.json"), "t.json");
}

}  // namespace

TEST_CASE("bpe merges apply by rank, leftmost first among equal pairs") {
  // "abc": (b,c) outranks (a,b), so "ab" never forms and "abc" cannot.
  auto t1 =
      bpe_tokenizer(small_model({"bc", "ab", "abc"}, {{"b", "c"}, {"a", "b"}, {"ab", "c"}}), "t1");
  CHECK(t1->encode("abc") == Ids{'a', 256});
  auto t2 =
      bpe_tokenizer(small_model({"ab", "bc", "abc"}, {{"a", "b"}, {"b", "c"}, {"ab", "c"}}), "t2");
  CHECK(t2->encode("abc") == Ids{258});
  CHECK(t2->encode("abcbc") == Ids{258, 257});
  auto t3 = bpe_tokenizer(small_model({"aa", "aaaa"}, {{"a", "a"}, {"aa", "aa"}}), "t3");
  CHECK(t3->encode("aaa") == Ids{256, 'a'});
  CHECK(t3->encode("aaaaa") == Ids{257, 'a'});
  // Merges never cross pre-tokenizer pieces: "a a" is "a", "Ġa".
  auto t4 = bpe_tokenizer(small_model({"\xC4\xA0"
                                       "a",
                                       "a\xC4\xA0"},
                                      {{"a", "\xC4\xA0"}, {"\xC4\xA0", "a"}}),
                          "t4");
  CHECK(t4->encode("a a") == Ids{'a', 256});
  CHECK(t4->decode(t4->encode("a a")) == "a a");
  CHECK(t4->vocab_size() == 258);
  CHECK(t4->describe() == "bpe (258 tokens)");
}

TEST_CASE("bpe handles a very long piece quickly") {
  auto t = bpe_tokenizer(small_model({"\xC4\xA0\xC4\xA0"}, {{"\xC4\xA0", "\xC4\xA0"}}), "t");
  const std::string spaces(200001, ' ');
  const auto t0 = std::chrono::steady_clock::now();
  Ids ids = t->encode(spaces);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 2.0);
  REQUIRE(ids.size() == 100001);
  CHECK(ids.front() == 256);
  CHECK(ids.back() == ' ');
  CHECK(t->decode(ids) == spaces);
}

TEST_CASE("added tokens are cut out of the text before pre-tokenizing") {
  BpeModel m = small_model({"ab"}, {{"a", "b"}});
  m.added = {{257, kBotToken, true},
             {258, kEotToken, true},
             {259, kPadToken, true},
             {260, "<x>", false},
             {261, "<x>y", false}};
  auto t = bpe_tokenizer(m, "t");
  CHECK(t->bot() == 257);
  CHECK(t->eot() == 258);
  CHECK(t->pad() == 259);
  CHECK(t->vocab_size() == 262);
  CHECK(t->encode("ab[EOT]ab") == Ids{256, 258, 256});
  CHECK(t->encode("a[BOT][PAD]b") == Ids{'a', 257, 259, 'b'});
  CHECK(t->encode("[EO") == Ids{'[', 'E', 'O'});
  CHECK(t->encode("<x>y<x>z") == Ids{261, 260, 'z'});  // the longest match wins
  // decode: special tokens dropped, non-special added tokens kept, unknown ids marked.
  CHECK(t->decode({256, 258, 260, 'c', 999, -2}) == "ab<x>c<999><-2>");
}

TEST_CASE("a byte missing from the vocabulary is dropped, as HF does") {
  BpeModel m = small_model({}, {});
  m.vocab.erase(m.vocab.begin() + 'x');  // now "y" is id 'x', and so on
  auto t = bpe_tokenizer(m, "t");
  CHECK(t->encode("axb") == Ids{'a', 'b'});
  CHECK(t->encode("yx") == Ids{'x'});
}

TEST_CASE("a GPT-2-style tokenizer.json loads and encodes as GPT-2 does") {
  auto t = load(gpt2_style_json());
  const int64_t v = t->vocab_size();
  CHECK(v == 256 + 5 + 1);
  const int32_t the = 258, in = 260;  // "Ġthe", "Ġin" (ids 256.. are the merges' results)
  CHECK(t->encode(" the") == Ids{the});
  CHECK(t->encode("the in<|endoftext|>") == Ids{'t' - 33, 257, in, 261});  // 257: "he"
  CHECK(t->decode(t->encode("the in<|endoftext|> x")) == "the in x");
  CHECK(t->bot() == -1);
  CHECK(t->eot() == -1);
  // Written by fanout and read again: the same tokenizer.
  auto again = tokenizer_from_json(t->to_json(), "again.json");
  CHECK(again->encode("the in<|endoftext|> then") == t->encode("the in<|endoftext|> then"));
  CHECK(again->to_json() == t->to_json());
}

TEST_CASE("tokenizer.json round trips: merges as strings or pairs, options kept") {
  BpeModel m = small_model({"ab", "abc"}, {{"a", "b"}, {"ab", "c"}});
  m.added = {{258, kBotToken, true}, {259, kEotToken, true}, {260, kPadToken, true}};
  const std::string text = bpe_model_to_json(m);
  Json j = Json::parse(text);
  CHECK(j["version"] == "1.0");
  CHECK(j["truncation"].is_null());
  CHECK(j["padding"].is_null());
  CHECK(j["model"]["merges"] == Json::array({"a b", "ab c"}));
  CHECK(j["added_tokens"][1] == Json{{"id", 259},
                                     {"content", "[EOT]"},
                                     {"single_word", false},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"normalized", false},
                                     {"special", true}});
  BpeModel back = bpe_model_from_json(text, "x.json");
  CHECK(back.vocab == m.vocab);
  CHECK(back.merges == m.merges);
  CHECK(bpe_model_to_json(back) == text);
  // The pairs layout (HF since 0.20) reads the same.
  j["model"]["merges"] = Json::array({Json::array({"a", "b"}), Json::array({"ab", "c"})});
  CHECK(bpe_model_from_json(j.dump(), "x.json").merges == m.merges);
  // A token with a space forces the pairs layout.
  BpeModel spaced = small_model({"a b", "a bq"}, {{"a b", "q"}});
  Json sj = Json::parse(bpe_model_to_json(spaced));
  CHECK(sj["model"]["merges"] == Json::array({Json::array({"a b", "q"})}));
  CHECK(bpe_model_from_json(sj.dump(), "x.json").merges == spaced.merges);
  // add_prefix_space and ignore_merges survive the trip.
  m.add_prefix_space = true;
  m.ignore_merges = true;
  BpeModel opts = bpe_model_from_json(bpe_model_to_json(m), "x.json");
  CHECK(opts.add_prefix_space);
  CHECK(opts.ignore_merges);
}

TEST_CASE("ignore_merges takes a piece that is a vocab token whole") {
  BpeModel m = small_model({"ab", "abc"}, {{"a", "b"}});
  CHECK(bpe_tokenizer(m, "t")->encode("abc") == Ids{256, 'c'});
  m.ignore_merges = true;
  CHECK(bpe_tokenizer(m, "t")->encode("abc abc") == Ids{257, ' ', 256, 'c'});
}

TEST_CASE("add_prefix_space puts a space before each stretch between added tokens") {
  BpeModel m = small_model({}, {});
  m.added = {{256, kEotToken, true}};
  m.add_prefix_space = true;
  auto t = bpe_tokenizer(m, "t");
  CHECK(t->encode("a[EOT]b") == Ids{' ', 'a', 256, ' ', 'b'});
  CHECK(t->encode(" a") == Ids{' ', 'a'});
}

TEST_CASE("tokenizer.json refusals are one line naming the file and what is unsupported") {
  struct Case {
    std::function<void(Json&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](Json& j) { j["model"]["type"] = "WordPiece"; },
       "t.json: model type 'WordPiece' is not supported (only BPE)"},
      {[](Json& j) { j["model"]["type"] = "Unigram"; },
       "t.json: model type 'Unigram' is not supported (only BPE)"},
      {[](Json& j) {
         j["normalizer"] = {{"type", "NFC"}};
       },
       "t.json: normalizer 'NFC' is not supported (only null)"},
      {[](Json& j) {
         j["pre_tokenizer"] = {{"type", "Split"}};
       },
       "t.json: pre_tokenizer 'Split' is not supported (only ByteLevel)"},
      {[](Json& j) { j["pre_tokenizer"] = nullptr; },
       "t.json: pre_tokenizer null is not supported (only ByteLevel)"},
      {[](Json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers", {{{"type", "Digits"}}, j["pre_tokenizer"]}}};
       },
       "t.json: pre_tokenizer 'Digits' is not supported (only ByteLevel)"},
      {[](Json& j) {
         j["pre_tokenizer"] = {{"type", "Sequence"},
                               {"pretokenizers", {j["pre_tokenizer"], j["pre_tokenizer"]}}};
       },
       "t.json: a pre_tokenizer Sequence of 2 ByteLevel is not supported (only exactly one)"},
      {[](Json& j) { j["pre_tokenizer"]["use_regex"] = false; },
       "t.json: ByteLevel pre_tokenizer use_regex = false is not supported (only true)"},
      {[](Json& j) { j["model"]["byte_fallback"] = true; },
       "t.json: BPE byte_fallback = true is not supported (only false)"},
      {[](Json& j) { j["model"]["dropout"] = 0.25; },
       "t.json: BPE dropout = 0.25 is not supported (only null)"},
      {[](Json& j) { j["model"]["unk_token"] = "<unk>"; },
       "t.json: BPE unk_token = \"<unk>\" is not supported (only null)"},
      {[](Json& j) { j["model"]["continuing_subword_prefix"] = "##"; },
       "t.json: BPE continuing_subword_prefix = \"##\" is not supported (only null)"},
      {[](Json& j) {
         j["decoder"] = {{"type", "Metaspace"}};
       },
       "t.json: decoder 'Metaspace' is not supported (only ByteLevel)"},
      {[](Json& j) { j["decoder"] = nullptr; },
       "t.json: decoder null is not supported (only ByteLevel)"},
      {[](Json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"}};
       },
       "t.json: post_processor 'TemplateProcessing' is not supported (only null or ByteLevel)"},
      {[](Json& j) {
         j["truncation"] = {{"max_length", 8}};
       },
       "t.json: truncation {\"max_length\":8} is not supported (only null)"},
      {[](Json& j) { j["added_tokens"][0]["lstrip"] = true; },
       "t.json: added token '<|endoftext|>' lstrip = true is not supported (only false)"},
      {[](Json& j) { j["model"]["merges"].push_back("\xC4\xA0 q"); },
       "t.json: merge 5 ('\xC4\xA0' 'q'): '\xC4\xA0q' is not in the vocabulary"},
      {[](Json& j) { j["model"]["merges"].push_back("a b c"); },
       "t.json: merge 5 \"a b c\" is not two tokens separated by one space"},
      {[](Json& j) { j["model"]["vocab"]["zz"] = 9999; },
       "t.json: vocab entry 'zz' has id 9999, past the 263 entries (ids must be 0..262)"},
      {[](Json& j) { j["model"]["vocab"]["zz"] = 3; },
       "t.json: vocab id 3 is given to '$' and to 'zz'"},
      {[](Json& j) {
         j["added_tokens"].push_back({{"id", 500}, {"content", "[X]"}});
       },
       "t.json: added token '[X]' has id 500, expected 262 (ids must be dense: the "
       "vocabulary's 0..261, then the added tokens')"},
      {[](Json& j) { j["added_tokens"][0]["id"] = 3; },
       "t.json: added token '<|endoftext|>' has id 3, which the vocabulary gives to '$'"},
      {[](Json& j) { j.erase("model"); }, "t.json: not a tokenizer.json (no \"model\")"},
  };
  CHECK(error_of([] { load(gpt2_style_json()); }) == "no error");
  for (const Case& c : cases) {
    Json j = gpt2_style_json();
    c.edit(j);
    const std::string got = error_of([&] { load(j); });
    CHECK(got == c.message);
    CHECK(got.find('\n') == std::string::npos);
  }
  const std::string bad = error_of([] { bpe_model_from_json("{\"model\": ", "t.json"); });
  CHECK(bad.rfind("t.json: not valid JSON: parse error", 0) == 0);
  CHECK(error_of([] { bpe_model_from_json("[1]", "t.json"); }) ==
        "t.json: not a tokenizer.json (the top level is not an object)");
}
