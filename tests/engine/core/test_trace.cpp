// The trace recorder writes valid Chrome/Perfetto JSON: one named lane per
// stream, complete ("X") events with non-negative durations.

#include <doctest/doctest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/core/check.h"
#include "engine/core/stream.h"
#include "engine/core/trace.h"
#include "tests/apps/fanout/cli_runner.h"
#include "tests/apps/fanout/file_limit_util.h"
#include "tests/engine/core/file_node_util.h"

using namespace fanout;

TEST_CASE("trace JSON is valid and names one lane per stream") {
  Trace& t = Trace::global();
  t.clear();
  t.set_enabled(true);
  {
    Stream s0(cpu_device(0), "cpu:0 compute");
    Stream s1(cpu_device(1), "cpu:1 comm");
    {
      StreamSpan a(s0, "forward");
      s0.enqueue([] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
    }
    { StreamSpan b(s1, "reduce"); }
    { TraceScope h("host", "step"); }
    s0.synchronize();
    s1.synchronize();
  }
  t.set_enabled(false);
  auto doc = nlohmann::json::parse(t.to_json());
  REQUIRE(doc.contains("traceEvents"));
  std::set<std::string> lanes;
  int spans = 0;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") lanes.insert(e["args"]["name"]);
    if (e["ph"] == "X") {
      ++spans;
      CHECK(e["dur"].get<int64_t>() >= 0);
      CHECK(e.contains("ts"));
      CHECK(e.contains("tid"));
    }
  }
  CHECK(spans == 3);
  CHECK(lanes == std::set<std::string>{"cpu:0 compute", "cpu:1 comm", "host"});
  bool forward_timed = false;
  for (const TraceSpan& s : t.spans())
    if (s.name == "forward") forward_timed = s.end_us - s.begin_us >= 1000;
  CHECK(forward_timed);  // the span covers the stream's real execution
  t.clear();
}

TEST_CASE("nothing is recorded while disabled and write() reports a bad path") {
  Trace& t = Trace::global();
  t.clear();
  t.set_enabled(false);
  { TraceScope h("host", "ignored"); }
  CHECK(t.spans().empty());
  CHECK_THROWS_AS(t.write("/nonexistent-dir/trace.json"), Error);
  auto path = std::filesystem::temp_directory_path() / "fanout-test-trace.json";
  t.write(path.string());
  std::ifstream in(path);
  CHECK(nlohmann::json::parse(in).contains("traceEvents"));
  std::filesystem::remove(path);
}

TEST_CASE("write() refuses a FIFO, device, symlink or directory and leaves it as it was") {
  test::TempDir dir("fanout-trace");
  for (const test::FileNode& node : test::make_file_nodes(dir.path)) {
    CAPTURE(node.kind);
    const std::string before = test::file_node_identity(node.path);
    const std::string err = test::error_of([&] { Trace::global().write(node.path); });
    CHECK(err.find("--trace " + node.path + ": is " + node.kind) != std::string::npos);
    CHECK(test::file_node_identity(node.path) == before);
  }
  CHECK(test::temp_leftovers(dir.path).empty());
}

TEST_CASE("write() on a full disk throws and leaves neither a partial trace nor a temporary") {
  Trace& t = Trace::global();
  t.clear();
  t.set_enabled(true);
  for (int i = 0; i < 100; ++i) t.add("host", "span", i, i + 1);  // well over 512 bytes
  t.set_enabled(false);
  test::TempDir dir("fanout-trace");
  std::string err;
  {
    test::FileSizeLimit limit(512);
    err = test::error_of([&] { t.write(dir / "trace.json"); });
  }
  t.clear();
  CHECK(err.find(dir / "trace.json") != std::string::npos);
  CHECK(err.find(std::strerror(EFBIG)) != std::string::npos);
  CHECK(!std::filesystem::exists(dir / "trace.json"));
  CHECK(test::temp_leftovers(dir.path).empty());
}
