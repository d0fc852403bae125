// `fanout train --offload optimizer` through the real binary: for dp, zero1, zero2
// and zero3 on 2 and 3 CPU devices, in fp32 and bf16, three steps write the same
// checkpoint bytes (weights and AdamW state) and the same losses as without
// offload; a checkpoint crosses offload on and off as an uninterrupted run
// continues; the devices' peaks drop by AdamW's state, which the host holds; the
// bench's memory table shows it in its host column.

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/allocator.h"
#include "models/llama_config.h"
#include "tests/apps/fanout/bench_util.h"
#include "tests/apps/fanout/checkpoint_util.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/launch_util.h"
#include "tests/apps/fanout/train_util.h"

using namespace fanout;
using namespace fanout::test;
using namespace fanout::test::ddp;

namespace {

std::vector<std::string> devices_of(int n) {
  std::string list;
  for (int i = 0; i < n; ++i) list += (i ? ",cpu:" : "cpu:") + std::to_string(i);
  return {"--devices", list};
}

// The bytes of a run's final weights and AdamW state.
std::string final_bytes(const std::string& out) {
  return file_read(out + "/final/model.safetensors") +
         file_read(out + "/final/optimizer.safetensors");
}

int64_t peak_of(const std::string& out, const std::string& device) {
  const std::vector<nlohmann::json> steps = metrics_steps(out + "/metrics.jsonl");
  REQUIRE(!steps.empty());
  return steps.back()["peak_bytes"][device].get<int64_t>();
}

}  // namespace

TEST_CASE("offload optimizer trains bit for bit as the devices do, dp and zero1-3 on 2 and 3") {
  TinyRun run;
  for (const char* precision : {"fp32", "bf16"}) {
    for (const char* strategy : {"dp", "zero1", "zero2", "zero3"}) {
      for (int n : {2, 3}) {
        CAPTURE(precision);
        CAPTURE(strategy);
        CAPTURE(n);
        const std::string tag = std::string(precision) + strategy + std::to_string(n);
        const std::vector<std::string> flags =
            concat(devices_of(n), {"--strategy", strategy, "--precision", precision});
        const std::string plain = run.dir / (tag + "-plain"), off = run.dir / (tag + "-off");
        train_ok(concat(run.train_args(plain, 3), flags));
        train_ok(concat(run.train_args(off, 3), concat(flags, {"--offload", "optimizer"})));
        CHECK(final_bytes(off) == final_bytes(plain));
        CHECK(metrics_losses(off + "/metrics.jsonl") == metrics_losses(plain + "/metrics.jsonl"));
        CHECK(metrics_values(off + "/metrics.jsonl", "grad_norm") ==
              metrics_values(plain + "/metrics.jsonl", "grad_norm"));
      }
    }
  }
}

TEST_CASE("a checkpoint crosses offload on and off as an uninterrupted run continues") {
  TinyRun run;
  const std::vector<std::string> zero2 = concat(devices_of(2), {"--strategy", "zero2"});
  const std::string whole = run.dir / "whole";
  train_ok(concat(run.train_args(whole, 5), zero2));
  for (bool offload_first : {false, true}) {
    CAPTURE(offload_first);
    const std::vector<std::string> on = {"--offload", "optimizer"};
    const std::string first = run.dir / (offload_first ? "on" : "off");
    train_ok(concat(run.train_args(first, 3), offload_first ? concat(zero2, on) : zero2));
    const std::string second = first + "-resumed";
    train_ok(concat({"train", "--resume", first + "/final", "--steps", "5", "--out", second},
                    offload_first ? zero2 : concat(zero2, on)));
    CHECK(final_bytes(second) == final_bytes(whole));
  }
}

TEST_CASE("offload takes AdamW's state off the devices and the host holds it") {
  TinyRun run;
  const std::string plain = run.dir / "plain", off = run.dir / "off";
  train_ok(concat(run.train_args(plain, 2), devices_of(2)));
  train_ok(concat(run.train_args(off, 2), concat(devices_of(2), {"--offload", "optimizer"})));
  // dp's primary held m and v (2 x 4 bytes per parameter); offloaded, a scratch float.
  const models::LlamaConfig c = [&] {
    models::LlamaConfig config = cli_test_config();
    config.hidden_size = 32, config.intermediate_size = 64, config.num_hidden_layers = 2;
    config.num_attention_heads = 4, config.num_key_value_heads = 2, config.head_dim = 8;
    config.max_position_embeddings = 64;
    return config;
  }();
  const int64_t state = 8 * c.num_parameters();
  CHECK(peak_of(plain, "cpu:0") - peak_of(off, "cpu:0") >= state);
  CHECK(peak_of(plain, "cpu:0") - peak_of(off, "cpu:0") <= state + 4096);

  // The bench's host column: master, m, v and the gradients' landing buffer.
  TempDir dir("fanout-offload-bench");
  CliResult r = run_fanout(
      {"bench",     "--batch-size", "2",         "--seq-len",     "4",       "--steps",
       "1",         "--warmup",     "0",         "--min-seconds", "0",       "--precision",
       "fp32",      "--wide",       "--devices", "cpu:0,cpu:1",   "--modes", "dp,zero3,pp-1f1b",
       "--offload", "optimizer",    "--json",    dir / "b.json"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.rc == 1);  // the pipeline row cannot offload
  CHECK(has(r.out, "host"));
  const int64_t P = models::llama_preset("tiny").num_parameters();
  for (const nlohmann::json& row : bench_results(dir / "b.json")) {
    const std::string mode = row["mode"];
    CAPTURE(mode);
    if (mode == "pp-1f1b") {
      CHECK(row["status"] == "failed");
      CHECK(has(row["reason"].get<std::string>(), "--offload optimizer works with dp, overlap"));
    } else if (mode == "dp" || mode == "zero3") {
      CHECK(row["host_bytes"].get<int64_t>() == 16 * P);
      CHECK(has(r.out, bytes_str(static_cast<size_t>(16 * P))));
    }
  }
}
