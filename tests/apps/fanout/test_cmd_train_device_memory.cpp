// `fanout train --device-memory`: a cap the model cannot fit ends the run with one
// line naming the device and what was being allocated, a non-zero exit and no
// checkpoint, whether the allocation fails while the model is built or during a
// step on a device's own threads; a generous cap trains as usual and is saved
// with the run's settings; a bad size is a usage error.

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/core/allocator.h"
#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
namespace fs = std::filesystem;

// Whether any checkpoint file (complete or not) lies anywhere under `dir`.
bool has_checkpoint(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) return false;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find("safetensors") != std::string::npos ||
        name.find("trainer_state") != std::string::npos)
      return true;
  }
  return false;
}

// The MemTag named in an out-of-memory line ("... allocating N of TAG with ..."), or "".
std::string tag_in(const std::string& line) {
  for (MemTag t : {MemTag::other, MemTag::params, MemTag::grads, MemTag::optimizer,
                   MemTag::activations, MemTag::comm, MemTag::data}) {
    if (has(line, std::string(" of ") + mem_tag_name(t) + " with ")) return mem_tag_name(t);
  }
  return "";
}

// A non-zero exit with one stderr line: the allocator's refusal on `device`.
void check_out_of_memory(int rc, const std::string& err, const std::string& device,
                         const std::string& cap) {
  INFO("rc " << rc << " stderr: " << err);
  CHECK(rc == 1);
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  CHECK(err.rfind("fanout: error: ", 0) == 0);
  CHECK(has(err, "out of memory on " + device + " (--device-memory " + cap + "): allocating "));
  CHECK(has(err, " live needs "));
  CHECK(!tag_in(err).empty());
}

}  // namespace

TEST_CASE("train with a device memory cap the model cannot fit stops in one line, no checkpoint") {
  TempDir dir("fanout-devmem");
  const std::string out = dir / "run";
  CliResult r = train_cli({"--preset", "tiny", "--devices", "cpu:0", "--steps", "2", "--batch-size",
                           "2", "--seq-len", "32", "--device-memory", "1MiB", "--out", out});
  check_out_of_memory(r.rc, r.err, "cpu:0", "1.0 MiB");
  CHECK(tag_in(r.err) == "params");  // the tiny preset's weights alone are more than 1 MiB
  CHECK(!has_checkpoint(out));
}

TEST_CASE("train that runs out of device memory during a step stops in one line, no hang") {
  // The config's weights, gradients and AdamW state fit in 1 MiB; a step's
  // activations do not: the allocation fails on a device's stream, mid-step,
  // on both replicas at once.
  TrainFiles f(200);
  const std::string out = f.dir / "run";
  BackgroundTrain run({"--config", f.config, "--data", f.data, "--devices", "cpu:0,cpu:1",
                       "--batch-size", "16", "--seq-len", "64", "--steps", "3", "--save-every", "1",
                       "--device-memory", "1MiB", "--out", out});
  const int rc = run.wait(120);
  REQUIRE_MESSAGE(rc != -1, "the run did not stop within 120 s");
  const std::string err = run.err();
  INFO("stderr: " << err);
  CHECK(has(err, "out of memory on cpu:"));
  check_out_of_memory(rc, err, has(err, "out of memory on cpu:1") ? "cpu:1" : "cpu:0", "1.0 MiB");
  CHECK(tag_in(err) != "params");
  CHECK(tag_in(err) != "grads");
  CHECK(tag_in(err) != "optimizer");
  CHECK(!has_checkpoint(out));
}

TEST_CASE("train under a generous device memory cap trains and saves the cap with the run") {
  TrainFiles f;
  const std::string out = f.dir / "run";
  CliResult r =
      train_cli({"--config", f.config, "--data", f.data, "--devices", "cpu:0,cpu:1", "--batch-size",
                 "4", "--seq-len", "16", "--steps", "2", "--device-memory", "4GiB", "--out", out});
  INFO("stderr: " << r.err);
  REQUIRE(r.rc == 0);
  CHECK(r.err.find("error") == std::string::npos);
  std::ifstream in(out + "/final/trainer_state.json");
  nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
  REQUIRE(!state.is_discarded());
  CHECK(state["flags"]["device-memory"] == "4GiB");
  for (const nlohmann::json& step : metrics_steps(out + "/metrics.jsonl")) {
    CHECK(step["peak_bytes"]["cpu:0"].get<size_t>() <= (size_t{4} << 30));
  }
}

TEST_CASE("train refuses a device memory size it cannot read, naming the flag") {
  TempDir dir("fanout-devmem");
  for (const char* bad : {"0", "-1GiB", "lots", "2PiB"}) {
    CAPTURE(bad);
    CliResult r = train_cli(
        {"--devices", "cpu:0", "--steps", "1", "--device-memory", bad, "--out", dir / "run"});
    CHECK(r.rc == 2);  // a usage error, before anything runs
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, "--device-memory: '" + std::string(bad) + "' is "));
    CHECK(!fs::exists(dir / "run"));
  }
}
