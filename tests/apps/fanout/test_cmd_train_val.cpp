// The held-out loss `fanout train` reports is over the whole --val-data (unless
// --eval-batches caps it, which the run then says), so it equals `fanout eval` on
// the same file and checkpoint.

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;

TEST_CASE("train's held-out loss covers the whole file and agrees with fanout eval") {
  TrainFiles f(48);  // about 6400 tokens: about 100 batches of 4 x 16, far past 20
  const std::string run = f.dir / "run";
  CliResult r = train_cli({"--config", f.config, "--data", f.data, "--val-data", f.data,
                           "--devices", "cpu:0", "--batch-size", "4", "--seq-len", "16", "--steps",
                           "3", "--eval-every", "0", "--json", "--out", run});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  const nlohmann::json summary = nlohmann::json::parse(r.out.substr(r.out.rfind('{')));
  CliResult e =
      run_fanout({"eval", "--checkpoint", run + "/final", "--data", f.data, "--batch-size", "4",
                  "--seq-len", "16", "--devices", "cpu:0", "--json"});
  INFO("eval: " << e.out << e.err);
  REQUIRE(e.rc == 0);
  const nlohmann::json ev = nlohmann::json::parse(e.out.substr(e.out.rfind('{')));
  REQUIRE(ev["batches"].get<int64_t>() > 20);
  CHECK(std::abs(summary["val_loss"].get<double>() - ev["loss"].get<double>()) < 1e-6);
  CHECK(r.out.find("--eval-batches") == std::string::npos);

  // A cap is honoured and said.
  CliResult capped = train_cli(
      {"--resume", "last", "--out", run, "--steps", "4", "--eval-batches", "5", "--json"});
  INFO("capped: " << capped.out << capped.err);
  REQUIRE(capped.rc == 0);
  CHECK(capped.out.find("held-out loss over the first 5 of ") != std::string::npos);
}
