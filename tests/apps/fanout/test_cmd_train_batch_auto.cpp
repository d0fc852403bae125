// `fanout train --batch-size auto` through the real binary: the search keeps
// exactly the largest batch that fits each device's cap less the margin (that
// batch trains under the reduced cap, one more row per replica does not), the
// run that follows equals a run started with that size (weights, AdamW state,
// shuffling and data position, bit for bit, and from a checkpoint too), the
// choice is printed and saved with the run, it accumulates to
// --global-batch-size, works for zero3 with offload and recompute, a pipeline,
// and ddp, and every bad input is one line before anything is written.

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/launch_util.h"
#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::ddp;

namespace {
namespace fs = std::filesystem;

// The tiny preset on the embedded corpus, 32 tokens per row, shuffled (the RNG
// counts), on `devices`.
std::vector<std::string> base(const std::string& out, int steps,
                              const std::string& devices = "cpu:0,cpu:1") {
  return {"train",
          "--devices",
          devices,
          "--seq-len",
          "32",
          "--steps",
          std::to_string(steps),
          "--shuffle",
          "--eval-every",
          "0",
          "--val-batches",
          "2",
          "--out",
          out,
          "--save-every",
          "0"};
}

nlohmann::json state_of(const std::string& checkpoint) {
  return nlohmann::json::parse(file_read(checkpoint + "/trainer_state.json"));
}

CliResult run(const std::vector<std::string>& args) {
  CliResult r = run_fanout(args);
  INFO("args: " << [&] {
    std::string all;
    for (const std::string& a : args) all += a + " ";
    return all;
  }());
  return r;
}

// Two checkpoints hold the same weights, AdamW state, data position and settings.
void check_same_checkpoint(const std::string& a, const std::string& b) {
  CHECK(file_read(a + "/model.safetensors") == file_read(b + "/model.safetensors"));
  CHECK(file_read(a + "/optimizer.safetensors") == file_read(b + "/optimizer.safetensors"));
  const nlohmann::json sa = state_of(a), sb = state_of(b);
  CHECK(sa["data"] == sb["data"]);
  CHECK(sa["flags"] == sb["flags"]);
  CHECK(sa["tokens_seen"] == sb["tokens_seen"]);
}

}  // namespace

TEST_CASE("batch-size auto keeps exactly the largest batch that fits the cap less the margin") {
  TempDir dir("fanout-auto");
  CliResult r = run(concat(base(dir / "auto", 3), {"--batch-size", "auto", "--device-memory",
                                                   "24MiB", "--batch-size-margin", "0.1"}));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  const std::vector<std::string> lines = lines_with(r.out, "batch size auto (binsearch, ");
  REQUIRE(lines.size() == 1);
  const nlohmann::json state = state_of(dir / "auto/final");
  const nlohmann::json& found = state["batch_size_search"];
  const int64_t rows = found["rows_per_replica"].get<int64_t>();
  const int64_t batch = found["batch_size"].get<int64_t>();
  CHECK(found["replicas"] == 2);
  CHECK(batch == 2 * rows);
  CHECK(rows > 1);  // a search with something to find
  CHECK(state["flags"]["batch-size"] == batch);
  CHECK(state["flags"]["grad-accum"] == 1);
  CHECK(has(lines[0], std::to_string(batch) + " rows per step (" + std::to_string(rows) +
                          " per replica x 2); peak cpu:0 "));
  CHECK(has(lines[0], "(--device-memory 24.0 MiB less the 10% margin); " +
                          std::to_string(rows + 1) + " per replica did not fit"));
  // The limit is 24 MiB less 10%, on both devices.
  const int64_t limit = found["limit_bytes"]["cpu:0"].get<int64_t>();
  CHECK(limit == (24 << 20) * 9 / 10);
  CHECK(found["limit_bytes"]["cpu:1"] == limit);
  CHECK(found["peak_bytes"]["cpu:0"].get<int64_t>() <= limit);
  // The search tried one more row per replica, which failed.
  bool next_failed = false;
  for (const nlohmann::json& t : found["tried"])
    if (t["rows_per_replica"] == rows + 1) next_failed = !t["fits"].get<bool>();
  CHECK(next_failed);
  // A line per trial as it ends.
  CHECK(lines_with(r.out, "batch size auto: ").size() == found["tried"].size());
  CHECK(
      lines_with(r.out, "batch size auto: " + std::to_string(rows) + " rows per replica fit (peak ")
          .size() == 1);
  CHECK(lines_with(r.out,
                   "batch size auto: " + std::to_string(rows + 1) + " rows per replica do not fit")
            .size() == 1);

  // Under the reduced cap, the batch found trains and one more row per replica does not.
  const std::string reduced = std::to_string(limit);
  r = run(concat(base(dir / "fits", 3),
                 {"--batch-size", std::to_string(batch), "--device-memory", reduced}));
  CHECK_MESSAGE(r.rc == 0, r.err);
  r = run(concat(base(dir / "next", 3),
                 {"--batch-size", std::to_string(batch + 2), "--device-memory", reduced}));
  check_fails(r.rc, r.err, "out of memory on cpu:");

  // The search leaves nothing behind: the run equals one started with that size.
  r = run(concat(base(dir / "fixed", 3),
                 {"--batch-size", std::to_string(batch), "--device-memory", "24MiB"}));
  REQUIRE(r.rc == 0);
  check_same_checkpoint(dir / "auto/final", dir / "fixed/final");
  CHECK(metrics_losses(dir / "auto/metrics.jsonl") == metrics_losses(dir / "fixed/metrics.jsonl"));
}

