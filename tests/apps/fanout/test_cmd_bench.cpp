// `fanout bench` through the binary: results (--json, --svg, --trace) go only to
// regular files or new paths, checked before the benchmark runs; a write that
// fails (a full disk, simulated by a file size limit) is one error line and no
// file; every numeric flag is a number in range; sizes that cannot fit are
// refused before anything is allocated.

#include <doctest/doctest.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/bench/bench.h"
#include "models/llama_config.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/file_limit_util.h"
#include "tests/engine/core/file_node_util.h"

using namespace fanout;
using fanout::test::has;

namespace {
// The smallest real benchmark: one device, one mode, one step of 1 x 4 tokens
// (--min-seconds 0: no more steps than asked for); `flag value` replaces that
// flag's value (or is added).
std::vector<std::string> small_bench(const std::string& flag = "", const std::string& value = "") {
  std::vector<std::string> args = {
      "bench", "--devices", "cpu:0", "--modes",  "dp", "--batch-size",  "2", "--seq-len",
      "4",     "--steps",   "1",     "--warmup", "0",  "--min-seconds", "0"};
  if (flag.empty()) return args;
  for (size_t i = 1; i + 1 < args.size(); ++i) {
    if (args[i] == flag) {
      args[i + 1] = value;
      return args;
    }
  }
  args.insert(args.end(), {flag, value});
  return args;
}
// `args` with `more` appended; a flag already in `args` gets the new value instead.
std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  for (size_t k = 0; k + 1 < more.size(); k += 2) {
    auto it = std::find(args.begin(), args.end(), more[k]);
    if (it != args.end() && it + 1 != args.end()) {
      *(it + 1) = more[k + 1];
    } else {
      args.insert(args.end(), {more[k], more[k + 1]});
    }
  }
  if (more.size() % 2) args.push_back(more.back());
  return args;
}
// A hang (a FIFO opened for writing) fails the test instead of stalling the suite.
const std::string kTimeout = "timeout 60";
}  // namespace

TEST_CASE("bench writes --json --svg and --trace to new paths") {
  test::TempDir dir("fanout-bench");
  auto r = test::run_fanout(with(small_bench(), {"--json", dir / "b.json", "--svg", dir / "b.svg",
                                                 "--trace", dir / "b.trace"}),
                            kTimeout);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  std::ifstream json(dir / "b.json"), trace(dir / "b.trace");
  // the baseline, dp in fp32 and dp in bf16 (--precision both by default)
  CHECK(nlohmann::json::parse(json)["results"].size() == 3);
  CHECK(nlohmann::json::parse(trace).contains("traceEvents"));
  CHECK(std::filesystem::file_size(dir / "b.svg") > 0);
  CHECK(test::temp_leftovers(dir.path).empty());
}

TEST_CASE("bench refuses a FIFO, device, symlink or directory as a result before running") {
  test::TempDir dir("fanout-bench");
  for (const std::string flag : {"--json", "--svg", "--trace"}) {
    for (const test::FileNode& node : test::make_file_nodes(dir.path, flag.substr(2))) {
      CAPTURE(flag);
      CAPTURE(node.kind);
      const std::string before = test::file_node_identity(node.path);
      auto r = test::run_fanout(with(small_bench(), {flag, node.path}), kTimeout);
      CHECK(r.rc == 1);
      CHECK(r.err_lines() == 1);
      CHECK(has(r.err, flag + " " + node.path + ": is " + node.kind));
      CHECK(r.out.empty());  // refused before the benchmark printed (or ran) anything
      CHECK(test::file_node_identity(node.path) == before);
    }
  }
  CHECK(test::temp_leftovers(dir.path).empty());
}

TEST_CASE("bench results that cannot be written (a full disk) fail in one line and leave no file") {
  test::TempDir dir("fanout-bench");
  for (const std::string flag : {"--json", "--svg", "--trace"}) {
    CAPTURE(flag);
    const std::string path = dir / (flag.substr(2) + ".out");
    auto r = test::run_fanout_file_limited(with(small_bench(), {flag, path}), true);
    CHECK(r.rc == 1);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, path + ": cannot write: File too large"));
    CHECK(!std::filesystem::exists(path));
  }
  CHECK(test::temp_leftovers(dir.path).empty());
}

