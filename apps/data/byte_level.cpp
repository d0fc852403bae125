#include "apps/data/byte_level.h"

#include <algorithm>
#include <cstdint>

#include "engine/core/check.h"

namespace fanout::data {

namespace {

// --- Character classes -----------------------------------------------------------------------
// The regex looks at three Unicode classes; everything else (punctuation, symbols,
// marks, invalid UTF-8 bytes) is kOther, which [^\s\p{L}\p{N}] matches.
enum CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

struct CodeRange {
  uint32_t first, last;
  CharClass cls;
};

#include "apps/data/byte_level_unicode.inc"

// The Basic Multilingual Plane as a flat table (64 KiB, built once); the planes
// above by binary search over the ranges.
const std::array<uint8_t, 0x10000>& bmp_classes() {
  static const auto table = [] {
    std::array<uint8_t, 0x10000> t{};
    for (const CodeRange& r : kCodeRanges) {
      for (uint32_t cp = r.first; cp <= r.last && cp < 0x10000; ++cp) t[cp] = r.cls;
    }
    return t;
  }();
  return table;
}

CharClass class_of(uint32_t cp, const std::array<uint8_t, 0x10000>& bmp) {
  if (cp < 0x10000) return static_cast<CharClass>(bmp[cp]);
  auto it = std::upper_bound(std::begin(kCodeRanges), std::end(kCodeRanges), cp,
                             [](uint32_t c, const CodeRange& r) { return c < r.first; });
  if (it == std::begin(kCodeRanges)) return kOther;
  --it;
  return cp <= it->last ? it->cls : kOther;
}

// The code point at text[i] and its length in bytes. A byte that does not start
// a valid UTF-8 sequence (overlong, surrogate, truncated, past U+10FFFF) is one
// character of its own, code point kInvalid.
constexpr uint32_t kInvalid = 0xFFFFFFFF;

struct Char {
  uint32_t cp;
  uint32_t len;
};

Char utf8_at(std::string_view text, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return {c, 1};
  size_t n = text.size();
  auto cont = [&](size_t k) { return k < n && (b(k) & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF && cont(i + 1)) return {(c & 0x1Fu) << 6 | (b(i + 1) & 0x3Fu), 2};
  if (c >= 0xE0 && c <= 0xEF && cont(i + 1) && cont(i + 2)) {
    uint32_t cp = (c & 0x0Fu) << 12 | (b(i + 1) & 0x3Fu) << 6 | (b(i + 2) & 0x3Fu);
    if (cp >= 0x800 && (cp < 0xD800 || cp > 0xDFFF)) return {cp, 3};
  }
  if (c >= 0xF0 && c <= 0xF4 && cont(i + 1) && cont(i + 2) && cont(i + 3)) {
    uint32_t cp =
        (c & 0x07u) << 18 | (b(i + 1) & 0x3Fu) << 12 | (b(i + 2) & 0x3Fu) << 6 | (b(i + 3) & 0x3Fu);
    if (cp >= 0x10000 && cp <= 0x10FFFF) return {cp, 4};
  }
  return {kInvalid, 1};
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other
// 68 bytes to U+0100.. in byte order.
std::array<uint32_t, 256> alphabet_code_points() {
  std::array<uint32_t, 256> cps{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    cps[b] = printable ? b : next++;
  }
  return cps;
}

// Alphabet code point (all below 0x144) -> byte, -1 when not in the alphabet.
const std::array<int16_t, 0x144>& alphabet_bytes() {
  static const auto table = [] {
    std::array<int16_t, 0x144> t;
    t.fill(-1);
    std::array<uint32_t, 256> cps = alphabet_code_points();
    for (int b = 0; b < 256; ++b) t[cps[b]] = static_cast<int16_t>(b);
    return t;
  }();
  return table;
}

}  // namespace

// --- Alphabet --------------------------------------------------------------------------------

const std::array<std::string, 256>& byte_level_alphabet() {
  static const auto alphabet = [] {
    std::array<std::string, 256> a;
    std::array<uint32_t, 256> cps = alphabet_code_points();
    for (int b = 0; b < 256; ++b) utf8_append(a[b], cps[b]);
    return a;
  }();
  return alphabet;
}

std::string byte_level_encode(std::string_view bytes) {
  const std::array<std::string, 256>& alphabet = byte_level_alphabet();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) out += alphabet[c];
  return out;
}

std::string byte_level_decode(std::string_view chars) {
  const std::array<int16_t, 0x144>& bytes = alphabet_bytes();
  std::string out;
  out.reserve(chars.size());
  for (size_t i = 0; i < chars.size();) {
    Char ch = utf8_at(chars, i);
    bool known = ch.cp != kInvalid && ch.cp < bytes.size() && bytes[ch.cp] >= 0;
    if (!known) {
      static const char* hex = "0123456789ABCDEF";
      unsigned char b = static_cast<unsigned char>(chars[i]);
      std::string shown = ch.cp == kInvalid ? std::string("byte 0x") + hex[b >> 4] + hex[b & 15]
                                            : "'" + std::string(chars.substr(i, ch.len)) + "'";
      FANOUT_CHECK(false, "byte-level text: ", shown, " at offset ", i,
                   " is not a character of the byte-level alphabet");
    }
    out.push_back(static_cast<char>(bytes[ch.cp]));
    i += ch.len;
  }
  return out;
}

// --- Pre-tokenizer ---------------------------------------------------------------------------
// Note [GPT-2 regex by hand]
// At each position the regex's alternatives are tried in order; the first that
// matches wins, greedily:
//   's|'t|'re|'ve|'m|'ll|'d    a contraction (case-sensitive: "'S" is not one)
//   ' '? run of L | N | other  an optional U+0020 glued to the run after it
//   \s+(?!\S)                  whitespace up to (not including) the last one before
//                              a non-space, or to the end of the text
//   \s+                        a single whitespace before a non-space
// "other" is [^\s\p{L}\p{N}]. The run classes are disjoint, so a run is simply the
// longest stretch of one class.

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  const std::array<uint8_t, 0x10000>& bmp = bmp_classes();
  std::vector<std::string_view> pieces;
  pieces.reserve(text.size() / 4 + 1);
  size_t n = text.size();
  auto cls_at = [&](size_t i, Char* ch) {
    *ch = utf8_at(text, i);
    return ch->cp == kInvalid ? kOther : class_of(ch->cp, bmp);
  };
  // The end of the run of class `cls` starting at i.
  auto run_end = [&](size_t i, CharClass cls) {
    Char ch;
    while (i < n) {
      unsigned char c = static_cast<unsigned char>(text[i]);
      if (c < 0x80) {
        CharClass k = static_cast<CharClass>(bmp[c]);
        if (k != cls) break;
        ++i;
        continue;
      }
      if (cls_at(i, &ch) != cls) break;
      i += ch.len;
    }
    return i;
  };
  size_t i = 0;
  while (i < n) {
    char c = text[i];
    if (c == '\'' && i + 1 < n) {
      char d = text[i + 1];
      size_t len = 0;
      if (d == 's' || d == 't' || d == 'm' || d == 'd') {
        len = 2;
      } else if (i + 2 < n &&
                 ((d == 'r' && text[i + 2] == 'e') || (d == 'v' && text[i + 2] == 'e') ||
                  (d == 'l' && text[i + 2] == 'l'))) {
        len = 3;
      }
      if (len > 0) {
        pieces.push_back(text.substr(i, len));
        i += len;
        continue;
      }
    }
    Char ch;
    size_t start = i;
    if (c == ' ' && i + 1 < n) {
      CharClass next = cls_at(i + 1, &ch);
      if (next != kSpace) {
        size_t end = run_end(i + 1, next);
        pieces.push_back(text.substr(start, end - start));
        i = end;
        continue;
      }
    }
    CharClass cls = cls_at(i, &ch);
    if (cls != kSpace) {
      size_t end = run_end(i, cls);
      pieces.push_back(text.substr(start, end - start));
      i = end;
      continue;
    }
    // Whitespace: find the run and where its last character starts.
    size_t last = i;
    size_t end = i;
    while (end < n) {
      Char w;
      if (cls_at(end, &w) != kSpace) break;
      last = end;
      end += w.len;
    }
    if (end < n && last > start) end = last;  // \s+(?!\S): leave one for the next piece
    pieces.push_back(text.substr(start, end - start));
    i = end;
  }
  return pieces;
}

}  // namespace fanout::data
