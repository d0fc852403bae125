#pragma once
// `fanout prepare`: text files -> llm.c token files for training. Each file is split
// into documents at blank lines (split_documents), or read as JSON Lines (one
// document per line: jsonl_documents.h); each document is encoded by the user's
// tokenizer as [BOT] doc [EOT], and the documents are divided between OUT/train.bin
// and OUT/val.bin by a deterministic, evenly spread split (Note [The validation
// split] in prepare.cpp). The tokenizer goes beside them as OUT/tokenizer.json,
// where `train` finds it (token_file_tokenizer_path).

#include <cstdint>
#include <string>
#include <vector>

#include "apps/data/text_tokenizer.h"

namespace fanout::data {

struct PrepareOptions {
  std::string tokenizer;          // a tokenizer.json or "byte" (tokenizer_resolve)
  std::vector<std::string> data;  // text files, read in this order
  // "text" (documents between blank lines), "jsonl" (a document per line), or "":
  // each file by its name (.jsonl: JSON Lines, anything else: text).
  std::string format;
  std::string text_field = "text";  // JSON Lines: the member holding the document
  std::string out;                  // the output directory (created if missing)
  double val_fraction = 0.01;       // in (0, 1)
  // on: the files are one stream for llm.c windows. off: the same layout, checked to
  // come apart into whole documents for `train --packing off` (Note [Packing off
  // over a token file] in token_file.cpp): the tokenizer must have [BOT], [EOT] and
  // [PAD], and no document may hold one of them inside (their text, e.g. "[EOT]",
  // encodes to their id).
  bool packing = true;
};

struct PrepareResult {
  int64_t documents = 0, train_documents = 0, val_documents = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  uint64_t text_bytes = 0, file_bytes = 0;  // read; written (both files)
  int token_bytes = 2;                      // 2: the uint16 format, 4: uint32
  std::vector<std::string> files;           // written: OUT/train.bin [, OUT/val.bin]
  std::string tokenizer_file;               // OUT/tokenizer.json (written or already there)
  double seconds = 0;                       // encoding and writing
};

// How many of `documents` go to validation for `fraction`: round(fraction * n), at
// least 1 when n >= 2, 0 when n == 1. Throws when fraction is outside (0, 1) or when
// no document would be left for training.
int64_t prepare_val_count(int64_t documents, double fraction);

// Whether document `index` of `documents` is a validation document, for `val` of them.
bool prepare_is_val(int64_t index, int64_t documents, int64_t val);

// Loads the tokenizer, encodes and writes; every problem is one fanout::Error naming
// the file or flag, found before anything is written.
PrepareResult prepare_run(const PrepareOptions& options);

// "prepare: 120 documents (118 train, 2 val), 51234 tokens (uint16) -> ..." (one line).
std::string prepare_summary(const PrepareResult& result);

}  // namespace fanout::data