TEST_CASE("batch-size auto from a checkpoint resumes as the size it finds") {
  TempDir dir("fanout-auto");
  train_ok(concat(base(dir / "first", 2), {"--batch-size", "8", "--device-memory", "24MiB"}));
  const std::string from = dir / "first/final";
  CliResult a = run({"train", "--resume", from, "--steps", "4", "--out", dir / "a", "--batch-size",
                     "auto", "--device-memory", "24MiB"});
  INFO("stderr: " << a.err);
  REQUIRE(a.rc == 0);
  const int64_t batch = state_of(dir / "a/final")["batch_size_search"]["batch_size"].get<int64_t>();
  CHECK(batch == 8);  // the 24 MiB cap's size (the test above finds it from scratch)
  train_ok({"train", "--resume", from, "--steps", "4", "--out", dir / "b", "--batch-size", "8"});
  check_same_checkpoint(dir / "a/final", dir / "b/final");
  // What the search found stays with the run while it trains with that batch.
  train_ok({"train", "--resume", dir / "a/final", "--steps", "5", "--out", dir / "c"});
  CHECK(state_of(dir / "c/final")["batch_size_search"] ==
        state_of(dir / "a/final")["batch_size_search"]);
  train_ok({"train", "--resume", dir / "a/final", "--steps", "5", "--out", dir / "d",
            "--batch-size", "16", "--grad-accum", "2"});
  CHECK(!state_of(dir / "d/final").contains("batch_size_search"));
}

TEST_CASE("batch-size auto accumulates to the global batch size, and power keeps powers of two") {
  TempDir dir("fanout-auto");
  CliResult r = run(concat(base(dir / "acc", 2), {"--batch-size", "auto", "--device-memory",
                                                  "24MiB", "--global-batch-size", "24"}));
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  const nlohmann::json state = state_of(dir / "acc/final");
  const nlohmann::json& found = state["batch_size_search"];
  const int64_t micro = found["micro_batch_rows"].get<int64_t>();
  CHECK(24 % micro == 0);
  CHECK(found["grad_accum"].get<int64_t>() * micro == 24);
  CHECK(state["flags"]["batch-size"] == 24);
  CHECK(state["flags"]["grad-accum"] == 24 / micro);
  CHECK(lines_with(r.out, "24 rows per step as " + std::to_string(24 / micro) +
                              " micro-batches of " + std::to_string(micro))
            .size() == 1);
  train_ok(
      concat(base(dir / "fixed", 2), {"--batch-size", "24", "--grad-accum",
                                      std::to_string(24 / micro), "--device-memory", "24MiB"}));
  check_same_checkpoint(dir / "acc/final", dir / "fixed/final");

  // A cap where the largest size is not a power of two: binsearch finds it, power
  // keeps the largest power of two below it.
  std::vector<int64_t> kept;
  for (const char* mode : {"binsearch", "power"}) {
    CAPTURE(mode);
    const std::string out = dir / mode;
    r = run(concat(base(out, 1), {"--batch-size", "auto", "--device-memory", "29MiB",
                                  "--batch-size-search", mode}));
    REQUIRE(r.rc == 0);
    const nlohmann::json s = state_of(out + "/final")["batch_size_search"];
    kept.push_back(s["rows_per_replica"].get<int64_t>());
    for (const nlohmann::json& t : s["tried"]) {
      const int64_t n = t["rows_per_replica"].get<int64_t>();
      if (std::string(mode) == "power") CHECK((n & (n - 1)) == 0);
    }
  }
  CHECK(kept[0] > kept[1]);
  CHECK((kept[1] & (kept[1] - 1)) == 0);
  CHECK(kept[0] < 2 * kept[1]);
}

