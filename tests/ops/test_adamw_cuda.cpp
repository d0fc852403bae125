// GPU: AdamW on cuda:0 against the CPU dispatcher over several steps, with and
// without weight decay and with a clipping scale. Neither side contracts into
// FMAs (the kernel's _rn intrinsics; ops/CMakeLists.txt for the CPU loop), so the
// bits are equal.

#include <doctest/doctest.h>

#include "ops/adamw.h"
#include "tests/ops/cuda_op_test_util.h"

using namespace fanout;
using namespace fanout::test;

TEST_CASE("adamw on cuda:0 matches the CPU over ten steps") {
  CpuAndCuda s;
  for (int64_t n : {1, 1000, 100003}) {
    for (float wd : {0.0f, 0.1f}) {
      CAPTURE(n);
      CAPTURE(wd);
      ops::AdamWConfig config;
      config.lr = 1e-2f, config.weight_decay = wd, config.beta2 = 0.95f;
      TensorPair p = f32_pair(s, random_vector(n, 1), {n});
      TensorPair m = f32_pair(s, std::vector<double>(n, 0.0), {n});
      TensorPair v = f32_pair(s, std::vector<double>(n, 0.0), {n});
      for (int64_t step = 1; step <= 10; ++step) {
        TensorPair g = f32_pair(s, random_vector(n, 100 + step, -3, 3), {n});
        const float scale = step % 2 ? 1.0f : 0.37f;
        ops::adamw_update(s.cpu, p.cpu, g.cpu, m.cpu, v.cpu, n, config, step, scale);
        ops::adamw_update(s.gpu, p.gpu, g.gpu, m.gpu, v.gpu, n, config, step, scale);
      }
      check_cuda_matches_cpu(s, p, 1e-6, 1e-7, "params");
      check_cuda_matches_cpu(s, m, 1e-6, 1e-7, "m");
      check_cuda_matches_cpu(s, v, 1e-6, 1e-9, "v");
      CHECK(tensor_to_vector<float>(s.gpu, p.gpu) == tensor_to_vector<float>(s.cpu, p.cpu));
      CHECK(tensor_to_vector<float>(s.gpu, m.gpu) == tensor_to_vector<float>(s.cpu, m.cpu));
      CHECK(tensor_to_vector<float>(s.gpu, v.gpu) == tensor_to_vector<float>(s.cpu, v.cpu));
    }
  }
}
