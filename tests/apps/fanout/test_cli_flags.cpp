// Numeric flags reach the commands as the decimal number typed: CLI11 converts
// with base 0 on its own, so "--steps 010" trained 8 steps and "--vocab-size 0300"
// was refused naming 192.

#include <doctest/doctest.h>

#include "tests/apps/fanout/train_util.h"

using namespace fanout::test;

TEST_CASE("an integer flag with a leading zero is read as decimal") {
  TrainFiles f;
  const std::string out = f.dir / "run";
  CliResult r =
      train_cli({"--config", f.config, "--data", f.data, "--devices", "cpu:0", "--batch-size", "2",
                 "--seq-len", "16", "--steps", "010", "--save-every", "0", "--out", out});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(metrics_steps(out + "/metrics.jsonl").size() == 10);
  CHECK(has(r.out, "steps 1..10"));
}

TEST_CASE("an integer flag written in hex, octal or with spaces is refused naming the text") {
  TrainFiles f;
  for (const char* bad : {"0x10", "0o10", " 10", "10 ", "1e1"}) {
    CAPTURE(bad);
    CliResult r = train_cli({"--config", f.config, "--data", f.data, "--steps", bad});
    CHECK(r.rc == 2);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, std::string("--steps: '") + bad + "' is not a whole number"));
  }
}
