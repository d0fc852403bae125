#include "apps/data/token_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "apps/data/jsonl_documents.h"
#include "apps/data/tokenizer.h"
#include "engine/core/check.h"
#include "engine/core/checked_math.h"
#include "engine/core/file_io.h"

namespace fanout::data {

// Mapped tokens are read as they lie in the file.
static_assert(std::endian::native == std::endian::little, "llm.c token files are little-endian");

namespace {
constexpr int kHeaderInts = 256;
constexpr int64_t kHeaderBytes = kHeaderInts * 4;
constexpr uint64_t kMaxTextBytes = uint64_t{1} << 30;
constexpr const char* kDataTextFieldHint =
    "a .jsonl data file is read by its \"text\" field; fanout prepare --text-field reads "
    "another";

// Up to `bytes` from `offset`; fewer only at the end of the file.
size_t read_at(int fd, void* dst, size_t bytes, uint64_t offset, const std::string& path) {
  size_t have = 0;
  while (have < bytes) {
    const ssize_t n = ::pread(fd, static_cast<char*>(dst) + have, bytes - have,
                              static_cast<off_t>(offset + have));
    if (n < 0 && errno == EINTR) continue;
    FANOUT_CHECK(n >= 0, path, ": cannot read: ", std::strerror(errno));
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  return have;
}

bool name_ends_with_bin(const std::string& path) {
  if (path.size() < 4) return false;
  std::string tail = path.substr(path.size() - 4);
  for (char& c : tail) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return tail == ".bin";
}

bool is_token_magic(int32_t magic) {
  return magic == kBinMagicU16 || magic == kBinMagicU32;
}
}  // namespace

// --- the token section, read on demand ------------------------------------------------

// Note [Token files are read, not mapped]
// The tokens stay in the file: every batch reads its window with pread (a few KiB),
// so a file of any size costs only what one batch needs. A memory mapping would do
// the same, but a file truncated or rewritten while a run reads it would then kill
// the process with SIGBUS; a short read is an error that names the file instead.
class TokenMap {
 public:
  TokenMap(const std::string& path, int fd, int width, int64_t count)
      : path_(path), fd_(::dup(fd)), width_(width), count_(count) {
    FANOUT_CHECK(fd_ >= 0, path, ": cannot keep the token file open: ", std::strerror(errno));
  }
  ~TokenMap() { ::close(fd_); }
  TokenMap(const TokenMap&) = delete;
  TokenMap& operator=(const TokenMap&) = delete;

  int64_t count() const { return count_; }
  // Tokens [begin, begin + n) as stored (uint32 ids may exceed int32), widened to 32 bits.
  void read(int64_t begin, int64_t n, uint32_t* out) const {
    const size_t bytes = static_cast<size_t>(n * width_);
    const uint64_t offset = static_cast<uint64_t>(kHeaderBytes + begin * width_);
    if (width_ == 4) {
      check_read(read_at(fd_, out, bytes, offset, path_), bytes);
      return;
    }
    // uint16 ids: widened through a small buffer.
    uint16_t narrow[4096];
    for (int64_t done = 0; done < n; done += 4096) {
      const int64_t m = std::min<int64_t>(4096, n - done);
      const size_t m_bytes = static_cast<size_t>(m) * 2;
      check_read(read_at(fd_, narrow, m_bytes, offset + static_cast<uint64_t>(done) * 2, path_),
                 m_bytes);
      for (int64_t i = 0; i < m; ++i) out[done + i] = narrow[i];
    }
  }
  uint32_t raw(int64_t i) const {
    uint32_t v;
    read(i, 1, &v);
    return v;
  }

