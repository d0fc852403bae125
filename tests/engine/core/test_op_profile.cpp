// The op profile (engine/core/op_profile.h) on CPU streams: spans time what the
// stream runs between a scope's open and close, by class; stop waits for spans
// still queued; nothing is timed while the profile is off; streams on several
// threads add up.

#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "engine/core/op_profile.h"

using namespace fanout;

namespace {
void sleep_on(Stream& s, int ms) {
  s.enqueue([ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
}
}  // namespace

TEST_CASE("op profile: each class gets the time its ops ran on the stream, even still queued") {
  Stream s(cpu_device(0), "cpu:0 compute");
  op_profile_start();
  CHECK(op_profile_enabled());
  {
    OpScope scope(s, OpClass::gemm, "matmul_forward");
    sleep_on(s, 40);
  }
  sleep_on(s, 30);  // outside every scope: not counted
  {
    OpScope scope(s, OpClass::elementwise, "rmsnorm_forward");
    sleep_on(s, 20);
  }
  // No synchronize: stop waits for the queued spans.
  OpTimes t = op_profile_stop();
  CHECK_FALSE(op_profile_enabled());
  CHECK(t.ops == 2);
  CHECK(t.of(OpClass::gemm) >= 0.039);
  CHECK(t.of(OpClass::gemm) < 0.069);  // not the 30 ms between the scopes
  CHECK(t.of(OpClass::elementwise) >= 0.019);
  CHECK(t.of(OpClass::elementwise) < 0.049);
  CHECK(t.of(OpClass::attention) == 0);
  CHECK(t.total() == doctest::Approx(t.of(OpClass::gemm) + t.of(OpClass::elementwise)));
  s.synchronize();
}

TEST_CASE("op profile: each op's time and count by name, the longest first") {
  Stream s(cpu_device(0), "cpu:0 compute");
  op_profile_start();
  for (int i = 0; i < 3; ++i) {
    OpScope scope(s, OpClass::elementwise, "swiglu_forward");
    sleep_on(s, 5);
  }
  {
    OpScope scope(s, OpClass::gemm, "matmul_backward");
    sleep_on(s, 40);
  }
  {
    OpScope scope(s, OpClass::elementwise, "rope_forward");
    sleep_on(s, 1);
  }
  OpTimes t = op_profile_stop();
  REQUIRE(t.by_op.size() == 3);
  CHECK(t.by_op[0].name == "matmul_backward");
  CHECK(t.by_op[0].cls == OpClass::gemm);
  CHECK(t.by_op[0].count == 1);
  CHECK(t.by_op[1].name == "swiglu_forward");
  CHECK(t.by_op[1].count == 3);
  CHECK(t.by_op[1].seconds >= 0.014);
  CHECK(t.by_op[2].name == "rope_forward");
  double sum = 0;
  for (const OpTime& o : t.by_op) sum += o.seconds;
  CHECK(sum == doctest::Approx(t.total()));
  s.synchronize();
}

TEST_CASE("op profile: off, scopes time nothing, a new profile starts from zero") {
  Stream s(cpu_device(0), "cpu:0 compute");
  {
    OpScope scope(s, OpClass::loss, "cross_entropy_forward");
    sleep_on(s, 5);
  }
  op_profile_start();
  OpTimes t = op_profile_stop();
  CHECK(t.ops == 0);
  CHECK(t.total() == 0);
  s.synchronize();
}

TEST_CASE("op profile: spans on streams of several threads add up") {
  Stream a(cpu_device(0), "cpu:0 compute"), b(cpu_device(1), "cpu:1 compute");
  op_profile_start();
  std::thread other([&] {
    OpScope scope(b, OpClass::optimizer, "adamw_update");
    sleep_on(b, 20);
  });
  {
    OpScope scope(a, OpClass::optimizer, "adamw_update");
    sleep_on(a, 20);
  }
  other.join();
  OpTimes t = op_profile_stop();
  CHECK(t.ops == 2);
  CHECK(t.of(OpClass::optimizer) >= 0.039);  // device time: both streams' 20 ms
  REQUIRE(t.by_op.size() == 1);              // one op, on two streams
  CHECK(t.by_op[0].count == 2);
  CHECK(t.by_op[0].seconds == t.of(OpClass::optimizer));
  a.synchronize();
  b.synchronize();
}

TEST_CASE("op class names are the ones the bench prints") {
  CHECK(std::string(op_class_name(OpClass::gemm)) == "GEMM");
  CHECK(std::string(op_class_name(OpClass::elementwise)) == "element-wise");
  CHECK(std::string(op_class_name(OpClass::optimizer)) == "optimizer");
}
