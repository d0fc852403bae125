#include "apps/data/bpe_trainer.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <queue>
#include <string_view>
#include <unordered_map>

#include <tbb/combinable.h>
#include <tbb/info.h>
#include <tbb/parallel_pipeline.h>

#include "apps/data/byte_level.h"
#include "apps/data/jsonl_documents.h"
#include "apps/data/token_file.h"
#include "engine/core/check.h"
#include "engine/core/file_io.h"

namespace fanout::data {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::array<std::string_view, 3> kSpecials = {kBotToken, kEotToken, kPadToken};
constexpr int32_t kFirstByteId = 3;
// Pre-tokenizer calls see at most about this much text (cache-sized).
constexpr size_t kBlockBytes = size_t{64} << 10;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using WordCounts = std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>>;

// --- counting pieces ------------------------------------------------------------------

bool is_ascii_space(unsigned char c) {
  return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

// The pieces of text without special tokens, counted; `text` is pre-tokenized in
// blocks of about kBlockBytes cut at bpe_chunk_cut (the same pieces as a whole).
void count_segment(std::string_view text, WordCounts& counts, int64_t& pieces) {
  while (!text.empty()) {
    size_t cut = text.size();
    for (size_t window = kBlockBytes; window < text.size(); window *= 2) {
      if (size_t c = bpe_chunk_cut(text.substr(0, window)); c > 0) {
        cut = c;
        break;
      }
    }
    for (std::string_view piece : gpt2_pretokenize(text.substr(0, cut))) {
      if (auto it = counts.find(piece); it != counts.end()) {
        ++it->second;
      } else {
        counts.emplace(std::string(piece), 1);
      }
      ++pieces;
    }
    text.remove_prefix(cut);
  }
}

// Special tokens' text is split out first, as HF's encoder does with added tokens.
void count_text(std::string_view text, WordCounts& counts, int64_t& pieces) {
  size_t start = 0, at = 0;
  while ((at = text.find('[', at)) != std::string_view::npos) {
    size_t len = 0;
    for (std::string_view s : kSpecials) {
      if (text.substr(at, s.size()) == s) len = s.size();
    }
    if (len == 0) {
      ++at;
      continue;
    }
    count_segment(text.substr(start, at - start), counts, pieces);
    at += len;
    start = at;
  }
  count_segment(text.substr(start), counts, pieces);
}

// --- reading text in chunks ---------------------------------------------------------

// A text to train on: a file (read with pread) or a string (tests). A JSON Lines
// source is trained on as the text of its documents joined by blank lines ("\n\n"),
// exactly as a text file holding them would be.
struct Source {
  std::string name;
  uint64_t size = 0;
  const std::string* text = nullptr;  // null: the file `name`
  bool jsonl = false;
  std::string field;  // JSON Lines: the member holding each document
};

size_t read_at(int fd, char* dst, size_t bytes, uint64_t offset, const std::string& path) {
  size_t have = 0;
  while (have < bytes) {
    const ssize_t n = ::pread(fd, dst + have, bytes - have, static_cast<off_t>(offset + have));
    if (n < 0 && errno == EINTR) continue;
    FANOUT_CHECK(n >= 0, path, ": cannot read: ", std::strerror(errno));
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  return have;
}

// Checks a --data file before any work: a regular, non-empty text file.
Source source_check(const std::string& path, const BpeTrainOptions& options) {
  FANOUT_CHECK(!path.empty(), "an empty path was given as a text file");
  const RegularFile file(path);
  FANOUT_CHECK(file.size() > 0, path, ": is empty");
  char head[8] = {};
  if (read_at(file.fd(), head, sizeof head, 0, path) == sizeof head) {
    int32_t magic = 0, version = 0;
    std::memcpy(&magic, head, 4);
    std::memcpy(&version, head + 4, 4);
    FANOUT_CHECK(
        !((magic == kBinMagicU16 && version == 1) || (magic == kBinMagicU32 && version == 7)), path,
        ": is a token file, not text (tokenizers train on text)");
  }
  const bool jsonl = options.format.empty() ? jsonl_name(path) : options.format == "jsonl";
  return Source{path, file.size(), nullptr, jsonl, options.text_field};
}

// Hands out the sources' text in chunks of about chunk_bytes, each ending at a
// source's end or at bpe_chunk_cut. Called by one thread at a time.
class ChunkReader {
 public:
  ChunkReader(const std::vector<Source>& sources, size_t chunk_bytes)
      : sources_(sources), chunk_bytes_(std::max<size_t>(chunk_bytes, 1)) {}

  // The next chunk, or false at the end.
  bool next(std::string& out) {
    while (index_ < sources_.size()) {
      const Source& src = sources_[index_];
      if (!file_ && !src.text) file_ = std::make_unique<RegularFile>(src.name);
      // Read until a cut is found or the source ends; the text past the cut is kept.
      while (offset_ < src.size) {
        const size_t old = carry_.size();
        read_more(src);
        if (offset_ >= src.size) break;
        // Search only the new text (and the byte before it).
        const size_t from = old > 0 ? old - 1 : 0;
        if (size_t cut = bpe_chunk_cut(std::string_view(carry_).substr(from)); cut > 0) {
          out.assign(carry_, 0, from + cut);
          carry_.erase(0, from + cut);
          return true;
        }
      }
      FANOUT_CHECK(!src.jsonl || documents_ > 0, src.name,
                   ": holds no document (every line is blank or its text is)");
      out.swap(carry_);
      carry_.clear();
      file_.reset();
      read_ += src.size;
      offset_ = 0, lines_ = 0, documents_ = 0;
      ++index_;
      if (!out.empty()) return true;
    }
    return false;
  }

  // Bytes of the sources read so far (a JSON Lines file's whole lines, not its text).
  uint64_t bytes_read() const { return read_ + offset_; }

 private:
  // Appends up to chunk_bytes of `src` to carry_: the bytes of a text source, the
  // documents of the JSON Lines read whole so far (a line cut by the read waits in
  // raw_ for its end).
  void read_more(const Source& src) {
    std::string& into = src.jsonl ? raw_ : carry_;
    const size_t old = into.size();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_bytes_, src.size - offset_));
    into.resize(old + n);
    if (src.text) {
      std::memcpy(into.data() + old, src.text->data() + offset_, n);
    } else {
      const size_t got = read_at(file_->fd(), into.data() + old, n, offset_, src.name);
      // A file cut short while it is read is an error, not a smaller corpus.
      FANOUT_CHECK(got == n, src.name, ": changed while it was read (", offset_ + got,
                   " bytes where there were ", src.size, ")");
    }
    offset_ += n;
    if (!src.jsonl) return;
    const bool end = offset_ >= src.size;
    const size_t whole = end ? raw_.size() : raw_.rfind('\n') + 1;  // npos + 1 == 0
    if (whole == 0) return;
    const std::string_view lines = std::string_view(raw_).substr(0, whole);
    for (JsonlDocument& doc : jsonl_documents(lines, src.name, src.field, lines_ + 1)) {
      if (documents_++ > 0) carry_ += "\n\n";
      carry_ += doc.text;
    }
    lines_ += static_cast<int64_t>(std::count(lines.begin(), lines.end(), '\n'));
    raw_.erase(0, whole);
  }

  const std::vector<Source>& sources_;
  size_t chunk_bytes_;
  size_t index_ = 0;
  uint64_t offset_ = 0, read_ = 0;
  std::unique_ptr<RegularFile> file_;
  std::string carry_;
  std::string raw_;        // JSON Lines: the start of a line not read whole yet
  int64_t lines_ = 0;      // JSON Lines: lines converted so far, for messages
  int64_t documents_ = 0;  // JSON Lines: documents taken so far
};

struct Counted {
  WordCounts words;
  int64_t pieces = 0;
};

// Every piece of every source, counted by as many threads as oneTBB gives.
Counted count_sources(const std::vector<Source>& sources, const BpeTrainOptions& options,
                      const std::function<void(const BpeTrainProgress&)>& progress) {
  uint64_t total = 0;
  for (const Source& s : sources) total += s.size;
  ChunkReader reader(sources, static_cast<size_t>(options.chunk_bytes));
  tbb::combinable<Counted> locals;
  // Progress counts the bytes of the sources (a JSON Lines file's whole lines) whose
  // text has been counted: each chunk carries the bytes read since the one before.
  struct Chunk {
    std::string text;
    uint64_t read = 0;
  };
  std::atomic<int64_t> counted{0};
  uint64_t handed = 0;  // bytes_read() when the last chunk was handed out
  const size_t in_flight = 2 * static_cast<size_t>(tbb::info::default_concurrency()) + 1;
  auto read = [&](tbb::flow_control& fc) -> std::shared_ptr<Chunk> {
    auto chunk = std::make_shared<Chunk>();
    if (!reader.next(chunk->text)) {
      fc.stop();
      return nullptr;
    }
    chunk->read = reader.bytes_read() - handed;
    handed = reader.bytes_read();
    if (progress) {
      progress({BpeTrainProgress::Phase::kCounting, counted.load(), static_cast<int64_t>(total)});
    }
    return chunk;
  };
  auto count = [&](const std::shared_ptr<Chunk>& chunk) {
    Counted& local = locals.local();
    count_text(chunk->text, local.words, local.pieces);
    counted += static_cast<int64_t>(chunk->read);
  };
  tbb::parallel_pipeline(
      in_flight,
      tbb::make_filter<void, std::shared_ptr<Chunk>>(tbb::filter_mode::serial_in_order, read) &
          tbb::make_filter<std::shared_ptr<Chunk>, void>(tbb::filter_mode::parallel, count));
  if (progress) {
    progress({BpeTrainProgress::Phase::kCounting, counted.load(), static_cast<int64_t>(total)});
  }
  // Sums do not depend on which thread counted what.
  Counted all;
  locals.combine_each([&](Counted& part) {
    if (part.words.size() > all.words.size()) std::swap(part.words, all.words);
    for (auto& [word, n] : part.words) all.words[word] += n;
    all.pieces += part.pieces;
    part.words.clear();
  });
  return all;
}

// --- merges ---------------------------------------------------------------------------

using Pair = uint64_t;  // (left id << 32) | right id: ordered as (left, right)
Pair pair_of(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
int32_t pair_left(Pair p) {
  return static_cast<int32_t>(p >> 32);
}
int32_t pair_right(Pair p) {
  return static_cast<int32_t>(p & 0xffffffffu);
}

struct QueueEntry {
  int64_t count;
  Pair pair;
};
// The most frequent pair first; among equals the smallest (left, right) ids, as HF.
struct QueueOrder {
  bool operator()(const QueueEntry& x, const QueueEntry& y) const {
    return x.count != y.count ? x.count < y.count : x.pair > y.pair;
  }
};

// Note [Incremental BPE]
// Every distinct piece is a word: its symbols (token ids) and how often it occurs.
// `counts` holds each adjacent pair's occurrences over all words (weighted by the
// word's count), `where` the words a pair may occur in (a superset: stale entries
// are harmless). A merge rewrites only the words in where[pair] and applies the
// changes around each occurrence: (x, a) and (b, y) lose, (x, ab) and (ab, y) gain.
// Only pairs holding ab gain: they are pushed on the queue after the merge with
// their new count (ab may be an older token when two merges spell the same
// string: "ab"+"c" and "a"+"bc"). Pairs that lost keep stale (too high) entries,
// which are re-pushed with their true count when they reach the top. The merged
// pair itself is gone for good: merges only join symbols.
class MergeState {
 public:
  MergeState(const WordCounts& words, const std::array<int32_t, 256>& byte_id) {
    for (const auto& [word, n] : words) {
      if (word.size() < 2) continue;  // no pairs, nothing to learn from
      offset_.push_back(symbols_.size());
      length_.push_back(static_cast<uint32_t>(word.size()));
      count_.push_back(n);
      for (unsigned char c : word) symbols_.push_back(byte_id[c]);
    }
    for (uint32_t w = 0; w < count_.size(); ++w) {
      const int32_t* s = &symbols_[offset_[w]];
      for (uint32_t i = 0; i + 1 < length_[w]; ++i) {
        const Pair p = pair_of(s[i], s[i + 1]);
        counts_[p] += count_[w];
        std::vector<uint32_t>& list = where_[p];
        if (list.empty() || list.back() != w) list.push_back(w);
      }
    }
    for (const auto& [p, n] : counts_) queue_.push({n, p});
  }

  // The most frequent pair, taken out of the counts (false when none is left).
  bool pop_best(Pair& best) {
    while (!queue_.empty()) {
      const QueueEntry top = queue_.top();
      queue_.pop();
      auto it = counts_.find(top.pair);
      const int64_t now = it == counts_.end() ? 0 : it->second;
      if (now != top.count) {
        if (now > 0) queue_.push({now, top.pair});
        continue;
      }
      counts_.erase(it);
      best = top.pair;
      return true;
    }
    return false;
  }

  // Rewrites every occurrence of `pair` (just popped) as `c` (see the note).
  void merge_pair(Pair pair, int32_t c) {
    const int32_t a = pair_left(pair), b = pair_right(pair);
    merging_ = pair;
    std::vector<uint32_t> list;
    if (auto it = where_.find(pair); it != where_.end()) {
      list.swap(it->second);
      where_.erase(it);
    }
    gained_.clear();
    for (uint32_t w : list) {
      int32_t* s = &symbols_[offset_[w]];
      const uint32_t n = length_[w];
      const int64_t k = count_[w];
      uint32_t out = 0;
      // In place: out <= i, and s[out - 1] is the (possibly merged) left neighbour.
      for (uint32_t i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
          if (out > 0) {
            change(pair_of(s[out - 1], a), -k, w);
            change(pair_of(s[out - 1], c), k, w);
          }
          if (i + 2 < n) {
            change(pair_of(b, s[i + 2]), -k, w);
            change(pair_of(c, s[i + 2]), k, w);
          }
          s[out++] = c;
          i += 2;
        } else {
          s[out++] = s[i++];
        }
      }
      length_[w] = out;
    }
    std::sort(gained_.begin(), gained_.end());
    gained_.erase(std::unique(gained_.begin(), gained_.end()), gained_.end());
    for (Pair p : gained_) {
      auto it = counts_.find(p);
      if (it != counts_.end() && it->second > 0) queue_.push({it->second, p});
    }
    merging_ = ~Pair{0};
  }

 private:
  void change(Pair p, int64_t delta, uint32_t w) {
    if (p == merging_) return;  // its count is gone already
    int64_t& n = counts_[p];
    n += delta;
    FANOUT_ASSERT(n >= 0, "pair count fell below zero");
    if (delta > 0) {
      std::vector<uint32_t>& list = where_[p];
      if (list.empty() || list.back() != w) list.push_back(w);
      gained_.push_back(p);
    }
  }

  std::vector<int32_t> symbols_;  // every word's symbols, word w at offset_[w], length_[w] long
  std::vector<uint64_t> offset_;
  std::vector<uint32_t> length_;
  std::vector<int64_t> count_;
  std::unordered_map<Pair, int64_t> counts_;
  std::unordered_map<Pair, std::vector<uint32_t>> where_;
  std::priority_queue<QueueEntry, std::vector<QueueEntry>, QueueOrder> queue_;
  std::vector<Pair> gained_;
  Pair merging_ = ~Pair{0};
};

BpeModel train_sources(const std::vector<Source>& sources, const BpeTrainOptions& options,
                       const std::function<void(const BpeTrainProgress&)>& progress,
                       BpeTrainStats* stats) {
  FANOUT_CHECK(options.vocab_size >= kBpeMinVocab && options.vocab_size <= kBpeMaxVocab,
               "a vocabulary size of ", options.vocab_size, " is not possible: from ", kBpeMinVocab,
               " (3 special tokens, 256 bytes and one merge) to ", kBpeMaxVocab);
  FANOUT_CHECK(options.chunk_bytes > 0, "chunk_bytes must be positive");
  FANOUT_CHECK(!sources.empty(), "no text to train a tokenizer on");
  BpeTrainStats st;
  const auto t0 = Clock::now();
  const Counted counted = count_sources(sources, options, progress);
  for (const Source& s : sources) st.bytes += static_cast<int64_t>(s.size);
  st.pieces = counted.pieces;
  st.count_seconds = seconds_since(t0);

  // Ids: the specials, then the byte characters in code point order (UTF-8 order).
  BpeModel model;
  std::vector<std::string> token_bytes;
  for (std::string_view s : kSpecials) {
    model.added.push_back({static_cast<int32_t>(token_bytes.size()), std::string(s), true});
    token_bytes.emplace_back(s);
  }
  const std::array<std::string, 256>& alphabet = byte_level_alphabet();
  std::array<int, 256> order{};
  for (int b = 0; b < 256; ++b) order[b] = b;
  std::sort(order.begin(), order.end(), [&](int x, int y) { return alphabet[x] < alphabet[y]; });
  std::array<int32_t, 256> byte_id{};
  for (int r = 0; r < 256; ++r) {
    byte_id[order[r]] = kFirstByteId + r;
    token_bytes.emplace_back(1, static_cast<char>(order[r]));
  }

  const auto t1 = Clock::now();
  MergeState state(counted.words, byte_id);
  st.distinct = static_cast<int64_t>(counted.words.size());
  // A merge whose string is already a token (from another pair) reuses its id and
  // adds no token, as HF's trainer does: the vocabulary counts distinct strings.
  std::unordered_map<std::string, int32_t> id_of;
  for (size_t id = kSpecials.size(); id < token_bytes.size(); ++id) {
    id_of.emplace(token_bytes[id], static_cast<int32_t>(id));
  }
  const auto first = static_cast<int64_t>(token_bytes.size());
  const int64_t want = options.vocab_size - first;
  std::vector<Pair> merges;
  Pair best = 0;
  if (progress) progress({BpeTrainProgress::Phase::kMerging, 0, want});
  while (static_cast<int64_t>(token_bytes.size()) < options.vocab_size && state.pop_best(best)) {
    std::string joined = token_bytes[pair_left(best)] + token_bytes[pair_right(best)];
    auto [it, added] = id_of.emplace(joined, static_cast<int32_t>(token_bytes.size()));
    if (added) token_bytes.push_back(std::move(joined));
    state.merge_pair(best, it->second);
    merges.push_back(best);
    if (progress && merges.size() % 64 == 0) {
      progress({BpeTrainProgress::Phase::kMerging, static_cast<int64_t>(token_bytes.size()) - first,
                want});
    }
  }
  // Text with few distinct pieces runs out of pairs first: the vocabulary is then
  // smaller (still dense), as HF's trainer stops.
  if (progress) {
    const int64_t done = static_cast<int64_t>(token_bytes.size()) - first;
    progress({BpeTrainProgress::Phase::kMerging, done, done});
  }
  st.merge_seconds = seconds_since(t1);

  model.vocab.reserve(token_bytes.size());
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    model.vocab.push_back(id < kSpecials.size() ? token_bytes[id]
                                                : byte_level_encode(token_bytes[id]));
  }
  model.merges.reserve(merges.size());
  for (Pair p : merges) {
    model.merges.emplace_back(model.vocab[pair_left(p)], model.vocab[pair_right(p)]);
  }
  if (stats) *stats = st;
  return model;
}

}  // namespace

