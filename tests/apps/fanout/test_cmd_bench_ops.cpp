// `fanout bench ops --dtype`: f32, bf16 or both select the rows of the table (one
// row per op and dtype, the GEMM engine named once per dtype); any other dtype
// is a one-line error before anything runs. The table fits the terminal (blocks
// that repeat the op column when narrow), or one line per op with --wide.

#include <doctest/doctest.h>

#include <algorithm>

#include <sstream>
#include <string>
#include <vector>

#include "tests/apps/fanout/cli_runner.h"

using fanout::test::has;

namespace {
struct Case {
  const char* dtype;
  int f32_rows, bf16_rows;  // 1: the dtype's rows are in the table
};
// The smallest table: 1 x 8 tokens of the tiny preset, one timed repetition.
std::vector<std::string> small_ops(const std::string& dtype) {
  return {"bench",     "ops", "--batch-size", "1",  "--seq-len", "8",
          "--repeats", "1",   "--dtype",      dtype};
}
int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

TEST_CASE("bench ops --dtype picks the rows of each dtype") {
  for (auto [dtype, f32_rows, bf16_rows] :
       {Case{"f32", 1, 0}, Case{"bf16", 0, 1}, Case{"both", 1, 1}}) {
    CAPTURE(dtype);
    auto r = fanout::test::run_fanout(small_ops(dtype), "timeout 60");
    CAPTURE(r.err);
    REQUIRE(r.rc == 0);
    // Seven projection shapes (q+k+v, q, k, gate+up, gate, down, lm_head), forward
    // and backward, and two attention rows.
    CHECK(count(r.out, "matmul forward f32 ") == 7 * f32_rows);
    CHECK(count(r.out, "matmul backward bf16 ") == 7 * bf16_rows);
    CHECK(count(r.out, "(q+k+v)") == 2 * (f32_rows + bf16_rows));
    CHECK(count(r.out, "attention backward f32 ") == f32_rows);
    CHECK(count(r.out, "attention forward bf16 ") == bf16_rows);
    CHECK(count(r.out, "matmul bf16: ") == bf16_rows);
  }
}

TEST_CASE("bench ops refuses an unknown --dtype in one line") {
  auto r = fanout::test::run_fanout(small_ops("f16"), "timeout 60");
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "--dtype must be f32, bf16 or both"));
  CHECK(r.out.empty());
}

TEST_CASE("bench ops fits its table to the terminal, or one line per op with --wide") {
  // The table was 100 columns wide whatever the terminal.
  auto widest = [](const std::string& text) {
    size_t w = 0;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) w = std::max(w, line.size());
    return w;
  };
  auto args = small_ops("f32");
  auto r = fanout::test::run_fanout(args, "COLUMNS=80 timeout 60");
  REQUIRE(r.rc == 0);
  CHECK(widest(r.out) <= 80);
  CHECK(count(r.out, "GFLOP/s") == 1);
  CHECK(count(r.out, "attention forward f32 ") == 1);
  r = fanout::test::run_fanout(args, "COLUMNS=50 timeout 60");
  REQUIRE(r.rc == 0);
  CHECK(widest(r.out) <= 50);
  CHECK(count(r.out, "GFLOP/s") == 1);
  CHECK(count(r.out, "attention forward f32 ") == 2);  // once in each block
  args.push_back("--wide");
  r = fanout::test::run_fanout(args, "COLUMNS=50 timeout 60");
  REQUIRE(r.rc == 0);
  CHECK(widest(r.out) > 50);
  CHECK(count(r.out, "attention forward f32 ") == 1);
}
