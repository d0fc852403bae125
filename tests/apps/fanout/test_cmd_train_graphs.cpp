// `fanout train --graphs on` through the binary (Note [Step graphs]): dp and
// zero1 on two CPU devices, fp32 and bf16, write the same checkpoint bytes and
// losses as without; ddp under `fanout launch` records without overlapping
// unless asked; `bench --graphs on` runs the rows that can record and fails the
// others with the reason.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/apps/fanout/bench_util.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/command_util.h"
#include "tests/apps/fanout/launch_util.h"
#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::ddp;

namespace {

std::string final_bytes(const std::string& out) {
  return file_read(out + "/final/model.safetensors") +
         file_read(out + "/final/optimizer.safetensors");
}

}  // namespace

TEST_CASE("train --graphs on trains bit for bit as without, dp and zero1, fp32 and bf16") {
  TinyRun run;
  for (const char* precision : {"fp32", "bf16"}) {
    for (const char* strategy : {"dp", "zero1"}) {
      CAPTURE(precision);
      CAPTURE(strategy);
      const std::vector<std::string> flags = {"--devices", "cpu:0,cpu:1", "--strategy",
                                              strategy,    "--precision", precision};
      const std::string tag = std::string(precision) + strategy;
      const std::string off = run.dir / (tag + "-off"), on = run.dir / (tag + "-on");
      train_ok(concat(run.train_args(off, 4), flags));
      CliResult r = run_fanout(concat(run.train_args(on, 4), concat(flags, {"--graphs", "on"})));
      INFO("stderr: " << r.err);
      REQUIRE(r.rc == 0);
      CHECK(r.err.empty());  // recorded: no line saying it could not be
      CHECK(lines_with(r.out, ", graphs |").size() == 1);
      CHECK(final_bytes(on) == final_bytes(off));
      CHECK(metrics_losses(on + "/metrics.jsonl") == metrics_losses(off + "/metrics.jsonl"));
    }
  }
}

TEST_CASE("ddp --graphs on does not overlap unless asked, and then is refused") {
  TinyRun run;
  const std::string plain = run.dir / "plain", graphs = run.dir / "graphs";
  const std::vector<std::string> launch = {"launch", "--nproc-per-node", "2", "--"};
  const std::vector<std::string> ddp = {"--strategy", "ddp", "--devices", "cpu"};
  CliResult r =
      run_fanout(concat(launch, concat(run.train_args(plain, 4), concat(ddp, {"--no-overlap"}))));
  REQUIRE(r.rc == 0);
  r = run_fanout(
      concat(launch, concat(run.train_args(graphs, 4), concat(ddp, {"--graphs", "on"}))));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(lines_with(r.out, "| ddp, loss on replicas |").size() == 1);  // no ", overlap"
  CHECK(final_bytes(graphs) == final_bytes(plain));
  r = run_fanout(concat(launch, concat(run.train_args(run.dir / "refused", 2),
                                       concat(ddp, {"--graphs", "on", "--overlap"}))));
  CHECK(r.rc != 0);
  CHECK(has(r.err, "--graphs on records backward whole: it cannot overlap"));
}

TEST_CASE("bench --graphs on runs the rows that record and fails the others with the reason") {
  TempDir dir("fanout-bench-graphs");
  auto r = run_fanout({"bench",
                       "--batch-size",
                       "2",
                       "--seq-len",
                       "8",
                       "--steps",
                       "3",
                       "--warmup",
                       "1",
                       "--min-seconds",
                       "0",
                       "--precision",
                       "fp32",
                       "--devices",
                       "cpu:0,cpu:1",
                       "--modes",
                       "dp,zero1,zero2",
                       "--graphs",
                       "on",
                       "--wide",
                       "--json",
                       dir / "g.json"},
                      "timeout 120");
  CAPTURE(r.out);
  CHECK(r.rc == 1);
  CHECK(r.err == "fanout: error: 1 of 4 rows failed (zero2); each row above says why\n");
  nlohmann::json rows = bench_results(dir / "g.json");
  REQUIRE(rows.size() == 4);
  for (const auto& row : rows) {
    const std::string mode = row["mode"].get<std::string>();
    CAPTURE(mode);
    if (mode == "zero2") {
      CHECK(row["status"] == "failed");
      CHECK(has(row["reason"].get<std::string>(), "cannot hand gradients over during backward"));
    } else {
      CHECK(row["status"] == "ok");
    }
  }
}

TEST_CASE("train --graphs on with accumulated micro-batches trains bit for bit as without") {
  TinyRun run;
  const std::string off = run.dir / "off", on = run.dir / "on";
  const std::vector<std::string> flags = {"--devices", "cpu:0,cpu:1", "--grad-accum", "2"};
  train_ok(concat(run.train_args(off, 3), concat(flags, {"--graphs", "off"})));
  CliResult r = run_fanout(concat(run.train_args(on, 3), concat(flags, {"--graphs", "on"})));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.err.empty());
  CHECK(final_bytes(on) == final_bytes(off));
  CHECK(metrics_losses(on + "/metrics.jsonl") == metrics_losses(off + "/metrics.jsonl"));
}

TEST_CASE("the auto defaults turn neither graphs nor fused projections on for CPU devices") {
  TinyRun run;
  const std::string plain = run.dir / "plain", given = run.dir / "given";
  CliResult r = run_fanout(concat(run.train_args(plain, 2), {"--devices", "cpu:0,cpu:1"}));
  REQUIRE(r.rc == 0);
  CHECK(lines_with(r.out, "| dp, loss on replicas | fp32 | batch").size() == 1);
  r = run_fanout(concat(run.train_args(given, 2),
                        {"--devices", "cpu:0,cpu:1", "--graphs", "auto", "--projections", "auto"}));
  REQUIRE(r.rc == 0);
  CHECK(lines_with(r.out, "| dp, loss on replicas | fp32 | batch").size() == 1);
  CHECK(final_bytes(given) == final_bytes(plain));
  // Auto refuses nothing: zero2 and the output loss run, without graphs.
  r = run_fanout(concat(run.train_args(run.dir / "zero2", 2),
                        {"--devices", "cpu:0,cpu:1", "--strategy", "zero2", "--loss-on", "output",
                         "--graphs", "auto"}));
  INFO("stderr: " << r.err);
  CHECK(r.rc == 0);
}
