#include "apps/data/bpe_tokenizer.h"

#include <algorithm>
#include <atomic>
#include <queue>
#include <string_view>
#include <unordered_map>

#include "apps/data/byte_level.h"
#include "apps/data/tokenizer.h"
#include "apps/data/tokenizer_json.h"
#include "engine/core/check.h"

namespace fanout::data {

namespace {

// --- Word cache ------------------------------------------------------------------------------
// Pieces repeat (Zipf): each thread keeps the ids of the pieces it has encoded,
// for the tokenizer it last used, so encode needs no lock. Bounded: cleared when full.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>, StringHash, std::equal_to<>>
      index;  // piece -> (offset, count) in ids
  std::vector<int32_t> ids;
};

constexpr size_t kCacheMaxWords = size_t{1} << 18;  // ~20 MB a thread

std::atomic<uint64_t> next_tokenizer_serial{1};

// --- The tokenizer ---------------------------------------------------------------------------

class BpeTokenizer final : public TextTokenizer {
 public:
  BpeTokenizer(BpeModel model, const std::string& name)
      : model_(std::move(model)), serial_(next_tokenizer_serial++) {
    build(name);
  }

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 1);
    // Added tokens are cut out first (leftmost, then longest), as HF does.
    size_t start = 0, i = 0;
    while (i < text.size()) {
      if (!added_first_[static_cast<unsigned char>(text[i])]) {
        ++i;
        continue;
      }
      const Added* best = nullptr;
      for (const Added& a : added_sorted_) {  // longest first
        if (text.compare(i, a.content.size(), a.content) == 0) {
          best = &a;
          break;
        }
      }
      if (best == nullptr) {
        ++i;
        continue;
      }
      encode_stretch(text.substr(start, i - start), ids);
      ids.push_back(best->id);
      i += best->content.size();
      start = i;
    }
    encode_stretch(text.substr(start), ids);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size_) {
        out += "<" + std::to_string(id) + ">";
      } else if (!special_[id]) {
        out += decoded_[id];
      }
    }
    return out;
  }

  int64_t vocab_size() const override { return vocab_size_; }
  int32_t bot() const override { return bot_; }
  int32_t eot() const override { return eot_; }
  int32_t pad() const override { return pad_; }
  std::string to_json() const override { return bpe_model_to_json(model_); }
  std::string describe() const override {
    return is_byte_ ? "byte" : "bpe (" + std::to_string(vocab_size_) + " tokens)";
  }
  bool is_byte() const override { return is_byte_; }

 private:
  struct Added {
    int32_t id;
    std::string content;
  };
  struct Merge {
    int32_t rank;
    int32_t id;
  };

  static uint64_t pair_key(int32_t a, int32_t b) {
    return static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b);
  }

  void build(const std::string& name);
  void encode_stretch(std::string_view text, std::vector<int32_t>& ids) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& ids) const;
  void merge_word(std::string_view piece, std::vector<int32_t>& ids) const;

  BpeModel model_;
  uint64_t serial_;
  bool is_byte_ = false;
  int64_t vocab_size_ = 0;
  int32_t bot_ = -1, eot_ = -1, pad_ = -1;
  std::array<int32_t, 256> byte_id_{};  // byte -> id of its alphabet character
  std::unordered_map<std::string, int32_t> token_id_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank, result
  std::vector<Added> added_sorted_;             // longest content first
  std::array<bool, 256> added_first_{};         // first bytes of added tokens
  std::vector<std::string> decoded_;            // id -> bytes
  std::vector<bool> special_;                   // id -> skipped by decode
};

