// fanout train --tp through the real binary: tensor parallelism alone, with
// data-parallel replicas and inside pipeline stages (the 2 x 2 x 2 grid on 8
// CPU devices) trains as one device does; the first line says which device
// holds what; checkpoints cross from any grid to one device and back; bad grids
// are refused in one line each, before anything is written.

#include <doctest/doctest.h>

#include <filesystem>

#include "engine/core/file_io.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/launch_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::ddp;

namespace {

const std::string kEight = "cpu:0,cpu:1,cpu:2,cpu:3,cpu:4,cpu:5,cpu:6,cpu:7";

}  // namespace

TEST_CASE("train --tp: alone, with replicas and in the 2 x 2 x 2 grid, equal to one device") {
  TinyRun run;
  const std::vector<float> init = weights_all(run.init);
  const std::string single = run.dir / "single";
  train_ok(concat(run.train_args(single, 4), {"--devices", "cpu:0"}));
  const Outcome ref = outcome(single, init);
  struct Grid {
    std::vector<std::string> flags;
    std::string header;
  };
  const std::vector<Grid> grids = {
      {{"--devices", "cpu:0,cpu:1", "--tp", "2"}, "on 2 tensor ranks: cpu:0+cpu:1 |"},
      {{"--devices", "cpu:0,cpu:1,cpu:2,cpu:3", "--tp", "2", "--strategy", "zero1"},
       "on 2 replicas x 2 tensor ranks: replica 0 = cpu:0+cpu:1; replica 1 = cpu:2+cpu:3 |"},
      {{"--devices", kEight, "--tp", "2", "--pp", "2", "--precision", "fp32"},
       "on 2 replicas x 2 stages x 2 tensor ranks: replica 0 = stage 0 on cpu:0+cpu:1, stage 1 on "
       "cpu:2+cpu:3; replica 1 = stage 0 on cpu:4+cpu:5, stage 1 on cpu:6+cpu:7 |"},
      {{"--devices", kEight, "--tp", "2", "--pp", "2", "--strategy", "zero1", "--overlap",
        "--pp-schedule", "zb1"},
       "2 replicas x 2 stages x 2 tensor ranks"},
      {{"--devices", "cpu:0,cpu:1,cpu:2,cpu:3", "--tp", "2", "--pp", "2", "--sequence-parallel"},
       ", sequence parallel |"},
  };
  int n = 0;
  for (const Grid& g : grids) {
    CAPTURE(n);
    const std::string out = run.dir / ("grid" + std::to_string(n++));
    CliResult r = run_fanout(concat(run.train_args(out, 4), g.flags));
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    const auto first = r.out.substr(0, r.out.find('\n'));
    CHECK(has(first, "fanout train:"));
    CHECK(has(first, g.header));
    check_same(outcome(out, init), ref);
  }
}

TEST_CASE("train --tp: checkpoints cross from the grid to one device and back") {
  TinyRun run;
  check_resume_legs(
      run,
      {
          {{"--devices", "cpu:0,cpu:1", "--tp", "2"}, {"--devices", "cpu:0"}},
          {{"--devices", "cpu:0,cpu:1", "--tp", "2"}, {"--devices", "cpu:0,cpu:1", "--pp", "2"}},
          {{"--devices", kEight, "--tp", "2", "--pp", "2", "--strategy", "zero1"},
           {"--devices", "cpu:0"}},
          {{"--devices", "cpu:0"}, {"--devices", kEight, "--tp", "2", "--pp", "2"}},
          {{"--devices", "cpu:0,cpu:1", "--tp", "2", "--sequence-parallel"},
           {"--devices", "cpu:0,cpu:1", "--tp", "2"}},
      });
}

TEST_CASE("train --tp --trace: each tensor rank on its own lane") {
  TinyRun run;
  const std::string out = run.dir / "traced", trace = run.dir / "trace.json";
  train_ok(
      concat(run.train_args(out, 1), {"--devices", "cpu:0,cpu:1", "--tp", "2", "--trace", trace}));
  const std::string text = file_read_regular(trace);
  for (const char* lane : {"cpu:0 stage 0 tp 0", "cpu:1 stage 0 tp 1"}) CHECK(has(text, lane));
  CHECK(has(text, "tp all-reduce"));
  CHECK(has(text, "tp all-gather"));
}

TEST_CASE("train --tp: bad grids are refused in one line") {
  TinyRun run;
  const std::string out = run.dir / "bad";
  auto refused = [&](std::vector<std::string> flags, const std::string& phrase) {
    CAPTURE(phrase);
    CliResult r = run_fanout(concat(run.train_args(out, 1), flags));
    check_fails(r.rc, r.err, phrase);
    CHECK(!std::filesystem::exists(out));
  };
  // The tiny preset: 4 heads, 2 key-value heads, intermediate_size 384.
  refused({"--devices", "cpu:0,cpu:1,cpu:2,cpu:3", "--tp", "4"},
          "--tp 4 does not divide num_key_value_heads (2)");
  refused({"--devices", "cpu:0,cpu:1,cpu:2", "--tp", "3"},
          "--tp 3 does not divide num_attention_heads (4)");
  refused({"--devices", "cpu:0,cpu:1,cpu:2", "--tp", "2"},
          "--tp 2 does not divide the 3 devices listed");
  refused({"--devices", "cpu:0,cpu:1,cpu:2,cpu:3,cpu:4,cpu:5", "--tp", "2", "--pp", "2"},
          "--tp 2 x --pp 2 does not divide the 6 devices listed");
  refused({"--devices", "cpu:0,cpu:1", "--tp", "0"}, "--tensor-parallel: '0' is out of range");
  refused({"--devices", "cpu:0,cpu:1", "--tp", "2", "--strategy", "zero3"},
          "does not combine with --strategy zero3");
  refused({"--devices", "cpu:0,cpu:1", "--tp", "2", "--loss-on", "output"},
          "--loss-on output does not combine with it");
  refused({"--devices", "cpu:0,cpu:1", "--tp", "2", "--output-device", "cpu:1"},
          "--output-device does not combine with --tp 2");
  refused({"--devices", "cpu:0,cpu:1", "--sequence-parallel"},
          "--sequence-parallel shards the tokens among tensor-parallel ranks: give --tp T");
}
