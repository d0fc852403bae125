// metrics.jsonl read back: every field the trainer writes, the latest line of a
// repeated step wins (Note [Repeated steps]), nulls left out, and a malformed
// line (or a step past int64) is one error naming FILE:LINE.

#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "apps/presentation/metrics_read.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout::presentation;
using fanout::test::error_of;
using fanout::test::has;

namespace {
const char* const kLog =
    R"({"grad_norm":5.4,"loss":5.5,"lr":0.0001,"peak_bytes":{"cpu:0":100,"cpu:1":90},"step":1,"step_s":0.17,"tokens":1024,"tokens_per_s":5891.2})"
    "\n"
    R"({"grad_norm":4.6,"loss":5.4,"lr":0.0002,"peak_bytes":{"cpu:0":120,"cpu:1":95},"step":2,"step_s":0.12,"tokens":2048,"tokens_per_s":null})"
    "\n\n"
    R"({"step":2,"val_loss":5.2})"
    "\n"
    R"({"loss":5.0,"lr":0.0003,"step":3,"future_field":"ignored"})"
    "\n";
}  // namespace

TEST_CASE("metrics_parse reads the trainer's step and evaluation lines") {
  RunMetrics m = metrics_parse(kLog, "m.jsonl");
  CHECK(m.lines == 4);
  CHECK(m.loss == StepValues{{1, 5.5}, {2, 5.4}, {3, 5.0}});
  CHECK(m.val_loss == StepValues{{2, 5.2}});
  CHECK(m.lr.at(3) == 0.0003);
  CHECK(m.grad_norm.size() == 2);
  CHECK(m.tokens_per_s == StepValues{{1, 5891.2}});  // null: left out
  REQUIRE(m.peak_bytes.size() == 2);
  CHECK(m.peak_bytes.at("cpu:0") == StepValues{{1, 100}, {2, 120}});
  CHECK(m.peak_bytes.at("cpu:1").at(2) == 95);
}

TEST_CASE("metrics_parse keeps the line written last for a repeated step") {
  const std::string log = R"({"step":1,"loss":3.0})"
                          "\n"
                          R"({"step":2,"loss":2.5})"
                          "\n"
                          R"({"step":1,"loss":2.9})"
                          "\n";
  CHECK(metrics_parse(log, "m").loss == StepValues{{1, 2.9}, {2, 2.5}});
}

TEST_CASE("metrics_parse names FILE:LINE of a malformed line") {
  auto err = [](const std::string& text) {
    return error_of([&] { metrics_parse(text, "run/metrics.jsonl"); });
  };
  // json_parse's message goes on to say where in the line and why.
  const std::string bad_json = "run/metrics.jsonl:2: not valid JSON: ";
  CHECK(err("{\"step\":1}\n{\"step\":2, \"loss\"\n").rfind(bad_json, 0) == 0);
  CHECK(err("\n\n[1,2]\n") == "run/metrics.jsonl:3: not a JSON object");
  CHECK(err("{\"loss\":1}\n") == "run/metrics.jsonl:1: no integer \"step\"");
  CHECK(err("{\"step\":1.5}\n") == "run/metrics.jsonl:1: no integer \"step\"");
  CHECK(err("{\"step\":1,\"loss\":\"x\"}\n") == "run/metrics.jsonl:1: \"loss\" is not a number");
  CHECK(err("{\"step\":1,\"peak_bytes\":3}") ==
        "run/metrics.jsonl:1: \"peak_bytes\" is not an object");
  // A last line cut short by a crash is named too, not silently dropped.
  CHECK(err("{\"step\":1}\n{\"st").rfind(bad_json, 0) == 0);
  CHECK(metrics_parse("", "m").lines == 0);
}

TEST_CASE("metrics_parse refuses a step past int64 instead of drawing it wrapped") {
  // nlohmann reads 2^64-1 as an unsigned integer; as int64 it was step -1.
  CHECK(error_of([] {
          metrics_parse("{\"step\":1,\"loss\":2}\n{\"step\":18446744073709551615,\"loss\":1}\n",
                        "run/metrics.jsonl");
        }) ==
        "run/metrics.jsonl:2: \"step\" 18446744073709551615 is too large (at most "
        "9223372036854775807)");
  const RunMetrics m = metrics_parse("{\"step\":9223372036854775807,\"loss\":1}", "m");
  CHECK(m.loss == StepValues{{9223372036854775807, 1.0}});
}

TEST_CASE("metrics_parse reads a long log whole, lines out of order included") {
  std::string log;
  for (int s = 1; s <= 20000; ++s)
    log += "{\"loss\":" + std::to_string(s % 97) +
           ",\"peak_bytes\":{\"cpu:0\":" + std::to_string(s) + "},\"step\":" + std::to_string(s) +
           "}\n";
  log += "{\"step\":5,\"loss\":0.5}\n{\"step\":0,\"val_loss\":3}\n";
  const RunMetrics m = metrics_parse(log, "m");
  CHECK(m.lines == 20002);
  CHECK(m.loss.size() == 20000);
  CHECK(m.loss.at(5) == 0.5);  // the later line wins
  CHECK(m.loss.at(20000) == 20000 % 97);
  CHECK(m.peak_bytes.at("cpu:0").size() == 20000);
  CHECK(m.val_loss == StepValues{{0, 3.0}});
}

TEST_CASE("metrics_read_run names a directory without metrics.jsonl") {
  fanout::test::TempDir dir("fanout-metrics");
  CHECK(error_of([&] { metrics_read_run(dir.path); }) ==
        dir.path + ": no metrics.jsonl (not a fanout train run directory?)");
  CHECK(has(error_of([&] { metrics_read_run(dir / "missing"); }), ": not a directory"));
  std::ofstream(dir / "metrics.jsonl") << kLog;
  CHECK(metrics_read_run(dir.path).loss.size() == 3);
}