TEST_CASE("a file size limit is an error line, not a SIGXFSZ death") {
  test::TempDir dir("fanout-bench");
  // No `trap '' XFSZ` in the shell: fanout must ignore the signal itself.
  auto r = test::run_fanout_file_limited(with(small_bench(), {"--json", dir / "b.json"}), false);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "File too large"));
}

TEST_CASE("bench refuses numeric flags that are not numbers in range in one line") {
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--batch-size", ""},
           {"--batch-size", "0"},
           {"--batch-size", "x"},
           {"--batch-size", "1152921504606846976"},  // 2^60
           {"--seq-len", ""},
           {"--seq-len", "-4"},
           {"--seq-len", "4.5"},
           {"--steps", ""},
           {"--steps", "9223372036854775808"},
           {"--steps", "1e3"},
           {"--warmup", ""},
           {"--warmup", "-1"},
           {"--bucket-mb", ""},
           {"--bucket-mb", "inf"},
           {"--bucket-mb", "nan"},
           {"--bucket-mb", "1e300"},
           {"--bucket-mb", "0"},
           {"--bucket-mb", "-1"},
       }) {
    CAPTURE(flag);
    CAPTURE(value);
    auto r = test::run_fanout(small_bench(flag, value), kTimeout);
    CHECK(r.rc != 0);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, flag));
    CHECK(r.out.empty());
  }
  for (const std::string value : {"", "0", "inf"}) {
    auto r = test::run_fanout({"bench", "ops", "--repeats", value}, kTimeout);
    CHECK(r.rc != 0);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, "--repeats"));
  }
}

TEST_CASE("bench refuses a batch that cannot fit in memory before allocating") {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"bench", "--devices", "cpu:0", "--modes", "dp", "--batch-size", "1000000000",
            "--seq-len", "1024"},
           {"bench", "ops", "--batch-size", "1000000000", "--seq-len", "1024"},
       }) {
    auto r = test::run_fanout(args, kTimeout);
    CAPTURE(r.err);
    CHECK(r.rc == 1);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, "a batch of 1000000000 x 1024 tokens needs at least"));
    CHECK(r.out.empty());
  }
}

TEST_CASE("bench measures each mode in fp32 and bf16 and reports the bytes the engine moved") {
  test::TempDir dir("fanout-bench");
  auto rows = [&](const std::string& grad_comm) {
    std::string json = dir / ("b-" + grad_comm + ".json");
    auto r =
        test::run_fanout(with(small_bench("--modes", "dp,zero1,ddp"),
                              {"--devices", "cpu:0,cpu:1", "--grad-comm", grad_comm, "--json", json,
                               // a steady step: the first one also sends the fresh fp32 master
                               "--warmup", "1", "--wide"}),
                         kTimeout);
    CAPTURE(r.err);
    REQUIRE(r.rc == 0);
    CHECK(has(r.out, "sent/step"));
    CHECK(has(r.out, "fanout bf16 best: "));
    CHECK(has(r.out,
              "modes as fanout train flags: dp = --strategy dp; zero1 = --strategy zero1; "
              "ddp = --strategy ddp (under fanout launch; overlaps by default)\n"));
    std::ifstream in(json);
    return nlohmann::json::parse(in)["results"];
  };
  nlohmann::json a = rows("fp32"), b = rows("bf16");
  REQUIRE(a.size() == 7);  // the baseline, then three modes in fp32, then in bf16
  REQUIRE(b.size() == 7);
  for (int i = 1; i <= 3; ++i) {
    CAPTURE(i);
    const nlohmann::json &f32 = a[i], &bf16 = a[i + 3];
    const bool ddp = i == 3;  // each process updates its own weights: none are sent
    CHECK(f32["precision"] == "fp32");
    CHECK(bf16["precision"] == "bf16");
    CHECK(f32["mode"] == bf16["mode"]);
    // bf16 working weights: half the bytes sent to the replicas, the same sums.
    int64_t sent = f32["comm_bytes_per_step"]["replicate"].get<int64_t>();
    CHECK((sent > 0) != ddp);
    CHECK(bf16["comm_bytes_per_step"]["replicate"].get<int64_t>() * 2 == sent);
    int64_t sums = f32["comm_bytes_per_step"]["reduce"].get<int64_t>();
    CHECK(sums > 0);
    CHECK(bf16["comm_bytes_per_step"]["reduce"].get<int64_t>() == sums);
    // --grad-comm bf16: half the bytes of the sums, in either precision.
    CHECK(b[i]["grad_comm"] == "bf16");
    CHECK(b[i]["comm_bytes_per_step"]["reduce"].get<int64_t>() * 2 == sums);
    CHECK(b[i + 3]["comm_bytes_per_step"]["reduce"].get<int64_t>() * 2 == sums);
    // Every device's (ddp: every rank's) peaks per kind, measured where it ran.
    REQUIRE(f32["peak_bytes_by_kind"].size() == 2);
    for (const auto& p : f32["peak_bytes_by_kind"]) CHECK(p["params"].get<size_t>() > 0);
  }
  for (const char* bad : {"fp16", ""}) {
    auto r = test::run_fanout(with(small_bench(), {"--precision", bad}), kTimeout);
    CHECK(r.rc != 0);
    CHECK(r.err_lines() == 1);
  }
  auto r = test::run_fanout(with(small_bench(), {"--grad-comm", "fp8"}), kTimeout);
  CHECK(r.rc != 0);
  CHECK(has(r.err, "--grad-comm must be fp32 or bf16, got 'fp8'"));
  r = test::run_fanout(with(small_bench(), {"--projections", "both"}), kTimeout);
  CHECK(r.rc != 0);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "--projections must be auto, fused or separate, got 'both'"));
  r = test::run_fanout(with(small_bench(), {"--graphs", "1"}), kTimeout);
  CHECK(r.rc != 0);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "--graphs must be auto, on or off, got '1'"));
  r = test::run_fanout(with(small_bench(), {"--gemm-algo", "tuned"}), kTimeout);
  CHECK(r.rc != 0);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "--gemm-algo must be heuristic or timed, got 'tuned'"));
  r = test::run_fanout(with(small_bench(), {"--gemm-algo", "timed"}), kTimeout);
  CHECK(r.rc != 0);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "--gemm-algo timed times cuBLASLt's GEMM algorithms on CUDA devices"));
}

