#include "apps/data/tokenizer_json.h"

#include <nlohmann/json.hpp>

#include "engine/core/check.h"
#include "engine/core/json_parse.h"

namespace fanout::data {

namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// "'NFC'" for {"type": "NFC"}, else the JSON itself, shortened.
std::string component_name(const Json& j) {
  if (j.is_object() && j.contains("type") && j["type"].is_string()) {
    return "'" + j["type"].get<std::string>() + "'";
  }
  std::string s = j.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

bool is_type(const Json& j, const char* type) {
  return j.is_object() && j.contains("type") && j["type"] == type;
}

// A flag that must be absent, null or the given value.
void check_option(const Json& obj, const char* key, const Json& want, const std::string& where,
                  const std::string& name) {
  if (!obj.contains(key) || obj[key].is_null() || obj[key] == want) return;
  FANOUT_CHECK(false, name, ": ", where, " ", key, " = ", obj[key].dump(),
               " is not supported (only ", want.dump(), ")");
}

void read_pre_tokenizer(const Json& j, const std::string& name, BpeModel& model) {
  const Json* byte_level = &j;
  if (is_type(j, "Sequence") && j.contains("pretokenizers") && j["pretokenizers"].is_array()) {
    const Json& list = j["pretokenizers"];
    for (const Json& p : list) {
      FANOUT_CHECK(is_type(p, "ByteLevel"), name, ": pre_tokenizer ", component_name(p),
                   " is not supported (only ByteLevel)");
    }
    FANOUT_CHECK(list.size() == 1, name, ": a pre_tokenizer Sequence of ", list.size(),
                 " ByteLevel is not supported (only exactly one)");
    byte_level = &list[0];
  }
  FANOUT_CHECK(is_type(*byte_level, "ByteLevel"), name, ": pre_tokenizer ",
               component_name(*byte_level), " is not supported (only ByteLevel)");
  check_option(*byte_level, "use_regex", true, "ByteLevel pre_tokenizer", name);
  const Json& aps = byte_level->value("add_prefix_space", Json(false));
  FANOUT_CHECK(aps.is_boolean(), name, ": pre_tokenizer add_prefix_space must be true or false");
  model.add_prefix_space = aps.get<bool>();
}

void read_model(const Json& j, const std::string& name, BpeModel& model) {
  FANOUT_CHECK(j.is_object(), name, ": no \"model\" object");
  if (j.contains("type")) {
    FANOUT_CHECK(j["type"] == "BPE", name, ": model type ", component_name(j),
                 " is not supported (only BPE)");
  }
  check_option(j, "dropout", Json(nullptr), "BPE", name);
  check_option(j, "unk_token", Json(nullptr), "BPE", name);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (j.contains(key) && j[key] == "") continue;  // GPT-2's files say ""
    check_option(j, key, Json(nullptr), "BPE", name);
  }
  check_option(j, "byte_fallback", false, "BPE", name);
  const Json& ignore = j.value("ignore_merges", Json(false));
  FANOUT_CHECK(ignore.is_boolean(), name, ": BPE ignore_merges must be true or false");
  model.ignore_merges = ignore.get<bool>();

  FANOUT_CHECK(j.contains("vocab") && j["vocab"].is_object(), name,
               ": the BPE model has no \"vocab\" object");
  const Json& vocab = j["vocab"];
  model.vocab.assign(vocab.size(), std::string());
  std::vector<bool> seen(vocab.size(), false);
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    FANOUT_CHECK(it.value().is_number_integer(), name, ": vocab entry '", it.key(), "' has id ",
                 it.value().dump(), " (ids are integers)");
    const auto id = it.value().get<int64_t>();
    FANOUT_CHECK(id >= 0 && id < static_cast<int64_t>(vocab.size()), name, ": vocab entry '",
                 it.key(), "' has id ", id, ", past the ", vocab.size(),
                 " entries (ids must be 0..", vocab.size() - 1, ")");
    FANOUT_CHECK(!seen[id], name, ": vocab id ", id, " is given to '", model.vocab[id],
                 "' and to '", it.key(), "'");
    seen[id] = true;
    model.vocab[id] = it.key();
  }

  FANOUT_CHECK(j.contains("merges") && j["merges"].is_array(), name,
               ": the BPE model has no \"merges\" list");
  const Json& merges = j["merges"];
  model.merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const Json& m = merges[r];
    if (m.is_string()) {  // "a b" (GPT-2's files, HF before 0.20)
      const auto s = m.get<std::string>();
      const size_t space = s.find(' ');
      FANOUT_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, name,
                   ": merge ", r, " \"", s, "\" is not two tokens separated by one space");
      model.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else {  // ["a", "b"] (HF since 0.20)
      FANOUT_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), name,
                   ": merge ", r, " ", m.dump(), " is neither \"a b\" nor [\"a\", \"b\"]");
      model.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
}

