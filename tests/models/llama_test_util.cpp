#include "tests/models/llama_test_util.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

#include "engine/core/tensor.h"
#include "tests/paths_util.h"

namespace fanout::test {

void init_scaled(models::LlamaModel& m, uint64_t seed, float scale) {
  m.init_random(seed);
  std::vector<float> host = tensor_to_vector<float>(m.compute_stream(), m.params());
  for (const models::ParamInfo& p : m.layout().params()) {
    if (p.shape.size() < 2) continue;
    for (int64_t i = 0; i < p.numel; ++i) host[p.offset + i] *= scale;
  }
  tensor_upload(m.compute_stream(), m.params(), host.data());
  m.params_to_working(0, m.params().numel());
}

std::string run_reference_script(const std::string& script, const std::string& args,
                                 const std::string& dir) {
  std::string log = dir + "/ref.log";
  std::string cmd =
      reference_python() + " " + reference_script(script) + " " + args + " >" + log + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO("reference: " << script << " " << args << "\n" << out);
  REQUIRE(rc == 0);
  return out;
}

}  // namespace fanout::test
