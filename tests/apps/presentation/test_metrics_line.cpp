// One metrics.jsonl line: the scanner takes the trainer's lines, and whatever it
// takes it reads exactly as json_parse does (its reference); lines it cannot
// judge (and every malformed one, thousands of random edits of real lines) are
// left to json_parse.

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "apps/presentation/metrics_line.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout::presentation;
using fanout::test::error_of;

namespace {

// Lines as the trainer writes them (nlohmann's dump: keys sorted, no spaces).
const std::vector<std::string> kTrainerLines = {
    R"({"grad_norm":5.4,"loss":5.5,"lr":0.0001,"peak_bytes":{"cpu:0":100,"cpu:1":90},"step":1,"step_s":0.17,"tokens":1024,"tokens_per_s":5891.2})",
    R"({"grad_norm":null,"loss":1e-3,"lr":3E+2,"peak_bytes":{"cuda:0":8589934592},"step":2,"tokens_per_s":null})",
    R"({"step":20,"val_loss":4.25})",
    R"({"step":3,"loss":-0.0,"lr":0,"peak_bytes":null,"note":"resumed","ok":true,"bad":false})",
    R"( { "step" : 9223372036854775807 , "loss" : 123456789012345678901234567890 } )",
    R"({"step":-4,"val_loss":2.5e-310,"extra":{"a":1,"b":"x","c":null}})",
};

// The reading json_parse gives, or "error" when it refuses the line.
struct Reference {
  bool error = false;
  MetricsLine line;
};

Reference reference(const std::string& text) {
  Reference r;
  try {
    r.line = metrics_line_from_json(text, "m", 1);
  } catch (const fanout::Error&) {
    r.error = true;
  }
  return r;
}

}  // namespace

TEST_CASE("metrics_line_scan reads the trainer's lines as json_parse does") {
  for (const std::string& text : kTrainerLines) {
    CAPTURE(text);
    MetricsLine scanned;
    REQUIRE(metrics_line_scan(text, scanned));
    const Reference r = reference(text);
    REQUIRE_FALSE(r.error);
    CHECK(scanned == r.line);
  }
  MetricsLine m;
  REQUIRE(metrics_line_scan(kTrainerLines[0], m));
  CHECK(m.step == 1);
  CHECK(m.loss == 5.5);
  CHECK_FALSE(m.val_loss);
  CHECK(m.peak_bytes == std::vector<std::pair<std::string, double>>{{"cpu:0", 100}, {"cpu:1", 90}});
}

TEST_CASE("metrics_line_scan leaves what it cannot judge to json_parse") {
  const std::vector<std::string> declined = {
      R"({"step":1,})",                            // trailing comma
      R"({"step":01})",                            // a leading zero
      R"({"step":1.0})",                           // not an integer
      R"({"step":18446744073709551615})",          // past int64
      R"({"step":1,"loss":"2"})",                  // a string for a number
      R"({"step":1,"loss":true})",                 // a boolean for a number
      R"({"step":1,"loss":1e400})",                // past double
      R"({"step":1,"loss":1,"loss":2})",           // a duplicate key
      R"({"step":1,"step":2})",                    // a duplicate step
      R"({"step":1,"peak_bytes":{"a":1,"a":2}})",  // a duplicate device
      R"({"step":1,"peak_bytes":[1]})",            // not an object
      R"({"step":1,"peak_bytes":{"a":{"b":1}}})",  // nested too far for the scanner
      R"({"step":1,"x":[1,2]})",                   // an array
      R"({"step":1,"x":"a\"b"})",                  // an escape
      "{\"step\":1,\"x\":\"\xc3\xa9\"}",           // non-ASCII text
      "\xef\xbb\xbf{\"step\":1}",                  // a byte-order mark
      R"({"step":1} x)",                           // text after the object
      R"({"loss":1})",                             // no step
      R"({})",
      R"([1])",
      R"({"step":1,"loss":NaN})",
      R"({"step":1,"loss":.5})",
      R"({"step":1,"loss":1.})",
      R"({"step":1,"loss":+1})",
      R"({"step":1,"loss":1e})",
      R"({"step":1,"loss":nul})",
  };
  for (const std::string& text : declined) {
    CAPTURE(text);
    MetricsLine m;
    CHECK_FALSE(metrics_line_scan(text, m));
  }
  // Declined lines still read, or fail, as json_parse decides.
  CHECK(metrics_line_read(R"({"step":1,"loss":1,"loss":2})", "m", 1).loss == 2.0);
  CHECK(metrics_line_read(R"({"step":1,"x":"a\"b","lr":0.5})", "m", 1).lr == 0.5);
  CHECK(error_of([] { metrics_line_read(R"({"step":1,"loss":"2"})", "run/m.jsonl", 7); }) ==
        "run/m.jsonl:7: \"loss\" is not a number");
  CHECK(error_of([] { metrics_line_read(R"({"step":18446744073709551615})", "m", 3); }) ==
        "m:3: \"step\" 18446744073709551615 is too large (at most 9223372036854775807)");
}

TEST_CASE("every edit of a trainer line the scanner takes reads as json_parse reads it") {
  // Random single-character edits from a fixed seed: deletions, insertions and
  // replacements with characters that matter to JSON.
  const std::string alphabet = "{}[]\":,.-+eE0123456789 nultrfasx\\";
  std::mt19937 rng(26);
  int taken = 0, refused = 0, variants = 0;
  for (const std::string& base : kTrainerLines) {
    for (int k = 0; k < 3000; ++k) {
      std::string text = base;
      const int edits = 1 + static_cast<int>(rng() % 2);
      for (int e = 0; e < edits && !text.empty(); ++e) {
        const size_t at = rng() % text.size();
        const char c = alphabet[rng() % alphabet.size()];
        switch (rng() % 3) {
          case 0:
            text.erase(at, 1);
            break;
          case 1:
            text.insert(at, 1, c);
            break;
          default:
            text[at] = c;
        }
      }
      ++variants;
      CAPTURE(text);
      const Reference r = reference(text);
      refused += r.error;
      MetricsLine scanned;
      if (!metrics_line_scan(text, scanned)) continue;
      ++taken;
      REQUIRE_FALSE(r.error);
      CHECK(scanned == r.line);
    }
  }
  // Both kinds occur: the comparison above was not vacuous.
  CHECK(taken > variants / 10);
  CHECK(refused > variants / 10);
}
