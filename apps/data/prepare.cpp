#include "apps/data/prepare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "apps/data/jsonl_documents.h"
#include "apps/data/output_kinds.h"
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
  int64_t index = 0;         // 1-based within its file (JSON Lines: its line), for messages
};

// The documents of one input file: text between blank lines, or JSON Lines.
std::vector<JsonlDocument> file_documents(const std::string& path, const std::string& text,
                                          bool jsonl, const std::string& field) {
  if (jsonl) return jsonl_documents(text, path, field);
  std::vector<JsonlDocument> docs;
  for (std::string& d : split_documents(text)) docs.push_back({std::move(d), 0});
  return docs;
}

// Note [The tokenizer beside the token files]
// prepare leaves the tokenizer it encoded with as OUT/tokenizer.json, so a run on
// OUT/train.bin decodes with the right one (train_setup.cpp). An OUT/tokenizer.json
// that is already this tokenizer (the --tokenizer itself, or an earlier prepare with
// it) is left as it is; another one is replaced only where it is an earlier
// prepare's (OUT/train.bin beside it), else it is the user's file and refused. It is
// removed before the token files are written and written after them, so an
// interrupted prepare never leaves new token files beside an old tokenizer.
bool tokenizer_file_holds(const std::string& path, const std::string& json) {
  try {
    return tokenizer_load(path)->to_json() == json;
  } catch (const Error&) {
    return false;
  }
}

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
  FANOUT_CHECK(o.format.empty() || o.format == "text" || o.format == "jsonl",
               "--format must be text or jsonl, got '", o.format, "'");
  FANOUT_CHECK(!o.text_field.empty(), "--text-field: an empty string is not a field name");
  const std::shared_ptr<const TextTokenizer> tokenizer = tokenizer_resolve(o.tokenizer);
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
  // Never over an input, nor over a file that is no token file (file_io.h).
  std::vector<std::string> inputs = o.data;
  if (o.tokenizer != "byte") inputs.push_back(o.tokenizer);
  const OutputRules rules = token_file_output(inputs);
  const std::string train_path = (fs::path(o.out) / "train.bin").string();
  const std::string val_path = (fs::path(o.out) / "val.bin").string();
  if (std::error_code ec; fs::is_directory(o.out, ec)) {
    for (const std::string& path : {train_path, val_path}) file_check_output(path, "--out", rules);
    // The tokenizer beside them may be --tokenizer itself (then kept), never a --data file.
    file_check_not_input((fs::path(o.out) / kTokenFileTokenizerName).string(), "--out", o.data);
  }
  // Note [The tokenizer beside the token files]
  const std::string tokenizer_path = (fs::path(o.out) / kTokenFileTokenizerName).string();
  const std::string tokenizer_json = tok.to_json();
  std::error_code ec;
  const bool tokenizer_there = fs::exists(fs::symlink_status(tokenizer_path, ec));
  const bool tokenizer_kept =
      tokenizer_there && tokenizer_file_holds(tokenizer_path, tokenizer_json);
  FANOUT_CHECK(
      !tokenizer_there || tokenizer_kept || fs::is_regular_file(fs::path(o.out) / "train.bin", ec),
      "--out ", o.out, ": holds a ", kTokenFileTokenizerName,
      " that is not --tokenizer's and no train.bin beside it; prepare writes the "
      "tokenizer it encodes with there: move that file or choose another --out");
  const OutputRules tokenizer_rules = tokenizer_json_output(o.data);
  if (!tokenizer_kept && fs::is_directory(o.out, ec)) {
    file_check_output(tokenizer_path, "--out", tokenizer_rules);
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
    const bool jsonl = o.format.empty() ? jsonl_name(path) : o.format == "jsonl";
    const std::vector<JsonlDocument> split = file_documents(path, text, jsonl, o.text_field);
    FANOUT_CHECK(!split.empty(), path,
                 jsonl ? ": holds no document (every line is blank or its text is)"
                       : ": holds no text (only blank lines)");
    for (size_t d = 0; d < split.size(); ++d) {
      Document doc{tok.encode(split[d].text), f,
                   jsonl ? split[d].line : static_cast<int64_t>(d) + 1};
      if (!o.packing) {
        for (const int32_t id : doc.ids) {
          FANOUT_CHECK(id != tok.bot() && id != tok.eot() && id != tok.pad(), path,
                       jsonl ? ":" : ": document ", doc.index, jsonl ? ": the document" : "",
                       " holds the text of a special token (id ", id,
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
  // Checked again now the encoding is done; every file lands before a signal acts.
  for (const std::string& path : {train_path, val_path}) file_check_output(path, "--out", rules);
  const SignalsDeferred deferred;
  if (tokenizer_there && !tokenizer_kept) fs::remove(tokenizer_path, ec);
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
  if (!tokenizer_kept) file_write_atomic(tokenizer_path, tokenizer_json, "--out", tokenizer_rules);
  r.tokenizer_file = tokenizer_path;
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
  const std::string tokenizer =
      r.tokenizer_file.empty() ? "" : ", tokenizer beside them: " + r.tokenizer_file;
  return head + files + tail + tokenizer;
}

}  // namespace fanout::data