 private:
  void check_read(size_t got, size_t want) const {
    FANOUT_CHECK(got == want, path_,
                 ": the token file is shorter than its header says (changed while in use?)");
  }
  std::string path_;
  int fd_;
  int width_;
  int64_t count_;
};

int64_t TokenData::token_count() const {
  return map ? map_count : static_cast<int64_t>(tokens.size());
}

int32_t TokenData::token_at(int64_t i) const {
  FANOUT_ASSERT(i >= 0 && i < token_count(), "token ", i, " of ", token_count());
  return map ? static_cast<int32_t>(map->raw(map_first + i)) : tokens[static_cast<size_t>(i)];
}

void TokenData::tokens_copy(int64_t begin, int64_t count, int32_t* out) const {
  FANOUT_ASSERT(begin >= 0 && count >= 0 && count <= token_count() - begin, "tokens [", begin,
                ", +", count, ") of ", token_count());
  if (map) {
    static_assert(sizeof(int32_t) == sizeof(uint32_t));
    // Ids were checked against the vocabulary (< 2^31) when the file was loaded.
    map->read(map_first + begin, count, reinterpret_cast<uint32_t*>(out));
  } else {
    std::copy_n(tokens.begin() + begin, count, out);
  }
}

// --- loading -------------------------------------------------------------------------

namespace {

void load_bin(TokenData& data, const RegularFile& file) {
  const std::string& path = data.path;
  const uint64_t file_size = file.size();
  FANOUT_CHECK(file_size >= kHeaderBytes, path, ": too short for an llm.c token file (", file_size,
               " bytes, the header alone is 1024)");
  int32_t header[kHeaderInts];
  FANOUT_CHECK(read_at(file.fd(), header, kHeaderBytes, 0, path) == kHeaderBytes, path,
               ": cannot read the header (the file shrank?)");
  const int32_t magic = header[0], version = header[1];
  int64_t width = 0;
  if (magic == kBinMagicU16) {
    FANOUT_CHECK(version == 1, path, ": magic 20240520 needs version 1, found ", version);
    width = 2;
  } else if (magic == kBinMagicU32) {
    FANOUT_CHECK(version == 7, path, ": magic 20240801 needs version 7, found ", version);
    width = 4;
  } else {
    detail::throw_error(detail::str_cat(path, ": bad magic ", magic,
                                        " (an llm.c token file starts with 20240520 or 20240801)"));
  }
  const int64_t count = static_cast<uint32_t>(header[2]);
  const int64_t expected =
      size_add(path + ": the token file's size", {kHeaderBytes, size_mul(path, {count, width})});
  FANOUT_CHECK(file_size == static_cast<uint64_t>(expected), path, ": the header says ", count,
               " tokens (", expected, " bytes) but the file has ", file_size, " bytes");
  FANOUT_CHECK(count > 0, path, ": holds no tokens");
  data.map = std::make_shared<const TokenMap>(path, file.fd(), static_cast<int>(width), count);
  data.map_first = 0, data.map_count = count;
  data.from_bin = true;
}

// Note [Streaming text]
// The text is read in blocks and split into documents as it arrives, exactly as
// split_documents splits a whole string: a line holding only " \t\r\n" ends the
// current document, and a document's trailing '\n' and '\r' are trimmed. Each
// document's bytes go straight into the packed stream after its BOT; only the
// leading whitespace of a line not yet known to be blank is held aside.
class TextSplitter {
 public:
  explicit TextSplitter(TokenData& data) : data_(data) {}

  void feed(const char* p, size_t n) {
    const char* end = p + n;
    while (p < end) {
      if (line_has_text_) {
        // The rest of a non-blank line, up to and including its '\n'.
        const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
        const char* stop = nl ? nl + 1 : end;
        append(p, stop);
        if (nl) line_has_text_ = false;
        p = stop;
        continue;
      }
      const char c = *p++;
      if (c == ' ' || c == '\t' || c == '\r') {
        pending_.push_back(c);
      } else if (c == '\n') {
        pending_.clear();  // a blank line ends the document
        flush();
      } else {
        if (doc_start_ < 0) {
          doc_start_ = static_cast<int64_t>(data_.tokens.size());
          data_.tokens.push_back(kBot);
        }
        append(pending_.data(), pending_.data() + pending_.size());
        pending_.clear();
        append(&c, &c + 1);
        line_has_text_ = true;
      }
    }
  }

  void finish() { flush(); }  // a blank last line without '\n' is dropped

 private:
  void append(const char* first, const char* last) {
    for (; first < last; ++first) data_.tokens.push_back(static_cast<unsigned char>(*first));
  }
  void flush() {
    if (doc_start_ < 0) return;
    std::vector<int32_t>& t = data_.tokens;
    while (t.back() == '\n' || t.back() == '\r') t.pop_back();  // the doc holds a non-space
    data_.documents.emplace_back(t.begin() + doc_start_ + 1, t.end());
    t.push_back(kEot);
    doc_start_ = -1;
  }

