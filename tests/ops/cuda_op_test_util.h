#pragma once
// Helpers for the GPU op tests (tests/ops/test_*_cuda.cpp): a cpu:0 and a cuda:0
// stream side by side, the same values uploaded to both, and the check that a
// cuda result is within atol + rtol*|ref| of the CPU dispatcher's result.
// Inline only: it is included by the doctest files of the GPU suite alone.

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/ops/op_test_util.h"

namespace fanout::test {

struct CpuAndCuda {
  Stream cpu{cpu_device(0), "cpu:0 compute"};
  Stream gpu{cuda_device(0), "cuda:0 compute"};
};

// One tensor with the same contents on cpu:0 and cuda:0.
struct TensorPair {
  Tensor cpu, gpu;
};

inline TensorPair f32_pair(CpuAndCuda& s, const std::vector<double>& values, Shape shape) {
  return {f32_tensor(s.cpu, values, shape), f32_tensor(s.gpu, values, shape)};
}

inline TensorPair i32_pair(CpuAndCuda& s, const std::vector<int32_t>& values, Shape shape) {
  return {tensor_from_vector(s.cpu, values, shape, DType::i32, s.cpu.device()),
          tensor_from_vector(s.gpu, values, shape, DType::i32, s.gpu.device())};
}

// Uniform integers in [lo, hi] from a fixed seed.
inline std::vector<int32_t> random_ids(size_t n, uint64_t seed, int32_t lo, int32_t hi) {
  std::vector<double> u = random_vector(n, seed, 0.0, 1.0);
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; ++i)
    ids[i] = lo + static_cast<int32_t>(u[i] * (static_cast<double>(hi) - lo + 1));
  for (int32_t& id : ids) id = id > hi ? hi : id;
  return ids;
}

// CHECKs the cuda tensor against the cpu one, element-wise, and unless told
// otherwise that the reference is not all zeros (comparing zeros proves nothing).
inline void check_cuda_matches_cpu(CpuAndCuda& s, const TensorPair& t, double rtol, double atol,
                                   const char* what, bool expect_nonzero = true) {
  CAPTURE(what);
  std::vector<double> ref = f32_values(s.cpu, t.cpu);
  std::vector<double> got = f32_values(s.gpu, t.gpu);
  if (expect_nonzero) CHECK(max_abs(ref) > 0);
  std::string why;
  CHECK_MESSAGE(all_close(got, ref, rtol, atol, &why), why);
}

// The same, bit for bit (for ops whose arithmetic is one rounding per element).
inline void check_cuda_equals_cpu(CpuAndCuda& s, const TensorPair& t, const char* what) {
  CAPTURE(what);
  std::vector<float> ref = tensor_to_vector<float>(s.cpu, t.cpu);
  std::vector<float> got = tensor_to_vector<float>(s.gpu, t.gpu);
  CHECK(max_abs(cast_vector<double>(ref)) > 0);
  CHECK(got == ref);
}

}  // namespace fanout::test
