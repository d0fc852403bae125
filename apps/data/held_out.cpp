#include "apps/data/held_out.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/check.h"

namespace fanout::data {

// Note [A run's own held-out split]
// `train --data FILE` without --val-data would otherwise train on every token and
// report no held-out loss, so a run holds out the end of its data: the last share
// (--val-split, 5% by default, at most kHeldOutMaxTokens tokens) of the packed
// stream, the same whether the data is a text file or an llm.c token file. The tail
// rather than a spread of documents: a token file is one stream whose documents
// are unknown until it is read whole, and the tail is one cut that costs nothing to
// find. The cut is moved to just after an [EOT] where one lies in the first half of
// the tail, so the held-out text starts at a document's start. Nothing depends on
// the batch geometry: the same data and share give the same split on every rank and
// after every --resume (the share is a stored setting).
int64_t held_out_count(int64_t tokens, double share) {
  FANOUT_ASSERT(tokens >= 0 && share >= 0 && share < 1, tokens, " tokens, share ", share);
  if (share == 0 || tokens < 2) return 0;
  const auto want = static_cast<int64_t>(std::llround(share * static_cast<double>(tokens)));
  return std::clamp<int64_t>(want, 1, std::min(kHeldOutMaxTokens, tokens - 1));
}

TokenData token_data_hold_out(TokenData& data, int64_t count) {
  const int64_t n = data.token_count();
  FANOUT_ASSERT(count > 0 && count < n, "holding out ", count, " of ", n, " tokens");
  int64_t cut = n - count;
  if (data.eot >= 0) {
    std::vector<int32_t> head(static_cast<size_t>(count / 2));
    data.tokens_copy(cut, static_cast<int64_t>(head.size()), head.data());
    const auto eot = std::find(head.begin(), head.end(), data.eot);
    if (eot != head.end()) cut += (eot - head.begin()) + 1;
  }
  TokenData held;
  held.path = data.path + " (held out)";
  held.bot = data.bot, held.eot = data.eot, held.pad = data.pad;
  held.from_bin = data.from_bin;
  if (data.map) {
    held.map = data.map;
    held.map_first = data.map_first + cut, held.map_count = n - cut;
    data.map_count = cut;
    return held;
  }
  held.tokens.assign(data.tokens.begin() + cut, data.tokens.end());
  data.tokens.resize(static_cast<size_t>(cut));  // not shrunk: a copy of it all would cost more
  if (data.documents.empty()) return held;
  // Each document lies in the stream as [BOT] ids [EOT] (a special the tokenizer
  // lacks is left out): find the one the cut falls in.
  const int64_t before = data.bot >= 0 ? 1 : 0, after = data.eot >= 0 ? 1 : 0;
  int64_t start = 0;
  size_t k = 0;
  for (; k < data.documents.size(); ++k) {
    const int64_t end = start + before + static_cast<int64_t>(data.documents[k].size()) + after;
    if (cut < end) break;
    start = end;
  }
  FANOUT_ASSERT(k < data.documents.size(), "the cut at ", cut, " is past the documents");
  std::vector<std::vector<int32_t>>& docs = data.documents;
  if (cut > start) {
    // Inside document k: its ids before the cut stay, the rest are held out.
    std::vector<int32_t>& doc = docs[k];
    const auto keep = static_cast<size_t>(
        std::clamp<int64_t>(cut - start - before, 0, static_cast<int64_t>(doc.size())));
    if (keep < doc.size()) held.documents.emplace_back(doc.begin() + keep, doc.end());
    doc.resize(keep);
    ++k;
  }
  for (size_t i = k; i < docs.size(); ++i) held.documents.push_back(std::move(docs[i]));
  docs.resize(k);
  docs.erase(std::remove_if(docs.begin(), docs.end(), [](const auto& d) { return d.empty(); }),
             docs.end());
  return held;
}

}  // namespace fanout::data
