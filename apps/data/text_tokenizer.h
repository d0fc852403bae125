#pragma once
// The tokenizer a run turns text into ids with, and back: the byte tokenizer
// (tokenizer.h: ids 0-255 are bytes, [BOT] 256, [EOT] 257, [PAD] 258) or a
// byte-level BPE read from HF's tokenizer.json (bpe_tokenizer.h). Both write
// themselves as a tokenizer.json, which checkpoints carry (the HF model-folder
// layout), so eval and generate decode with what the run trained with.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fanout::data {

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;
  // Text -> ids, without adding special tokens. Special tokens' own text in the
  // input ("[EOT]") encodes to their ids, as HF's added tokens do.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Ids -> text; special tokens are dropped; an id past the vocabulary prints as <id>.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  // The ids of [BOT], [EOT] and [PAD]; -1 when the tokenizer has none.
  virtual int32_t bot() const = 0;
  virtual int32_t eot() const = 0;
  virtual int32_t pad() const = 0;
  // HF tokenizer.json text that loads back (tokenizer_load) to the same tokenizer.
  virtual std::string to_json() const = 0;
  // "byte" or "bpe (8192 tokens)": for the run's first line.
  virtual std::string describe() const = 0;
  // The byte tokenizer (ids 0-255 are bytes, [BOT] [EOT] [PAD] 256-258), however
  // it was made: byte_tokenizer() or its tokenizer.json read back.
  virtual bool is_byte() const = 0;
};

// The byte tokenizer as a TextTokenizer (encode = byte_encode, decode = byte_decode).
std::shared_ptr<const TextTokenizer> byte_tokenizer();

// A tokenizer.json (HF's format): a BPE model with a ByteLevel pre-tokenizer and
// decoder, with added tokens. Anything else is one fanout::Error naming what is
// not supported and the file.
std::shared_ptr<const TextTokenizer> tokenizer_load(const std::string& path);
std::shared_ptr<const TextTokenizer> tokenizer_from_json(const std::string& json_text,
                                                         const std::string& name);

// A tokenizer as a command line names it (every --tokenizer takes the same names):
// "byte" is the byte tokenizer, anything else a tokenizer.json path (a file named
// byte is ./byte).
std::shared_ptr<const TextTokenizer> tokenizer_resolve(const std::string& name);
inline constexpr const char* kTokenizerNamesHelp = "A tokenizer.json (HF's format), or byte";

}  // namespace fanout::data
