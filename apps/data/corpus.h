#pragma once
// The embedded default corpus for `fanout train` with no data file: short English
// passages (stories, animal facts, counting, arithmetic, questions and answers)
// drawn from a small probabilistic grammar written in corpus.cpp. Nothing is
// downloaded or copied; the same seed gives the same bytes on every platform.

#include <cstdint>
#include <string>
#include <vector>

#include "apps/data/token_file.h"

namespace fanout::data {

struct Corpus {
  std::string name;
  std::vector<std::string> train_documents, heldout_documents;
};

constexpr uint64_t kDefaultCorpusSeed = 2026;

// About 500 KB of training text in documents of 3-8 sentences, and about 5% more
// held out: documents from the same grammar, none equal to a training document.
// Each document is one paragraph (no blank lines, no trailing newline).
Corpus default_corpus(uint64_t seed = kDefaultCorpusSeed);

// The documents tokenized exactly as token_file_load tokenizes a text file holding
// them separated by blank lines: tokens = [BOT] doc [EOT] per document, documents =
// each one's byte ids, path = `name` (e.g. "<embedded default corpus: train>").
// Throws if a document would not come back whole from such a file (empty, holding
// a blank line, or starting or ending with a newline).
TokenData corpus_token_data(const std::vector<std::string>& documents, const std::string& name);

// Unigram entropy of a token stream in nats per token: -sum p log p over the token
// frequencies. The loss of a model that ignores context; a trained model should
// reach well below it.
double unigram_entropy(const std::vector<int32_t>& tokens);

// The same over token data of any size (an llm.c file is read in blocks), counting
// at most its first `limit` tokens.
double token_data_unigram_entropy(const TokenData& data, int64_t limit);

}  // namespace fanout::data
