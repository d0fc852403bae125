#pragma once
// JSON Lines text as documents, the way text corpora are commonly shipped: one
// JSON object per line, whose text field ({"text": "..."}) is one document. Read
// by `fanout prepare` and `tokenizer train` for a .jsonl file or --format jsonl, and
// by every command that reads --data text for a .jsonl file.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fanout::data {

struct JsonlDocument {
  std::string text;
  int64_t line = 0;  // 1-based, for messages
};

// Each non-blank line of `text` is a JSON object (parsed by json_parse, so nesting is
// bounded) whose member `field` is a string: that string is one document, kept
// whole (blank lines inside included). A document of only whitespace is dropped, as
// split_documents drops one. A bad line is one fanout::Error "<path>:<line>: ..."
// saying whether it is not JSON, not an object, lacks the field or holds no string;
// `field_hint` ends the message for a missing field (how to name another). `text`'s
// first line is line `first_line` of the file (it may be read in pieces).
inline constexpr const char* kTextFieldHint =
    "name the field that holds the text with --text-field";
std::vector<JsonlDocument> jsonl_documents(std::string_view text, const std::string& path,
                                           const std::string& field, int64_t first_line = 1,
                                           const char* field_hint = kTextFieldHint);

// Whether `path` names a JSON Lines file (ends in .jsonl, any case).
bool jsonl_name(const std::string& path);

}  // namespace fanout::data
