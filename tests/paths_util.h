#pragma once
// Where the tests find the fanout binary, the PyTorch reference scripts and the
// python that runs them. The defaults are baked in at compile time (this build's
// binary, the source tree's tests/reference, Debian's /usr/bin/python3); on another
// machine (a GPU bundle, docs/gpu.md) FANOUT_BINARY, FANOUT_REFERENCE_DIR and
// FANOUT_PYTHON override them. Inline only: both test binaries include it.

#include <cstdlib>
#include <string>

namespace fanout::test {

// $NAME when set and non-empty, else `fallback`.
inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

// The fanout binary the CLI tests run.
inline std::string fanout_binary() {
  return env_or("FANOUT_BINARY", FANOUT_BINARY);
}

// The folder of the reference scripts (llama_ref.py, ...).
inline std::string reference_dir() {
  return env_or("FANOUT_REFERENCE_DIR", std::string(FANOUT_SOURCE_DIR) + "/tests/reference");
}

// reference_dir()/<script>.
inline std::string reference_script(const std::string& script) {
  return reference_dir() + "/" + script;
}

// The python with torch that runs the reference scripts.
inline std::string reference_python() {
  return env_or("FANOUT_PYTHON", "/usr/bin/python3");
}

}  // namespace fanout::test
