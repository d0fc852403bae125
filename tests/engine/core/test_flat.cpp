// Flat-buffer fill / add / scale on CPU devices, exact on small integers, sizes
// around the parallel grain.

#include <doctest/doctest.h>

#include "engine/core/flat.h"

using namespace fanout;

TEST_CASE("flat fill add and scale are exact on small integers") {
  Stream s(cpu_device(0), "cpu:0 compute");
  for (int64_t n : {1, 7, 65536, 65537, 300001}) {
    CAPTURE(n);
    std::vector<float> a(n), b(n);
    for (int64_t i = 0; i < n; ++i)
      a[i] = static_cast<float>(i % 13), b[i] = static_cast<float>(i % 5);
    Tensor ta = tensor_from_vector(s, a, {n}, DType::f32, cpu_device(0));
    Tensor tb = tensor_from_vector(s, b, {n}, DType::f32, cpu_device(0));
    flat_add(s, ta, tb);
    flat_scale(s, ta, 2.0f);
    auto out = tensor_to_vector<float>(s, ta);
    bool ok = true;
    for (int64_t i = 0; i < n; ++i) ok &= out[i] == 2.0f * (a[i] + b[i]);
    CHECK(ok);
    flat_fill(s, tb, -3.0f);
    auto filled = tensor_to_vector<float>(s, tb);
    CHECK(std::all_of(filled.begin(), filled.end(), [](float v) { return v == -3.0f; }));
  }
}
