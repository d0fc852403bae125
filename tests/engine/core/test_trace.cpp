// The trace recorder writes valid Chrome/Perfetto JSON: one named lane per
// stream, complete ("X") events with non-negative durations.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/core/check.h"
#include "engine/core/stream.h"
#include "engine/core/trace.h"

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
