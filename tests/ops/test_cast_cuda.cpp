// GPU: fp32 <-> bf16 casts on cuda:0 give the CPU's bits for random bit
// patterns (NaNs with payloads, infinities, denormals, rounding ties included).

#include <doctest/doctest.h>

#include <bit>
#include <random>

#include "ops/cast.h"
#include "tests/ops/cuda_op_test_util.h"

using namespace fanout;
using namespace fanout::test;

TEST_CASE("casts between f32 and bf16 on cuda:0 give the CPU's bits") {
  CpuAndCuda s;
  for (int64_t n : {1, 255, 1000003}) {
    CAPTURE(n);
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::vector<float> f(n);
    std::vector<uint16_t> h(n);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t u = rng();
      if (i % 4 == 1) u = (u & 0xffff0000u) | 0x8000u;  // an exact tie
      f[i] = std::bit_cast<float>(u);
      h[i] = static_cast<uint16_t>(rng());
    }
    const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 3.0e38f, 1.0e-45f};
    for (int64_t i = 0; i < n && i < 6; ++i) f[i] = specials[i];

    auto to_bf16 = [&](Stream& st) {
      Tensor src = tensor_from_vector(st, f, {n}, DType::f32, st.device());
      Tensor dst = Tensor::empty({n}, DType::bf16, st.device());
      ops::cast_f32_to_bf16(st, dst, src, n);
      return tensor_to_vector<uint16_t>(st, dst);
    };
    CHECK(to_bf16(s.gpu) == to_bf16(s.cpu));

    auto to_f32 = [&](Stream& st) {
      Tensor src = tensor_from_vector(st, h, {n}, DType::bf16, st.device());
      Tensor dst = Tensor::empty({n}, DType::f32, st.device());
      ops::cast_bf16_to_f32(st, dst, src, n);
      std::vector<float> out = tensor_to_vector<float>(st, dst);
      std::vector<uint32_t> bits(n);
      for (int64_t i = 0; i < n; ++i) bits[i] = std::bit_cast<uint32_t>(out[i]);
      return bits;  // compared as bits: NaN != NaN as floats
    };
    CHECK(to_f32(s.gpu) == to_f32(s.cpu));
  }
}
