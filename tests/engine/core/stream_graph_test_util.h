#pragma once
// What the stream-graph tests share (Note [Stream graphs]).

#include <string>

#include "engine/core/check.h"
#include "engine/core/stream.h"

namespace fanout::test {

// end_capture's error message ("" if it returned a graph).
inline std::string end_failure(Stream& s) {
  try {
    s.end_capture();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace fanout::test