TEST_CASE("bench refuses flags it would ignore and two results on one path") {
  test::TempDir dir("fanout-bench");
  auto r = test::run_fanout({"bench", "--json", dir / "x.json", "ops"}, kTimeout);
  CHECK(r.rc == 1);
  CHECK(has(r.err, "--json does not apply to fanout bench ops"));
  r = test::run_fanout({"bench", "--precision", "bf16", "ops"}, kTimeout);
  CHECK(r.rc == 1);
  CHECK(has(r.err, "--precision does not apply to fanout bench ops"));
  r = test::run_fanout({"bench", "--projections", "fused", "ops"}, kTimeout);
  CHECK(r.rc == 1);
  CHECK(has(r.err, "--projections does not apply to fanout bench ops"));
  r = test::run_fanout({"bench", "--graphs", "on", "ops"}, kTimeout);
  CHECK(r.rc == 1);
  CHECK(has(r.err, "--graphs does not apply to fanout bench ops"));
  r = test::run_fanout({"bench", "--gemm-algo", "timed", "ops"}, kTimeout);
  CHECK(r.rc == 1);
  CHECK(has(r.err, "--gemm-algo does not apply to fanout bench ops"));
  r = test::run_fanout(with(small_bench(), {"--json", dir / "x", "--trace", dir / "x"}), kTimeout);
  CHECK(r.rc == 1);
  CHECK(r.err_lines() == 1);
  CHECK(has(r.err, "--json and --trace name the same file"));
  r = test::run_fanout(with(small_bench(), {"--svg", ""}), kTimeout);
  CHECK(r.rc == 1);
  CHECK(has(r.err, "--svg: an empty string is not a file name"));
  CHECK(!std::filesystem::exists(dir / "x"));
}

