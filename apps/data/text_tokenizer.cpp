#include "apps/data/text_tokenizer.h"

#include "apps/data/bpe_tokenizer.h"
#include "apps/data/tokenizer_json.h"
#include "engine/core/file_io.h"

namespace fanout::data {

// The byte tokenizer is the byte-level BPE with no merges whose vocabulary puts
// byte b's character at id b: encoding maps each byte to its value, so it is
// byte_encode apart from special tokens' text ("[EOT]" -> 257, as HF encodes it),
// and decoding is byte_decode.
std::shared_ptr<const TextTokenizer> byte_tokenizer() {
  static const std::shared_ptr<const TextTokenizer> tokenizer =
      bpe_tokenizer(bpe_byte_model(), "the byte tokenizer");
  return tokenizer;
}

std::shared_ptr<const TextTokenizer> tokenizer_from_json(const std::string& json_text,
                                                         const std::string& name) {
  return bpe_tokenizer(bpe_model_from_json(json_text, name), name);
}

std::shared_ptr<const TextTokenizer> tokenizer_load(const std::string& path) {
  return tokenizer_from_json(file_read_regular(path), path);
}

std::shared_ptr<const TextTokenizer> tokenizer_resolve(const std::string& name) {
  return name == "byte" ? byte_tokenizer() : tokenizer_load(name);
}

}  // namespace fanout::data
