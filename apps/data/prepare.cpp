#include "apps/data/prepare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "apps/data/token_file.h"
#include "apps/data/tokenizer.h"
#include "engine/core/check.h"
#include "engine/core/file_io.h"

namespace fanout::data {

namespace {
namespace fs = std::filesystem;

struct Document {
  std::vector<int32_t> ids;  // without BOT/EOT
  size_t file = 0;           // index into options.data
  int64_t index = 0;         // 1-based within its file, for messages
};

// --out: an existing directory (checked by prepare_run) or a path that can become one.
void out_dir_create(const std::string& out) {
  std::error_code ec;
  if (fs::is_directory(out, ec)) return;
  fs::create_directories(out, ec);
  FANOUT_CHECK(!ec, "--out ", out, ": cannot create the directory: ", ec.message());
}

// Refuses a file that is already tokens: prepare reads text.
void check_not_token_file(const std::string& path, const std::string& text) {
  int32_t magic = 0;
  if (text.size() >= 8) std::memcpy(&magic, text.data(), 4);
  FANOUT_CHECK(magic != kBinMagicU16 && magic != kBinMagicU32, path,
               ": is an llm.c token file already; prepare reads text (train on it with --data)");
}
}  // namespace

// Note [The validation split]
// Documents, not tokens, are split, so no document is cut between the two files.
// The split depends only on the number of documents: the `val` validation documents
// are spread evenly over the whole input (document i is held out when
// floor((i+1) * val / n) > floor(i * val / n)), so a corpus whose files differ in kind
// (chapters, sources) is held out from all of them, and the same inputs always give
// the same files.
int64_t prepare_val_count(int64_t documents, double fraction) {
  FANOUT_CHECK(std::isfinite(fraction) && fraction > 0 && fraction < 1,
               "--val-fraction must be in (0, 1), got ", fraction);
  if (documents < 2) return 0;
  const int64_t val =
      std::max<int64_t>(1, static_cast<int64_t>(std::llround(fraction * documents)));
  FANOUT_CHECK(val < documents, "--val-fraction ", fraction, " of ", documents,
               " documents leaves no document for training; use a smaller fraction");
  return val;
}

bool prepare_is_val(int64_t index, int64_t documents, int64_t val) {
  FANOUT_ASSERT(index >= 0 && index < documents && val >= 0 && val <= documents, "document ", index,
                " of ", documents, ", ", val, " held out");
  return (index + 1) * val / documents > index * val / documents;
}

PrepareResult prepare_run(const PrepareOptions& o) {
  FANOUT_CHECK(!o.data.empty(), "--data: give at least one text file");
  // Every check that needs no encoding comes first, so nothing is written on a mistake.
  FANOUT_CHECK(std::isfinite(o.val_fraction) && o.val_fraction > 0 && o.val_fraction < 1,
               "--val-fraction must be in (0, 1), got ", o.val_fraction);
  FANOUT_CHECK(!o.tokenizer.empty(), "--tokenizer: an empty string is not a file name");
  FANOUT_CHECK(!o.out.empty(), "--out: an empty string is not a directory name");
  const std::shared_ptr<const TextTokenizer> tokenizer = tokenizer_load(o.tokenizer);
  const TextTokenizer& tok = *tokenizer;
  if (!o.packing) {
    const char* missing = tok.bot() < 0   ? "[BOT]"
                          : tok.eot() < 0 ? "[EOT]"
                          : tok.pad() < 0 ? "[PAD]"
                                          : nullptr;
    FANOUT_CHECK(!missing, "--packing off: ", o.tokenizer, " has no ", missing,
                 " token (documents are stored as [BOT] doc [EOT] and padded with [PAD] when "
                 "trained); use --packing on");
  }
  {
    std::error_code ec;
    const fs::file_status st = fs::status(o.out, ec);
    FANOUT_CHECK(!fs::exists(st) || fs::is_directory(st), "--out ", o.out,
                 ": is a file, not a directory (prepare writes train.bin and val.bin into it)");
  }
  PrepareResult r;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Document> docs;
  const uint64_t limit = token_file_text_limit();
  for (size_t f = 0; f < o.data.size(); ++f) {
    const std::string& path = o.data[f];
    FANOUT_CHECK(!path.empty(), "--data: an empty string is not a file name");
    const std::string text = file_read_regular(path, limit);
    check_not_token_file(path, text);
    r.text_bytes += text.size();
    const std::vector<std::string> split = split_documents(text);
    FANOUT_CHECK(!split.empty(), path, ": holds no text (only blank lines)");
    for (size_t d = 0; d < split.size(); ++d) {
      Document doc{tok.encode(split[d]), f, static_cast<int64_t>(d) + 1};
      if (!o.packing) {
        for (const int32_t id : doc.ids) {
          FANOUT_CHECK(id != tok.bot() && id != tok.eot() && id != tok.pad(), path, ": document ",
                       doc.index, " holds the text of a special token (id ", id,
                       "), which would cut it apart for --packing off; remove it or use "
                       "--packing on");
        }
      }
      docs.push_back(std::move(doc));
    }
  }
  r.documents = static_cast<int64_t>(docs.size());
  const int64_t val = prepare_val_count(r.documents, o.val_fraction);

  std::vector<int32_t> train, heldout;
  for (int64_t i = 0; i < r.documents; ++i) {
    const bool is_val = prepare_is_val(i, r.documents, val);
    std::vector<int32_t>& to = is_val ? heldout : train;
    (is_val ? r.val_documents : r.train_documents) += 1;
    if (tok.bot() >= 0) to.push_back(tok.bot());
    to.insert(to.end(), docs[i].ids.begin(), docs[i].ids.end());
    if (tok.eot() >= 0) to.push_back(tok.eot());
    std::vector<int32_t>().swap(docs[i].ids);  // freed as it is copied
  }
  r.train_tokens = static_cast<int64_t>(train.size());
  r.val_tokens = static_cast<int64_t>(heldout.size());
  FANOUT_CHECK(r.train_tokens > 0, o.data[0], ": the documents encode to no tokens");
  // One llm.c file holds at most 2^31 - 1 tokens (its count is an int32).
  FANOUT_CHECK(train.size() <= 0x7fffffffu, "--out ", o.out, ": ", train.size(),
               " training tokens are more than one llm.c file holds (2^31 - 1)");

  out_dir_create(o.out);
  const int64_t vocab = tok.vocab_size();
  r.token_bytes = vocab <= 65536 ? 2 : 4;
  const std::string train_path = (fs::path(o.out) / "train.bin").string();
  const std::string val_path = (fs::path(o.out) / "val.bin").string();
  token_file_write_bin(train_path, train, vocab);
  r.files.push_back(train_path);
  if (!heldout.empty()) {
    token_file_write_bin(val_path, heldout, vocab);
    r.files.push_back(val_path);
  } else {
    // One document: no validation file; an older one would not belong to this train.bin.
    std::error_code ec;
    if (fs::is_regular_file(val_path, ec)) fs::remove(val_path, ec);
  }
  for (const std::string& f : r.files) r.file_bytes += file_regular_size(f);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string prepare_summary(const PrepareResult& r) {
  std::string files;
  for (const std::string& f : r.files) files += (files.empty() ? "" : ", ") + f;
  const double tokens = static_cast<double>(r.train_tokens + r.val_tokens);
  char head[512], tail[128];
  std::snprintf(head, sizeof head,
                "prepare: %lld documents (%lld train, %lld val), %lld tokens (%lld train, %lld "
                "val) as uint%d -> ",
                static_cast<long long>(r.documents), static_cast<long long>(r.train_documents),
                static_cast<long long>(r.val_documents),
                static_cast<long long>(r.train_tokens + r.val_tokens),
                static_cast<long long>(r.train_tokens), static_cast<long long>(r.val_tokens),
                r.token_bytes * 8);
  std::snprintf(tail, sizeof tail, " (%llu bytes) in %.2f s, %.0f tokens/s",
                static_cast<unsigned long long>(r.file_bytes), r.seconds,
                tokens / std::max(r.seconds, 1e-9));
  return head + files + tail;
}

}  // namespace fanout::data