void BpeTokenizer::build(const std::string& name) {
  const BpeModel& m = model_;
  FANOUT_CHECK(!m.vocab.empty(), name, ": the vocabulary is empty");
  const auto n_vocab = static_cast<int32_t>(m.vocab.size());
  token_id_.reserve(m.vocab.size());
  for (int32_t id = 0; id < n_vocab; ++id) {
    auto [it, fresh] = token_id_.emplace(m.vocab[id], id);
    FANOUT_CHECK(fresh, name, ": token '", m.vocab[id], "' is in the vocabulary twice (ids ",
                 it->second, " and ", id, ")");
  }
  // A byte whose character is not in the vocabulary (HF's trainer keeps only the
  // bytes it saw: never 0xC0, 0xC1, 0xF5-0xFF in UTF-8 text) is dropped when
  // encoding, as HF's BPE does without an unk_token.
  const auto& alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) {
    auto it = token_id_.find(alphabet[b]);
    byte_id_[b] = it == token_id_.end() ? -1 : it->second;
  }
  merges_.reserve(m.merges.size());
  for (size_t r = 0; r < m.merges.size(); ++r) {
    const auto& [a, b] = m.merges[r];
    auto find = [&](const std::string& t) {
      auto it = token_id_.find(t);
      FANOUT_CHECK(it != token_id_.end(), name, ": merge ", r, " ('", a, "' '", b, "'): '", t,
                   "' is not in the vocabulary");
      return it->second;
    };
    int32_t ia = find(a), ib = find(b), ic = find(a + b);
    // A pair listed twice keeps its last rank, as HF's loader does.
    merges_[pair_key(ia, ib)] = Merge{static_cast<int32_t>(r), ic};
  }

  // Added tokens: either a vocab entry again (same id, same text) or new ids
  // right after the vocabulary.
  vocab_size_ = n_vocab;
  std::vector<const BpeModel::Added*> extra;
  for (const BpeModel::Added& a : m.added) {
    FANOUT_CHECK(!a.content.empty(), name, ": added token ", a.id, " has empty content");
    FANOUT_CHECK(a.id >= 0, name, ": added token '", a.content, "' has id ", a.id);
    for (const Added& b : added_sorted_) {
      FANOUT_CHECK(b.content != a.content, name, ": added token '", a.content, "' is listed twice");
    }
    if (a.id < n_vocab) {
      FANOUT_CHECK(m.vocab[a.id] == a.content, name, ": added token '", a.content, "' has id ",
                   a.id, ", which the vocabulary gives to '", m.vocab[a.id], "'");
    } else {
      auto it = token_id_.find(a.content);
      FANOUT_CHECK(it == token_id_.end(), name, ": added token '", a.content, "' has id ", a.id,
                   " but the vocabulary gives it id ", it == token_id_.end() ? 0 : it->second);
      extra.push_back(&a);
    }
    added_sorted_.push_back(Added{a.id, a.content});
  }
  std::sort(extra.begin(), extra.end(), [](auto* x, auto* y) { return x->id < y->id; });
  for (const BpeModel::Added* a : extra) {
    FANOUT_CHECK(a->id == vocab_size_, name, ": added token '", a->content, "' has id ", a->id,
                 ", expected ", vocab_size_, " (ids must be dense: the vocabulary's 0..",
                 n_vocab - 1, ", then the added tokens')");
    ++vocab_size_;
  }
  std::stable_sort(added_sorted_.begin(), added_sorted_.end(), [](const Added& x, const Added& y) {
    return x.content.size() > y.content.size();
  });
  for (const Added& a : added_sorted_)
    added_first_[static_cast<unsigned char>(a.content[0])] = true;

  // Decoding: every id's bytes; a token with characters outside the alphabet
  // decodes to its own text (HF's ByteLevel decoder does the same).
  decoded_.resize(vocab_size_);
  special_.assign(vocab_size_, false);
  auto decode_token = [](const std::string& t) {
    try {
      return byte_level_decode(t);
    } catch (const Error&) {
      return t;
    }
  };
  for (int32_t id = 0; id < n_vocab; ++id) decoded_[id] = decode_token(m.vocab[id]);
  for (const BpeModel::Added& a : m.added) {
    decoded_[a.id] = decode_token(a.content);
    special_[a.id] = a.special;
    int32_t* slot = a.content == kBotToken   ? &bot_
                    : a.content == kEotToken ? &eot_
                    : a.content == kPadToken ? &pad_
                                             : nullptr;
    if (slot != nullptr) *slot = a.id;
  }

  const BpeModel byte = bpe_byte_model();
  is_byte_ = m.vocab == byte.vocab && m.merges.empty() && m.added.size() == byte.added.size() &&
             !m.add_prefix_space &&
             std::equal(m.added.begin(), m.added.end(), byte.added.begin(),
                        [](const BpeModel::Added& x, const BpeModel::Added& y) {
                          return x.id == y.id && x.content == y.content && x.special == y.special;
                        });
}

