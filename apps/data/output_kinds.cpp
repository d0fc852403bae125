#include "apps/data/output_kinds.h"

#include <cstdint>
#include <cstring>

#include "apps/data/token_file.h"
#include "engine/core/check.h"
#include "engine/core/json_parse.h"

namespace fanout::data {

namespace {
// Larger than any tokenizer.json (a 256k vocabulary with its merges is ~30 MB).
constexpr uint64_t kMaxTokenizerBytes = uint64_t{1} << 30;

bool is_tokenizer_json(const std::string& path) {
  try {
    const nlohmann::json j = json_parse(file_read_regular(path, kMaxTokenizerBytes), path);
    return j.is_object() && j.contains("model") && j["model"].is_object();
  } catch (const Error&) {
    return false;
  }
}

bool is_token_file(const std::string& path) {
  for (const int32_t magic : {kBinMagicU16, kBinMagicU32}) {
    char bytes[4];
    std::memcpy(bytes, &magic, 4);
    if (file_starts_with(path, std::string_view(bytes, 4))) return true;
  }
  return false;
}
}  // namespace

OutputRules tokenizer_json_output(std::vector<std::string> inputs) {
  return {std::move(inputs), "a tokenizer.json", is_tokenizer_json};
}

OutputRules token_file_output(std::vector<std::string> inputs) {
  return {std::move(inputs), "an llm.c token file", is_token_file};
}

}  // namespace fanout::data
