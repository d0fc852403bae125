#include "apps/presentation/metrics_line.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/core/check.h"
#include "engine/core/json_parse.h"

namespace fanout::presentation {

namespace {

using nlohmann::json;

// The number fields a chart reads, by name.
struct Field {
  const char* key;
  std::optional<double> MetricsLine::*value;
};
constexpr Field kFields[] = {{"loss", &MetricsLine::loss},
                             {"val_loss", &MetricsLine::val_loss},
                             {"lr", &MetricsLine::lr},
                             {"grad_norm", &MetricsLine::grad_norm},
                             {"tokens_per_s", &MetricsLine::tokens_per_s}};
constexpr int kFieldCount = sizeof kFields / sizeof kFields[0];

// The index of `key` in kFields, or -1.
int field_index(std::string_view key) {
  for (int k = 0; k < kFieldCount; ++k)
    if (key == kFields[k].key) return k;
  return -1;
}

// --- the scanner ------------------------------------------------------------------
// Note [Metrics scanner]: it takes a subset of JSON and reads it as json_parse
// would: one object of numbers, nulls, true/false, strings of printable ASCII
// without escapes, and objects of those one level down. Anything else returns
// false, so a line it takes is valid JSON and one it cannot judge is left to
// nlohmann. Numbers follow JSON's grammar and are converted by from_chars,
// which rounds correctly as nlohmann does (an integer it keeps as int64 and
// converts, the same nearest double); one out of double's range is declined
// (nlohmann refuses an overflow, and takes an underflow: it decides).

enum class Kind { number, null, other, object };

struct Value {
  Kind kind = Kind::other;
  std::string_view text;  // a number's
  bool integral = false;  // a number without fraction or exponent
  double number = 0;
};

bool to_double(std::string_view text, double& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

class Scanner {
 public:
  explicit Scanner(std::string_view text) : s_(text) {}

  bool at_end() {
    space();
    return i_ == s_.size();
  }

  bool eat(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }

  bool string(std::string_view& out) {
    if (!eat('"')) return false;
    const size_t start = i_;
    for (; i_ < s_.size() && s_[i_] != '"'; ++i_) {
      const auto c = static_cast<unsigned char>(s_[i_]);
      if (c < 0x20 || c >= 0x80 || c == '\\') return false;
    }
    if (i_ == s_.size()) return false;
    out = s_.substr(start, i_ - start);
    ++i_;
    return true;
  }

  // A scalar value, or where `nested`, the '{' of an object (the caller reads
  // its members).
  bool value(Value& v, bool nested) {
    space();
    if (i_ == s_.size()) return false;
    const char c = s_[i_];
    if (c == '"') {
      std::string_view ignored;
      v.kind = Kind::other;
      return string(ignored);
    }
    if (c == 'n' || c == 't' || c == 'f') {
      v.kind = c == 'n' ? Kind::null : Kind::other;
      const std::string_view word = c == 'n' ? "null" : c == 't' ? "true" : "false";
      if (s_.substr(i_, word.size()) != word) return false;
      i_ += word.size();
      return true;
    }
    if (c == '{' && nested) {
      v.kind = Kind::object;
      return true;
    }
    v.kind = Kind::number;
    return number_text(v.text, v.integral) && to_double(v.text, v.number);
  }

  // Members of the object whose '{' is next: `member(key, value)` for each
  // scalar; false on any other value.
  template <typename Member>
  bool members(Member&& member) {
    ++i_;  // '{'
    if (eat('}')) return true;
    do {
      std::string_view key;
      Value v;
      if (!string(key) || !eat(':') || !value(v, false) || !member(key, v)) return false;
    } while (eat(','));
    return eat('}');
  }

 private:
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n'))
      ++i_;
  }

  bool digits() {
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > start;
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  bool number_text(std::string_view& out, bool& integral) {
    const size_t start = i_;
    if (s_[i_] == '-') ++i_;
    if (i_ == s_.size() || s_[i_] < '0' || s_[i_] > '9') return false;
    if (s_[i_] == '0') {
      ++i_;
    } else {
      digits();
    }
    integral = true;
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      integral = false;
      if (!digits()) return false;
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      integral = false;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) return false;
    }
    out = s_.substr(start, i_ - start);
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
};

// A number or null for a field a chart reads; false for anything else.
bool scalar_field(std::optional<double>& into, const Value& v) {
  if (v.kind == Kind::null) return into = std::nullopt, true;
  if (v.kind != Kind::number) return false;
  into = v.number;
  return true;
}

}  // namespace

// --- reading a line ---------------------------------------------------------------

bool metrics_line_scan(std::string_view line, MetricsLine& out) {
  out = MetricsLine{};
  Scanner s(line);
  if (!s.eat('{')) return false;
  // Duplicate keys are left to nlohmann (the later wins there): each read key once.
  // Bits of `seen`: the fields of kFields, then "step", then "peak_bytes".
  constexpr unsigned kStep = 1u << kFieldCount, kPeak = kStep << 1;
  unsigned seen = 0;
  auto once = [&](unsigned bit) { return !(seen & bit) && (seen |= bit, true); };
  auto top = [&](std::string_view key, const Value& v) {
    if (key == "step") {
      if (!once(kStep) || v.kind != Kind::number || !v.integral) return false;
      const char* last = v.text.data() + v.text.size();
      const auto [end, ec] = std::from_chars(v.text.data(), last, out.step);
      return ec == std::errc() && end == last;
    }
    if (const int k = field_index(key); k >= 0)
      return once(1u << k) && scalar_field(out.*kFields[k].value, v);
    if (key == "peak_bytes") {
      if (!once(kPeak)) return false;
      if (v.kind == Kind::null) return true;
      if (v.kind != Kind::object) return false;
      return s.members([&](std::string_view device, const Value& b) {
        for (const auto& [d, bytes] : out.peak_bytes)
          if (d == device) return false;
        std::optional<double> bytes;
        if (!scalar_field(bytes, b)) return false;
        if (bytes) out.peak_bytes.emplace_back(std::string(device), *bytes);
        return true;
      });
    }
    // A field charts do not read: any scalar, or an object of scalars.
    return v.kind != Kind::object || s.members([](std::string_view, const Value&) { return true; });
  };
  if (!s.eat('}')) {
    do {
      std::string_view key;
      Value v;
      if (!s.string(key) || !s.eat(':') || !s.value(v, true) || !top(key, v)) return false;
    } while (s.eat(','));
    if (!s.eat('}')) return false;
  }
  if (!(seen & kStep) || !s.at_end()) return false;
  // In device order, as nlohmann's objects hold their keys.
  std::sort(out.peak_bytes.begin(), out.peak_bytes.end());
  return true;
}

MetricsLine metrics_line_from_json(std::string_view line, const std::string& name, int64_t number) {
  auto where = [&] { return name + ":" + std::to_string(number); };
  const json j = json_parse(line, where());
  FANOUT_CHECK(j.is_object(), where(), ": not a JSON object");
  const auto step = j.find("step");
  FANOUT_CHECK(step != j.end() && step->is_number_integer(), where(), ": no integer \"step\"");
  // nlohmann keeps integers past int64 as unsigned: read as int64, they would wrap.
  FANOUT_CHECK(!step->is_number_unsigned() ||
                   step->get<uint64_t>() <= uint64_t{std::numeric_limits<int64_t>::max()},
               where(), ": \"step\" ", step->dump(), " is too large (at most ",
               std::numeric_limits<int64_t>::max(), ")");
  MetricsLine m;
  m.step = step->get<int64_t>();
  for (const Field& f : kFields) {
    const auto it = j.find(f.key);
    if (it == j.end() || it->is_null()) continue;
    FANOUT_CHECK(it->is_number(), where(), ": \"", f.key, "\" is not a number");
    m.*f.value = it->get<double>();
  }
  const auto peak = j.find("peak_bytes");
  if (peak != j.end() && !peak->is_null()) {
    FANOUT_CHECK(peak->is_object(), where(), ": \"peak_bytes\" is not an object");
    for (const auto& [device, bytes] : peak->items()) {
      if (bytes.is_null()) continue;
      FANOUT_CHECK(bytes.is_number(), where(), ": \"peak_bytes\".\"", device, "\" is not a number");
      m.peak_bytes.emplace_back(device, bytes.get<double>());
    }
  }
  return m;
}

MetricsLine metrics_line_read(std::string_view line, const std::string& name, int64_t number) {
  MetricsLine m;
  if (metrics_line_scan(line, m)) return m;
  return metrics_line_from_json(line, name, number);
}

}  // namespace fanout::presentation
