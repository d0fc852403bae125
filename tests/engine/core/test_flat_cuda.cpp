// GPU: the flat-buffer kernels agree exactly with the CPU versions.

#include <doctest/doctest.h>

#include <cstring>

#include "engine/core/flat.h"

using namespace fanout;

TEST_CASE("flat fill add and scale on cuda:0 equal the CPU results") {
  Stream gpu(cuda_device(0), "cuda:0 compute");
  for (int64_t n : {1, 255, 257, 1000003}) {
    CAPTURE(n);
    std::vector<float> a(n), b(n);
    for (int64_t i = 0; i < n; ++i)
      a[i] = static_cast<float>(i % 13), b[i] = static_cast<float>(i % 5);
    Tensor ta = tensor_from_vector(gpu, a, {n}, DType::f32, cuda_device(0));
    Tensor tb = tensor_from_vector(gpu, b, {n}, DType::f32, cuda_device(0));
    flat_add(gpu, ta, tb);
    flat_scale(gpu, ta, 2.0f);
    auto out = tensor_to_vector<float>(gpu, ta);
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) ok &= out[i] == 2.0f * (a[i] + b[i]);
    CHECK(ok);
    flat_fill(gpu, tb, 1.5f);
    auto filled = tensor_to_vector<float>(gpu, tb);
    CHECK(filled[n - 1] == 1.5f);
  }
}

TEST_CASE("copies between cpu and cuda devices round-trip") {
  Stream gpu(cuda_device(0), "cuda:0 compute");
  std::vector<float> v(1001);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f;
  Tensor host = tensor_from_vector(gpu, v, {1001}, DType::f32, cpu_device(0));
  Tensor dev = Tensor::empty({1001}, DType::f32, cuda_device(0));
  Tensor back = Tensor::empty({1001}, DType::f32, cpu_device(0));
  tensor_copy(gpu, dev, host);
  tensor_copy(gpu, back, dev);
  gpu.synchronize();
  CHECK(std::memcmp(back.raw(), v.data(), v.size() * 4) == 0);
}