void read_added_tokens(const Json& j, const std::string& name, BpeModel& model) {
  if (j.is_null()) return;
  FANOUT_CHECK(j.is_array(), name, ": \"added_tokens\" is not a list");
  for (const Json& t : j) {
    FANOUT_CHECK(t.is_object() && t.contains("id") && t["id"].is_number_integer() &&
                     t.contains("content") && t["content"].is_string(),
                 name, ": added token ", component_name(t), " needs an integer id and a content");
    const auto content = t["content"].get<std::string>();
    for (const char* key : {"single_word", "lstrip", "rstrip"}) {
      check_option(t, key, false, "added token '" + content + "'", name);
    }
    const Json& special = t.value("special", Json(false));
    FANOUT_CHECK(special.is_boolean(), name, ": added token '", content,
                 "': special must be true or false");
    const auto id = t["id"].get<int64_t>();
    FANOUT_CHECK(id >= 0 && id < (int64_t{1} << 31), name, ": added token '", content, "' has id ",
                 id);
    model.added.push_back({static_cast<int32_t>(id), content, special.get<bool>()});
  }
}

}  // namespace

BpeModel bpe_model_from_json(const std::string& json_text, const std::string& name) {
  const Json root = json_parse(json_text, name);
  FANOUT_CHECK(root.is_object(), name, ": not a tokenizer.json (the top level is not an object)");
  FANOUT_CHECK(root.contains("model"), name, ": not a tokenizer.json (no \"model\")");

  BpeModel model;
  read_model(root["model"], name, model);
  const Json null;
  const Json& normalizer = root.contains("normalizer") ? root["normalizer"] : null;
  FANOUT_CHECK(normalizer.is_null(), name, ": normalizer ", component_name(normalizer),
               " is not supported (only null)");
  FANOUT_CHECK(root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null(), name,
               ": pre_tokenizer null is not supported (only ByteLevel)");
  read_pre_tokenizer(root["pre_tokenizer"], name, model);
  const Json& decoder = root.contains("decoder") ? root["decoder"] : null;
  FANOUT_CHECK(is_type(decoder, "ByteLevel"), name, ": decoder ", component_name(decoder),
               " is not supported (only ByteLevel)");
  const Json& post = root.contains("post_processor") ? root["post_processor"] : null;
  FANOUT_CHECK(post.is_null() || is_type(post, "ByteLevel"), name, ": post_processor ",
               component_name(post), " is not supported (only null or ByteLevel)");
  for (const char* key : {"truncation", "padding"}) {
    FANOUT_CHECK(!root.contains(key) || root[key].is_null(), name, ": ", key, " ", root[key].dump(),
                 " is not supported (only null)");
  }
  read_added_tokens(root.contains("added_tokens") ? root["added_tokens"] : null, name, model);
  return model;
}

std::string bpe_model_to_json(const BpeModel& model) {
  OrderedJson root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  OrderedJson added = OrderedJson::array();
  std::vector<const BpeModel::Added*> by_id;
  for (const BpeModel::Added& a : model.added) by_id.push_back(&a);
  // HF gives added tokens missing from the vocabulary the next ids in list order.
  std::stable_sort(by_id.begin(), by_id.end(), [](auto* x, auto* y) { return x->id < y->id; });
  for (const BpeModel::Added* a : by_id) {
    added.push_back({{"id", a->id},
                     {"content", a->content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", a->special}});
  }
  root["added_tokens"] = std::move(added);
  root["normalizer"] = nullptr;
  const bool aps = model.add_prefix_space;
  root["pre_tokenizer"] = {{"type", "ByteLevel"},
                           {"add_prefix_space", aps},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  root["post_processor"] = nullptr;
  root["decoder"] = {{"type", "ByteLevel"},
                     {"add_prefix_space", true},
                     {"trim_offsets", true},
                     {"use_regex", true}};
  bool spaced = false;
  for (const auto& [a, b] : model.merges) {
    spaced = spaced || a.find(' ') != std::string::npos || b.find(' ') != std::string::npos;
  }
  // vocab and merges (50k+ entries) are written by hand: ordered_json's lookups are linear.
  root["model"] = {{"type", "BPE"},
                   {"dropout", nullptr},
                   {"unk_token", nullptr},
                   {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr},
                   {"fuse_unk", false},
                   {"byte_fallback", false},
                   {"ignore_merges", model.ignore_merges},
                   {"vocab", OrderedJson::object()},
                   {"merges", OrderedJson::array()}};
  // Invalid UTF-8 in a token (only a hand-made model has it) becomes U+FFFD.
  const auto str = [](const std::string& s) {
    return OrderedJson(s).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
  };
  std::string text = root.dump(2, ' ', false, OrderedJson::error_handler_t::replace);
  std::string vocab = "{";
  for (size_t id = 0; id < model.vocab.size(); ++id) {
    vocab +=
        (id == 0 ? "\n      " : ",\n      ") + str(model.vocab[id]) + ": " + std::to_string(id);
  }
  vocab += model.vocab.empty() ? "}" : "\n    }";
  std::string merges = "[";
  for (size_t r = 0; r < model.merges.size(); ++r) {
    const auto& [a, b] = model.merges[r];
    merges += r == 0 ? "\n      " : ",\n      ";
    merges += spaced ? "[" + str(a) + ", " + str(b) + "]" : str(a + " " + b);
  }
  merges += model.merges.empty() ? "]" : "\n    ]";
  const std::string vocab_at = "\"vocab\": {},", merges_at = "\"merges\": []";
  const size_t v = text.rfind(vocab_at), m = text.rfind(merges_at);
  FANOUT_ASSERT(v != std::string::npos && m != std::string::npos && v < m);
  text = text.substr(0, v) + "\"vocab\": " + vocab + "," +
         text.substr(v + vocab_at.size(), m - v - vocab_at.size()) + "\"merges\": " + merges +
         text.substr(m + merges_at.size());
  return text + "\n";
}

}  // namespace fanout::data