  TokenData& data_;
  std::string pending_;  // whitespace of the current line while it may still be blank
  bool line_has_text_ = false;
  int64_t doc_start_ = -1;  // index of the open document's BOT in data_.tokens, or -1
};

void load_text(TokenData& data, const RegularFile& file) {
  const uint64_t limit = token_file_text_limit();
  FANOUT_CHECK(file.size() <= limit, data.path, ": ", file.size(),
               " bytes of text is more than the ", limit,
               " bytes a text file may hold here (text is tokenized in memory at 8 bytes per byte; "
               "convert it to an llm.c .bin token file, which is read on demand)");
  data.tokens.reserve(static_cast<size_t>(file.size()) + 2);
  TextSplitter split(data);
  std::vector<char> block(size_t{1} << 20);
  for (uint64_t offset = 0;;) {
    const size_t n = read_at(file.fd(), block.data(), block.size(), offset, data.path);
    if (n == 0) break;
    split.feed(block.data(), n);
    offset += n;
    // A file that grows while read is cut at the limit rather than read without end.
    FANOUT_CHECK(offset <= limit, data.path, ": grew past ", limit, " bytes while being read");
  }
  split.finish();
  FANOUT_CHECK(!data.documents.empty(), data.path, ": holds no text (only blank lines)");
}

}  // namespace

bool token_file_is_bin(const std::string& path) {
  if (name_ends_with_bin(path)) return true;
  try {
    const RegularFile file(path);
    int32_t head[2] = {0, 0};
    return read_at(file.fd(), head, sizeof head, 0, path) == sizeof head && is_token_magic(head[0]);
  } catch (const Error&) {
    return false;  // token_file_load names the problem
  }
}

std::string token_file_tokenizer_path(const std::string& path) {
  if (path.empty() || !token_file_is_bin(path)) return "";
  const std::filesystem::path beside =
      std::filesystem::path(path).parent_path() / kTokenFileTokenizerName;
  std::error_code ec;
  return std::filesystem::is_regular_file(beside, ec) ? beside.string() : "";
}

uint64_t token_file_text_limit() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return kMaxTextBytes;
  return std::min(kMaxTextBytes, static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 32);
}

TokenData token_file_load(const std::string& path, std::string_view flag,
                          const TextTokenizer& tokenizer) {
  FANOUT_CHECK(!path.empty(), flag.empty() ? "" : std::string(flag) + ": ",
               "an empty string is not a file name");
  const RegularFile file(path);
  FANOUT_CHECK(file.size() > 0, path, ": the file is empty");
  TokenData data;
  data.path = path;
  // The first two header ints decide; the name only matters when they do not match.
  int32_t head[2] = {0, 0};
  const bool has_head = read_at(file.fd(), head, sizeof head, 0, path) == sizeof head;
  data.bot = tokenizer.bot(), data.eot = tokenizer.eot(), data.pad = tokenizer.pad();
  if ((has_head && is_token_magic(head[0])) || name_ends_with_bin(path)) {
    load_bin(data, file);
    return data;
  }
  const bool jsonl = jsonl_name(path);
  if (tokenizer.is_byte() && !jsonl) {
    load_text(data, file);  // streamed (Note [Streaming text])
    return data;
  }
  const uint64_t limit = token_file_text_limit();
  FANOUT_CHECK(file.size() <= limit, path, ": ", file.size(), " bytes of text is more than the ",
               limit,
               " bytes a text file may hold here (convert it with fanout prepare to an llm.c "
               ".bin token file, which is read on demand)");
  const std::string text = file_read_regular(path, limit);
  if (!jsonl) {
    TokenData encoded = token_data_from_documents(split_documents(text), tokenizer, path);
    FANOUT_CHECK(!encoded.documents.empty(), path, ": holds no text (only blank lines)");
    return encoded;
  }
  // JSON Lines: each line's "text" member is one document.
  std::vector<std::string> documents;
  for (JsonlDocument& doc : jsonl_documents(text, path, "text", 1, kDataTextFieldHint)) {
    documents.push_back(std::move(doc.text));
  }
  FANOUT_CHECK(!documents.empty(), path,
               ": holds no document (every line is blank or its text is)");
  return token_data_from_documents(documents, tokenizer, path);
}

TokenData token_data_from_documents(const std::vector<std::string>& documents,
                                    const TextTokenizer& tokenizer, const std::string& name) {
  TokenData data;
  data.path = name;
  data.bot = tokenizer.bot(), data.eot = tokenizer.eot(), data.pad = tokenizer.pad();
  data.documents.reserve(documents.size());
  for (const std::string& doc : documents) {
    std::vector<int32_t> ids = tokenizer.encode(doc);
    if (data.bot >= 0) data.tokens.push_back(data.bot);
    data.tokens.insert(data.tokens.end(), ids.begin(), ids.end());
    if (data.eot >= 0) data.tokens.push_back(data.eot);
    data.documents.push_back(std::move(ids));
  }
  return data;
}

// Note [Packing off over a token file]
// An llm.c file is one stream; `fanout prepare` (and the text path) write it as
// [BOT] doc [EOT] per document, so the documents come back by cutting after each
// [EOT] of the run's tokenizer and dropping a leading [BOT]. Packing off then does
// to them exactly what it does to a text file's documents (data_loader.h): one per
// row, [BOT] doc [EOT] cut or padded with [PAD] to T+1, PAD targets ignored. A file
// made with another tokenizer (or none: plain GPT-2 streams hold only EOT) splits
// wherever that [EOT] id falls, so the tokenizer of --tokenizer must be the one the
// file was prepared with, as it must for the loss to mean anything.
void token_data_split_documents(TokenData& data) {
  FANOUT_CHECK(data.map, data.path, ": not an llm.c token file");
  FANOUT_CHECK(data.eot >= 0, data.path,
               ": --packing off needs the tokenizer's [EOT] to find the documents, and the "
               "tokenizer has none");
  const int64_t n = data.token_count();
  // Every id is held twice (the stream and the documents) while they are split.
  const uint64_t bytes = static_cast<uint64_t>(n) * 8;
  FANOUT_CHECK(bytes <= token_file_text_limit(), data.path, ": ", n,
               " tokens are too many to hold in memory for --packing off (limit ",
               token_file_text_limit() / 8, "); use --packing on");
  std::vector<int32_t> all(static_cast<size_t>(n));
  data.tokens_copy(0, n, all.data());
  data.documents.clear();
  std::vector<int32_t> doc;
  for (const int32_t t : all) {
    if (t == data.eot) {
      if (!doc.empty()) data.documents.push_back(std::move(doc));
      doc.clear();
    } else if (!(t == data.bot && doc.empty())) {
      doc.push_back(t);
    }
  }
  FANOUT_CHECK(!data.documents.empty(), data.path, ": holds no [EOT] (id ", data.eot,
               "), so --packing off finds no documents: give the --tokenizer it was prepared "
               "with, or use --packing on");
}

void token_data_check_vocab(const TokenData& data, int64_t vocab_size) {
  FANOUT_ASSERT(vocab_size > 0 && vocab_size <= (int64_t{1} << 31), "vocab_size ", vocab_size);
  auto refuse = [&](int64_t id, int64_t i) {
    detail::throw_error(detail::str_cat(data.path, ": token id ", id, " at position ", i,
                                        " is out of range for vocabulary size ", vocab_size));
  };
  if (data.map) {
    // In blocks through one buffer: a large file is checked without becoming resident.
    constexpr int64_t kBlock = int64_t{1} << 20;
    const int64_t n = data.map_count;
    const uint32_t limit = static_cast<uint32_t>(vocab_size);
    std::vector<uint32_t> block(static_cast<size_t>(std::min(kBlock, n)));
    for (int64_t begin = 0; begin < n; begin += kBlock) {
      const int64_t len = std::min(kBlock, n - begin);
      data.map->read(data.map_first + begin, len, block.data());
      bool bad = false;  // one branch-free pass (vectorised); the position only on failure
      for (int64_t i = 0; i < len; ++i) bad |= block[i] >= limit;
      if (!bad) continue;
      for (int64_t i = 0; i < len; ++i) {
        if (block[i] >= limit) refuse(block[i], data.map_first + begin + i);
      }
    }
    return;
  }
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    const int32_t t = data.tokens[i];
    if (t < 0 || t >= vocab_size) refuse(t, static_cast<int64_t>(i));
  }
}