TEST_CASE("batch-size auto with zero3, offload and recompute, a pipeline, and ddp") {
  TempDir dir("fanout-auto");
  const std::string four = "cpu:0,cpu:1,cpu:2,cpu:3";
  CliResult r = run(concat(base(dir / "zero3", 2, four),
                           {"--batch-size", "auto", "--device-memory", "16MiB", "--strategy",
                            "zero3", "--offload", "optimizer", "--recompute"}));
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(lines_with(r.out, "per replica x 4); peak cpu:0 ").size() == 1);
  // Plain dp does not fit that cap at all.
  r = run(concat(base(dir / "dp", 2, four), {"--batch-size", "auto", "--device-memory", "16MiB"}));
  check_fails(r.rc, r.err, "--batch-size auto: not even 1 row per replica fits under 14.4 MiB");

  r = run(concat(base(dir / "pp", 2, four),
                 {"--batch-size", "auto", "--device-memory", "24MiB", "--pp", "2"}));
  REQUIRE(r.rc == 0);
  CHECK(lines_with(r.out, "per replica x 2); peak cpu:0 ").size() == 1);

  r = run(concat({"launch", "--nproc-per-node", "2", "--"},
                 concat(base(dir / "ddp", 2, "cpu"), {"--strategy", "ddp", "--batch-size", "auto",
                                                      "--device-memory", "24MiB"})));
  REQUIRE(r.rc == 0);
  CHECK(lines_with(r.out, "batch size auto (binsearch").size() == 1);
  CHECK(lines_with(r.out, "per replica x 2); peak cpu:0 ").size() == 1);
}

TEST_CASE("batch-size auto refuses what it cannot do in one line, before writing anything") {
  TempDir dir("fanout-auto");
  const std::string out = dir / "out";
  auto refused = [&](const std::vector<std::string>& flags, const std::string& phrase) {
    CAPTURE(phrase);
    CliResult r = run(concat(base(out, 1), flags));
    check_fails(r.rc, r.err, phrase);
    CHECK(!fs::exists(out));
  };
  refused({"--batch-size", "auto", "--device-memory", "2MiB"},
          "--batch-size auto: not even 1 row per replica fits under 1.8 MiB (--device-memory "
          "2.0 MiB less the 10% margin): out of memory on cpu:");
  refused({"--batch-size", "auto", "--micro-batch-sizes", "3,5"}, "drop --micro-batch-sizes");
  refused({"--batch-size", "auto", "--grad-accum", "2"}, "drop --grad-accum");
  refused({"--batch-size", "auto", "--global-batch-size", "7"},
          "--global-batch-size 7 cannot be reached exactly: it accumulates batches split evenly "
          "over the 2 data-parallel replicas, so it must be a multiple of 2");
  refused({"--batch-size", "auto", "--max-batch-size", "1"},
          "--max-batch-size 1 is below one row for each of the 2 data-parallel replicas");
  refused({"--global-batch-size", "8"},
          "--global-batch-size shapes the search of --batch-size "
          "auto: give --batch-size auto");
  refused({"--batch-size", "8", "--batch-size-search", "power"}, "give --batch-size auto");
  refused({"--batch-size", "auto", "--batch-size-search", "linear"},
          "--batch-size-search must be power or binsearch, got 'linear'");
  refused({"--batch-size", "auto", "--batch-size-margin", "0.95"}, "--batch-size-margin");
  refused({"--batch-size", "autos"},
          "--batch-size: 'autos' is not a whole number (expected "
          "1..1000000000 or auto)");
  refused({"--batch-size", "auto", "--batch-size", "8"},
          "--batch-size given twice (auto and 8); give it once");
  refused({"--offload", "gpu"}, "--offload must be optimizer");
  refused({"--offload", "optimizer", "--pp", "2"},
          "--offload optimizer works with --strategy dp, zero1, zero2 or zero3; a --pp grid");
  refused({"--offload", "optimizer", "--strategy", "ddp"}, "under ddp every process would keep");
}

TEST_CASE("running out of memory during a run names the flags that would help") {
  TempDir dir("fanout-auto");
  CliResult r =
      run(concat(base(dir / "oom", 1), {"--batch-size", "64", "--device-memory", "24MiB"}));
  check_fails(r.rc, r.err,
              {"step 1: ", "out of memory on cpu:",
               "; to fit, try --recompute, --strategy zero1, "
               "zero2 or zero3, --offload optimizer or "
               "--batch-size auto"});
  r = run(concat(base(dir / "oom3", 1), {"--batch-size", "64", "--device-memory", "24MiB",
                                         "--strategy", "zero3", "--recompute"}));
  check_fails(r.rc, r.err, "; to fit, try --offload optimizer or --batch-size auto");
  // A pipeline of one replica has no replicas to share its stages with: no
  // strategy would help; with two, zero1 and zero2 would.
  r = run(concat(base(dir / "pp", 1), {"--batch-size", "64", "--device-memory", "10MiB", "--pp",
                                       "2", "--micro-batches", "2"}));
  check_fails(r.rc, r.err, "; to fit, try --recompute or --batch-size auto");
  r = run(concat(base(dir / "pp2", 1, "cpu:0,cpu:1,cpu:2,cpu:3"),
                 {"--batch-size", "64", "--device-memory", "10MiB", "--pp", "2"}));
  check_fails(r.rc, r.err,
              "; to fit, try --recompute, --strategy zero1 or zero2 or --batch-size auto");
}