TEST_CASE("bench runs zero2 and zero3 and prints and writes each device's peak bytes per kind") {
  test::TempDir dir("fanout-bench");
  const std::string json = dir / "m.json";
  auto r = test::run_fanout(with(small_bench("--modes", "dp,zero2,zero3"),
                                 {"--devices", "cpu:0,cpu:1,cpu:2,cpu:3", "--batch-size", "4",
                                  "--precision", "fp32", "--warmup", "1", "--json", json}),
                            "COLUMNS=80 " + kTimeout);
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "peak bytes per device in the timed steps, by kind"));
  std::ifstream in(json);
  nlohmann::json rows = nlohmann::json::parse(in)["results"];
  REQUIRE(rows.size() == 4);  // the baseline, dp, zero2, zero3
  // The table prints the figures the JSON holds: rebuilt from it, it is in stdout.
  std::vector<presentation::BenchResult> results;
  for (const auto& row : rows) {
    presentation::BenchResult b;
    b.mode = row["mode"].get<std::string>();
    b.precision = row["precision"].get<std::string>();
    for (const auto& p : row["peak_bytes_by_kind"]) {
      b.peaks.push_back(presentation::device_peak_from_json(p));
      CHECK(row["peak_bytes"][b.peaks.back().device] == p["bytes"]);
    }
    results.push_back(b);
  }
  CHECK(has(r.out, bench::bench_memory_table(results, 80)));
  REQUIRE(results[1].mode == "dp");
  const presentation::DevicePeak& primary = results[1].peaks[0];
  for (int i : {2, 3}) {
    CAPTURE(results[i].mode);
    REQUIRE(results[i].peaks.size() == 4);
    for (const presentation::DevicePeak& p : results[i].peaks) {
      CHECK(p.tag(MemTag::grads) < primary.tag(MemTag::grads));
      CHECK(p.tag(MemTag::optimizer) < primary.tag(MemTag::optimizer));
      if (i == 3) CHECK(p.tag(MemTag::params) < primary.tag(MemTag::params));
    }
  }
  CHECK(rows[1]["memory_vs_dp"].get<double>() == 1.0);
  CHECK(rows[3]["memory_vs_dp"].get<double>() < 1.0);
  CHECK(rows[0]["memory_vs_dp"].is_number());  // the one-device baseline, fp32
}

TEST_CASE("bench --modes: help lists every mode, dp-replicas is dp, unknown names fail in a line") {
  auto help = test::run_fanout({"bench", "--help"}, kTimeout);
  CHECK(has(help.out, "Comma-separated: dp, dp-output, dp-overlap, zero1, zero2, zero3, ddp"));
  CHECK(has(help.out, "dp-output = --strategy dp --loss-on output"));
  CHECK(has(help.out, "pp-1f1b = --pp N --pp-schedule 1f1b (N: the devices)"));
  CHECK(has(help.out, "tp = --tp T (T: the most devices that divide the heads"));
  CHECK(has(help.out, "dp-replicas is another name for dp"));
  for (const std::string bad : {"zero4", "dp,dpp", "faithful"}) {
    CAPTURE(bad);
    auto r = test::run_fanout(small_bench("--modes", bad), kTimeout);
    CHECK(r.rc == 1);
    CHECK(r.err_lines() == 1);
    CHECK(has(r.err, "--modes: unknown mode '"));
    CHECK(has(r.err,
              "choose from dp, dp-output, dp-overlap, zero1, zero2, zero3, ddp, pp-gpipe, "
              "pp-1f1b, pp-zb1, tp, pp-tp, or all"));
    CHECK(r.out.empty());
  }
  // dp and its older name are one row; dp-output gathers the logits (the comm peak).
  test::TempDir dir("fanout-bench");
  auto r = test::run_fanout(
      with(small_bench("--modes", "dp-replicas,dp,dp-output"),
           {"--devices", "cpu:0,cpu:1", "--precision", "fp32", "--json", dir / "m.json", "--wide"}),
      kTimeout);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(!has(r.out, "dp-replicas"));
  CHECK(has(r.out,
            "modes as fanout train flags: dp = --strategy dp; dp-output = --strategy dp "
            "--loss-on output\n"));
  std::ifstream in(dir / "m.json");
  nlohmann::json rows = nlohmann::json::parse(in)["results"];
  REQUIRE(rows.size() == 3);  // the baseline, dp, dp-output
  CHECK(rows[1]["mode"] == "dp");
  CHECK(rows[2]["mode"] == "dp-output");
  const auto comm = [&](int i) { return rows[i]["peak_bytes_by_kind"][0]["comm"].get<size_t>(); };
  CHECK(comm(2) > comm(1));
}

