#pragma once
// Device time by kernel class and by op over a profiled stretch of work (`fanout
// bench --kernels`): each op dispatcher opens an OpScope naming its class and
// itself; while a profile is on, the scope brackets the op's work on its stream
// (CUDA: a pair of timing events; CPU: markers that read the clock when the
// stream's worker reaches them) and op_profile_stop sums the spans per class and
// per op once they have run. Off, a scope costs one atomic load.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/stream.h"

namespace fanout {

enum class OpClass { gemm, attention, loss, elementwise, optimizer };
constexpr int kNumOpClasses = 5;
// "GEMM", "attention", "loss", "element-wise", "optimizer".
const char* op_class_name(OpClass c);

// One op's share of a profile: its scopes' device time and how many there were.
struct OpTime {
  std::string name;
  OpClass cls = OpClass::gemm;
  double seconds = 0;
  int64_t count = 0;
};

struct OpTimes {
  std::array<double, kNumOpClasses> seconds{};  // by OpClass
  int64_t ops = 0;                              // scopes timed
  std::vector<OpTime> by_op;                    // by name, the longest first
  double of(OpClass c) const { return seconds[static_cast<int>(c)]; }
  double total() const;
};

// Clears the spans and starts timing every OpScope, on every stream, from any thread.
void op_profile_start();
// Stops timing, waits until every timed span has run on its stream, and sums them.
// Spans of different streams add up (device time, not wall time).
OpTimes op_profile_stop();
bool op_profile_enabled();

class OpScope {
 public:
  // op: the dispatcher's name, a string that outlives the profile (a literal).
  OpScope(Stream& stream, OpClass c, const char* op);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  Stream* stream_ = nullptr;  // null: not timing
  int span_ = -1;
};

}  // namespace fanout