// One stretch of text between added tokens.
void BpeTokenizer::encode_stretch(std::string_view text, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  std::string prefixed;
  if (model_.add_prefix_space && text[0] != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  // Without merges a piece is its bytes, wherever the pieces are cut.
  if (merges_.empty() && !model_.ignore_merges) {
    for (unsigned char c : text) {
      if (byte_id_[c] >= 0) ids.push_back(byte_id_[c]);
    }
    return;
  }
  thread_local WordCache cache;
  if (cache.owner != serial_) {
    cache.index.clear();
    cache.ids.clear();
    cache.owner = serial_;
  }
  for (std::string_view piece : gpt2_pretokenize(text)) {
    auto it = cache.index.find(piece);
    if (it != cache.index.end()) {
      auto [offset, count] = it->second;
      ids.insert(ids.end(), cache.ids.begin() + offset, cache.ids.begin() + offset + count);
      continue;
    }
    size_t before = ids.size();
    encode_piece(piece, ids);
    if (cache.index.size() >= kCacheMaxWords) {
      cache.index.clear();
      cache.ids.clear();
    }
    cache.index.emplace(std::string(piece),
                        std::pair<uint32_t, uint32_t>(static_cast<uint32_t>(cache.ids.size()),
                                                      static_cast<uint32_t>(ids.size() - before)));
    cache.ids.insert(cache.ids.end(), ids.begin() + static_cast<std::ptrdiff_t>(before), ids.end());
  }
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  if (model_.ignore_merges) {
    auto it = token_id_.find(byte_level_encode(piece));
    if (it != token_id_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  merge_word(piece, ids);
}

// Note [BPE merge order]
// As HF's Word::merge_all: the pair of adjacent symbols with the lowest merge
// rank merges first; among equal pairs the leftmost. A heap of candidate merges
// with lazily skipped stale entries keeps long pieces (a run of 10^5 spaces is
// one piece) at O(n log n).
void BpeTokenizer::merge_word(std::string_view piece, std::vector<int32_t>& ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  for (unsigned char c : piece) {
    if (byte_id_[c] < 0) continue;
    const auto i = static_cast<int32_t>(sym.size());
    sym.push_back(Symbol{byte_id_[c], i - 1, i + 1, true});
  }
  const auto n = static_cast<int32_t>(sym.size());
  if (n > 0) sym.back().next = -1;
  struct Candidate {
    int32_t rank, pos, id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t pos) {
    if (pos < 0 || sym[pos].next < 0) return;
    auto it = merges_.find(pair_key(sym[pos].id, sym[sym[pos].next].id));
    if (it != merges_.end()) heap.push(Candidate{it->second.rank, pos, it->second.id});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& left = sym[c.pos];
    if (!left.alive || left.next < 0) continue;
    auto it = merges_.find(pair_key(left.id, sym[left.next].id));
    if (it == merges_.end() || it->second.id != c.id || it->second.rank != c.rank) continue;
    Symbol& right = sym[left.next];
    right.alive = false;
    left.id = c.id;
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = c.pos;
    consider(left.prev);
    consider(c.pos);
  }
  for (int32_t i = 0; i >= 0 && i < n; i = sym[i].next) ids.push_back(sym[i].id);
}

}  // namespace

// --- Public ----------------------------------------------------------------------------------

BpeModel bpe_byte_model() {
  BpeModel m;
  const auto& alphabet = byte_level_alphabet();
  m.vocab.assign(alphabet.begin(), alphabet.end());
  m.added = {{kBot, kBotToken, true}, {kEot, kEotToken, true}, {kPad, kPadToken, true}};
  return m;
}

std::shared_ptr<const TextTokenizer> bpe_tokenizer(BpeModel model, const std::string& name) {
  return std::make_shared<const BpeTokenizer>(std::move(model), name);
}

}  // namespace fanout::data
