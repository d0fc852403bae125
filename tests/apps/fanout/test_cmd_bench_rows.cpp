// `fanout bench` rows through the binary: the ddp row puts each rank on its listed
// device (cpu:0,cpu:0: both ranks on cpu:0); a mode that fails is a row with its
// reason while the others still run, print and are written, and the exit code says
// a row failed; a PyTorch peer that cannot run here (torch.compile on a torch
// without it) is skipped with its reason, which fails nothing. Device lists that
// mix kinds are refused in one line before anything runs.

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/apps/fanout/bench_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/command_util.h"

using namespace fanout;
using fanout::test::has;

namespace {
// One step of 2 x 4 tokens of the tiny preset in fp32, a line per mode however
// wide (--wide): `more` flags appended.
std::vector<std::string> tiny_bench(const std::vector<std::string>& more) {
  std::vector<std::string> args = {
      "bench", "--batch-size",  "2", "--seq-len",   "4",    "--steps", "1", "--warmup",
      "0",     "--min-seconds", "0", "--precision", "fp32", "--wide"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}
const std::string kTimeout = "timeout 120";

const nlohmann::json& row_of(const nlohmann::json& rows, const std::string& mode) {
  for (const auto& r : rows)
    if (r["mode"].get<std::string>().rfind(mode, 0) == 0) return r;
  FAIL("no row " << mode);
  return rows[0];
}
}  // namespace

TEST_CASE("bench's ddp row on cpu:0,cpu:0 runs both ranks on cpu:0") {
  test::TempDir dir("fanout-bench-rows");
  auto r = test::run_fanout(
      tiny_bench({"--devices", "cpu:0,cpu:0", "--modes", "dp,ddp", "--json", dir / "b.json"}),
      kTimeout);
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  const nlohmann::json rows = test::bench_results(dir / "b.json");
  REQUIRE(rows.size() == 3);  // the baseline, dp, ddp
  CHECK(row_of(rows, "dp")["devices"] == "cpu:0,cpu:0");
  const nlohmann::json& ddp = row_of(rows, "ddp");
  CHECK(ddp["status"] == "ok");
  CHECK(ddp["mode"] == "ddp (2 processes)");
  // Each rank's peaks are named by the device it measured them on.
  CHECK(ddp["peak_bytes"].size() == 2);
  CHECK(ddp["peak_bytes"].contains("rank 0 cpu:0"));
  CHECK(ddp["peak_bytes"].contains("rank 1 cpu:0"));
  CHECK(has(r.out, "rank 0 cpu:0 "));
  CHECK(has(r.out, "rank 1 cpu:0 "));
}

TEST_CASE("bench runs, prints and writes the other rows when one mode fails, and exits 1") {
  test::TempDir dir("fanout-bench-rows");
  // Under a 15 MiB cap the baseline (13.4 MiB), zero3 (7.1 MiB per device) and each
  // ddp rank (13.2 MiB) fit; dp's primary (16.5 MiB: the replicas' gradients too)
  // does not.
  auto r = test::run_fanout(tiny_bench({"--devices", "cpu:0,cpu:1", "--modes", "dp,zero3,ddp",
                                        "--device-memory", "15MiB", "--json", dir / "f.json"}),
                            kTimeout);
  CAPTURE(r.out);
  CHECK(r.rc == 1);
  CHECK(r.err == "fanout: error: 1 of 4 rows failed (dp); each row above says why\n");
  CHECK(has(r.out,
            "\ndp                           failed  out of memory on cpu:0 "
            "(--device-memory 15.0 MiB): allocating "));
  CHECK(has(r.out, "\nzero3     "));
  CHECK(has(r.out, "\nddp (2 processes)     "));
  CHECK(has(r.out, "fanout fp32 best: "));
  CHECK(has(r.out, "peak bytes per device in the timed steps, by kind"));
  nlohmann::json rows = test::bench_results(dir / "f.json");
  REQUIRE(rows.size() == 4);
  CHECK(row_of(rows, "dp")["status"] == "failed");
  CHECK(has(row_of(rows, "dp")["reason"].get<std::string>(), "out of memory on cpu:0"));
  for (const std::string ran : {"1 device (cpu:0)", "zero3", "ddp (2 processes)"}) {
    CAPTURE(ran);
    CHECK(row_of(rows, ran)["status"] == "ok");
    CHECK(row_of(rows, ran)["tokens_per_s"].get<double>() > 0);
  }
  // Under 8 MiB only zero3 fits: the baseline fails (no speed-ups, "-"), and the ddp
  // row's reason is the error its failing rank printed.
  r = test::run_fanout(tiny_bench({"--devices", "cpu:0,cpu:1", "--modes", "zero3,ddp",
                                   "--device-memory", "8MiB", "--json", dir / "g.json"}),
                       kTimeout);
  CAPTURE(r.out);
  CHECK(r.rc == 1);
  CHECK(r.err ==
        "fanout: error: 2 of 3 rows failed (1 device (cpu:0), ddp (2 processes)); each row "
        "above says why\n");
  CHECK(has(r.out, "\nddp (2 processes)            failed  out of memory on cpu:"));
  rows = test::bench_results(dir / "g.json");
  REQUIRE(rows.size() == 3);
  CHECK(rows[0]["status"] == "failed");
  CHECK(rows[1]["status"] == "ok");
  CHECK(rows[1]["speedup"].is_null());
  CHECK(has(rows[2]["reason"].get<std::string>(), "(--device-memory 8.0 MiB)"));
}

TEST_CASE("bench --peers skips a peer that cannot run here with its reason and still exits 0") {
  // What /usr/bin/python3's torch offers (it is what --peers runs first).
  const int has_torch = test::shell("/usr/bin/python3 -c 'import torch'");
  if (has_torch != 0) {
    MESSAGE("skipped: /usr/bin/python3 has no torch");
    return;
  }
  const bool compiles = test::shell(
                            "/usr/bin/python3 -c 'import sys, torch; sys.exit(0 if hasattr(torch, "
                            "\"compile\") else 1)'") == 0;
  test::TempDir dir("fanout-bench-rows");
  auto r = test::run_fanout(
      tiny_bench({"--devices", "cpu:0", "--modes", "dp", "--peers", "--json", dir / "p.json"}),
      kTimeout);
  CAPTURE(r.out);
  CAPTURE(r.err);
  CHECK(r.rc == 0);
  const nlohmann::json rows = test::bench_results(dir / "p.json");
  const nlohmann::json& eager = row_of(rows, "PyTorch eager");
  CHECK(eager["peer"] == true);
  CHECK(eager["status"] == "ok");
  CHECK(eager["tokens_per_s"].get<double>() > 0);
  CHECK(row_of(rows, "PyTorch DDP (gloo, 1 process)")["status"] == "ok");
  const nlohmann::json& compiled = row_of(rows, "PyTorch torch.compile");
  if (compiles) {
    CHECK(compiled["status"] == "ok");
    return;
  }
  CHECK(compiled["status"] == "skipped");
  const std::string why = compiled["reason"].get<std::string>();
  CHECK(why.rfind("--compile needs PyTorch >= 2.0 (this is ", 0) == 0);
  CHECK(has(r.out, "PyTorch peer                skipped  PyTorch torch.compile, fp32: " + why));
}

TEST_CASE("a device list mixing cpu and cuda is refused in one line before anything runs") {
  test::TempDir dir("fanout-bench-rows");
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"train", "--devices", "cpu:0,cuda:0", "--out", dir / "run"},
           {"bench", "--devices", "cpu:0,cuda:0"}}) {
    CAPTURE(args[0]);
    auto r = test::run_fanout(args, kTimeout);
    CHECK(r.rc == 1);  // as every bad --devices value (a usage error of the CLI parser is 2)
    CHECK(r.err ==
          "fanout: error: bad device list 'cpu:0,cuda:0': all devices must be of one "
          "kind (cpu or cuda)\n");
    CHECK(r.out.empty());
  }
  CHECK(!std::filesystem::exists(dir / "run"));
}