void token_file_write_bin(const std::string& path, const std::vector<int32_t>& tokens,
                          int64_t vocab_size) {
  FANOUT_CHECK(tokens.size() <= 0x7fffffffu, path, ": too many tokens for one llm.c file");
  bool narrow = vocab_size <= 65536;
  for (int32_t t : tokens) {
    FANOUT_CHECK(t >= 0, path, ": cannot store the negative token id ", t);
    FANOUT_CHECK(vocab_size <= 0 || t < vocab_size, path, ": token id ", t,
                 " is past the vocabulary of ", vocab_size);
    if (vocab_size <= 0) narrow &= t < 65536;
  }
  const int width = narrow ? 2 : 4;
  std::string bytes(static_cast<size_t>(kHeaderBytes) + tokens.size() * width, '\0');
  int32_t header[kHeaderInts] = {};
  header[0] = narrow ? kBinMagicU16 : kBinMagicU32;
  header[1] = narrow ? 1 : 7;
  header[2] = static_cast<int32_t>(tokens.size());
  std::memcpy(bytes.data(), header, kHeaderBytes);
  char* body = bytes.data() + kHeaderBytes;
  if (narrow) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const uint16_t v = static_cast<uint16_t>(tokens[i]);
      std::memcpy(body + i * 2, &v, 2);
    }
  } else {
    std::memcpy(body, tokens.data(), tokens.size() * 4);
  }
  file_write_atomic(path, bytes, "token file");
}

}  // namespace fanout::data