TEST_CASE("bench --mfu and --kernels: a measured GEMM peak, MFU, and one step by kernel class") {
  test::TempDir dir("fanout-bench");
  const std::string json = dir / "b.json";
  auto r = test::run_fanout(
      with(small_bench(), {"--precision", "fp32", "--json", json, "--mfu", "--kernels", "--wide"}),
      kTimeout);
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(has(r.out, "fanout fp32 best (dp): MFU "));
  CHECK(has(r.out, "of a measured f32 GEMM peak of "));
  CHECK(has(r.out, "kernel classes, 1 device fp32, one step "));
  CHECK(has(r.out, "kernel ops, 1 device fp32, the longest: "));
  for (const char* c :
       {"GEMM ", "attention ", "loss ", "element-wise ", "optimizer ", "other and launch gaps "})
    CHECK(has(r.out, c));
  nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  REQUIRE(j["mfu"].size() == 1);
  CHECK(j["mfu"][0]["mfu"].get<double>() > 0);
  CHECK(j["mfu"][0]["gemm_peak_flops_per_s"].get<double>() > 0);
  REQUIRE(j["kernels"].size() == 1);
  const nlohmann::json& k = j["kernels"][0];
  CHECK(k["status"] == "ok");
  // Every op of the step ran inside a class: GEMMs and attention took time.
  CHECK(k["ops"].get<int64_t>() > 20);
  CHECK(k["GEMM"].get<double>() > 0);
  CHECK(k["attention"].get<double>() > 0);
  double sum = 0;
  for (const char* c : {"GEMM", "attention", "loss", "element-wise", "optimizer"})
    sum += k[c].get<double>();
  CHECK(sum <= k["step_s"].get<double>() * 1.001);
  // By op: every scope under its dispatcher's name, the counts adding up.
  std::set<std::string> names;
  int64_t count = 0;
  for (const nlohmann::json& o : k["by_op"]) {
    names.insert(o["op"].get<std::string>());
    count += o["count"].get<int64_t>();
  }
  CHECK(count == k["ops"].get<int64_t>());
  for (const char* op : {"matmul_forward", "matmul_backward", "attention_forward",
                         "attention_backward", "rmsnorm_backward", "adamw_update"})
    CHECK(names.count(op) == 1);
  // Without the flags the JSON has neither.
  const std::string json2 = dir / "plain.json";
  auto plain =
      test::run_fanout(with(small_bench(), {"--precision", "fp32", "--json", json2}), kTimeout);
  REQUIRE(plain.rc == 0);
  CHECK(!has(plain.out, "MFU"));
  nlohmann::json p = nlohmann::json::parse(std::ifstream(json2));
  CHECK(!p.contains("mfu"));
  CHECK(!p.contains("kernels"));
}

TEST_CASE("bench ops refuses --mfu and --kernels, which measure training steps") {
  for (const char* flag : {"--mfu", "--kernels"}) {
    CAPTURE(flag);
    auto r = test::run_fanout({"bench", flag, "ops"}, kTimeout);
    CHECK(r.rc != 0);
    CHECK(has(r.err, std::string(flag) + " does not apply to fanout bench ops"));
  }
}

TEST_CASE("bench --projections fused runs one GEMM for q/k/v and one for gate/up") {
  // The profiled step's forward saves 3 GEMMs a layer (q, k, v, gate, up become
  // q+k+v and gate+up), and backward 3 calls a layer likewise.
  test::TempDir dir("fanout-bench");
  auto matmuls = [&](const std::string& projections) {
    const std::string json = dir / (projections + ".json");
    auto r = test::run_fanout(with(small_bench(), {"--precision", "fp32", "--json", json,
                                                   "--kernels", "--projections", projections}),
                              kTimeout);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    const nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
    std::map<std::string, int64_t> count;
    for (const nlohmann::json& o : j["kernels"][0]["by_op"])
      count[o["op"].get<std::string>()] = o["count"].get<int64_t>();
    return count;
  };
  std::map<std::string, int64_t> separate = matmuls("separate"), fused = matmuls("fused");
  const int64_t layers = models::llama_preset("tiny").num_hidden_layers;
  CHECK(separate["matmul_forward"] - fused["matmul_forward"] == 3 * layers);
  CHECK(separate["matmul_backward"] - fused["matmul_backward"] == 3 * layers);
  CHECK(fused["swiglu_forward"] == separate["swiglu_forward"]);
  CHECK(fused["swiglu_forward"] > 0);
}