// --- public ---------------------------------------------------------------------------

size_t bpe_chunk_cut(std::string_view text) {
  for (size_t p = text.size(); p-- > 1;) {
    const auto here = static_cast<unsigned char>(text[p]);
    const auto before = static_cast<unsigned char>(text[p - 1]);
    if (is_ascii_space(here) && before > 0x20 && before < 0x7f) return p;
  }
  return 0;
}

BpeModel bpe_train(const std::vector<std::string>& files, const BpeTrainOptions& options,
                   const std::function<void(const BpeTrainProgress&)>& progress,
                   BpeTrainStats* stats) {
  FANOUT_CHECK(!files.empty(), "no text file to train a tokenizer on");
  std::vector<Source> sources;
  FANOUT_CHECK(options.format.empty() || options.format == "text" || options.format == "jsonl",
               "the format of text files is text or jsonl, not '", options.format, "'");
  FANOUT_CHECK(!options.text_field.empty(), "an empty string is not a JSON Lines field name");
  for (const std::string& f : files) sources.push_back(source_check(f, options));
  return train_sources(sources, options, progress, stats);
}

BpeModel bpe_train_texts(const std::vector<std::string>& texts, const BpeTrainOptions& options) {
  std::vector<Source> sources;
  for (size_t i = 0; i < texts.size(); ++i) {
    FANOUT_CHECK(!texts[i].empty(), "text ", i, " is empty");
    sources.push_back({"text " + std::to_string(i), texts[i].size(), &texts[i], false, ""});
  }
  return train_sources(sources, options, {}, nullptr);
}

}  // namespace fanout::data
