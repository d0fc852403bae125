#pragma once
// Training a byte-level BPE (GPT-2's and HF's ByteLevel BPE) from text files:
// the files are streamed in chunks cut where the GPT-2 pre-tokenizer would cut
// anyway, the pieces counted in parallel, and merges learned with a pair-count
// index and a priority queue that updates only the words a merge touches (as
// HF's BpeTrainer does). The result does not depend on the thread count.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "apps/data/bpe_tokenizer.h"

namespace fanout::data {

struct BpeTrainOptions {
  // The whole vocabulary: special tokens + the 256 byte characters + merges.
  int64_t vocab_size = 8192;
  // Bytes of text counted per task (files are read in chunks about this big).
  int64_t chunk_bytes = int64_t{8} << 20;
  // How the files hold their text: "text", "jsonl" (one JSON object per line, its
  // member `text_field` one document; the documents are trained on joined by blank
  // lines, as a text file holding them would be), or "" (by name: .jsonl files are
  // JSON Lines, every other file text).
  std::string format;
  std::string text_field = "text";
};

// The vocabularies bpe_train accepts: from specials, bytes and one merge to 2^24.
inline constexpr int64_t kBpeMinVocab = 3 + 256 + 1;
inline constexpr int64_t kBpeMaxVocab = int64_t{1} << 24;

struct BpeTrainProgress {
  enum class Phase { kCounting, kMerging };
  Phase phase = Phase::kCounting;
  int64_t done = 0, total = 0;  // counting: bytes; merging: new tokens
};

struct BpeTrainStats {
  int64_t bytes = 0;         // text read
  int64_t pieces = 0;        // pre-tokenizer pieces counted
  int64_t distinct = 0;      // distinct pieces (words) merged over
  double count_seconds = 0;  // reading and counting
  double merge_seconds = 0;  // learning the merges
};

// Ids 0, 1, 2 are [BOT], [EOT], [PAD] (also the model's added tokens); ids
// 3..258 the byte-level alphabet in code point order (GPT-2's order); then one
// token per merge, in rank order. Special tokens' text in the files is split
// out before pre-tokenizing, as HF's encoder splits it, so it is never merged.
// Throws fanout::Error naming the file for a missing, unreadable, empty or
// non-regular file or an llm.c token file, naming the line for a JSON Lines line
// that holds no document (jsonl_documents.h), and for a JSON Lines file with none.
// Text with few distinct pieces can run out of pairs before vocab_size: the model
// then has fewer tokens (as HF's trainer stops), still with dense ids. `progress`
// (may be empty) is called by one thread at a time, often enough for a progress bar.
BpeModel bpe_train(const std::vector<std::string>& files, const BpeTrainOptions& options,
                   const std::function<void(const BpeTrainProgress&)>& progress = {},
                   BpeTrainStats* stats = nullptr);

// The same from text in memory (tests): `texts` are treated as separate files.
BpeModel bpe_train_texts(const std::vector<std::string>& texts, const BpeTrainOptions& options);

// Where a chunk of text may end so that pre-tokenizing the two sides apart gives
// the same pieces as pre-tokenizing the whole: the last position p > 0 with
// text[p - 1] a printable ASCII non-space and text[p] ASCII whitespace (no piece
// spans that boundary and none ending there looks past it), or 0 if there is none.
size_t bpe_chunk_cut(std::string_view text);

}  // namespace fanout::data
