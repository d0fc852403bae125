// GPU: the element-wise ops refuse bf16 tensors on cuda:0 with the one message of
// the bf16 contract (the bf16 CUDA kernels arrive with the CUDA issue [3/6]), and
// their f32 paths still run.

#include <doctest/doctest.h>

#include <string>

#include "engine/core/check.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "tests/ops/cuda_op_test_util.h"

using namespace fanout;
using namespace fanout::test;

namespace {
// The message of the fanout::Error that fn throws, or "" if it throws none.
template <typename Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
const char kRefusal[] = "bf16 on CUDA devices arrives with the CUDA issue [3/6]";
}  // namespace

TEST_CASE("element-wise ops on cuda:0 refuse bf16 tensors with the contract's message") {
  Stream s(cuda_device(0), "cuda:0 compute");
  const int64_t N = 2, C = 4, V = 3;
  auto dev = cuda_device(0);
  Tensor f = Tensor::empty({N, C}, DType::f32, dev), b = Tensor::empty({N, C}, DType::bf16, dev);
  Tensor r = Tensor::empty({N}, DType::f32, dev);
  Tensor w = Tensor::empty({C}, DType::f32, dev), wb = Tensor::empty({C}, DType::bf16, dev);
  Tensor ids = Tensor::empty({N}, DType::i32, dev);
  Tensor t16 = Tensor::empty({V, C}, DType::bf16, dev);
  Tensor l = Tensor::empty({N, V}, DType::f32, dev), l16 = Tensor::empty({N, V}, DType::bf16, dev);
  const std::string msgs[] = {
      error_message([&] { ops::rmsnorm_forward(s, b, r, f, w, N, C, 1e-5f); }),
      error_message([&] { ops::rmsnorm_forward(s, f, r, f, wb, N, C, 1e-5f); }),
      error_message([&] { ops::rmsnorm_backward(s, f, w, f, f, wb, r, N, C); }),
      error_message([&] { ops::rope_forward(s, b, b, 1, N, 1, C, 1e4, 0); }),
      error_message([&] { ops::rope_backward(s, b, b, 1, N, 1, C, 1e4, 0); }),
      error_message([&] { ops::swiglu_forward(s, b, b, b, N * C); }),
      error_message([&] { ops::swiglu_backward(s, b, b, f, b, b, N * C); }),
      error_message([&] { ops::swiglu_backward(s, f, f, b, f, f, N * C); }),
      error_message([&] { ops::embedding_forward(s, f, ids, t16, N, C, V); }),
      error_message([&] { ops::cross_entropy_backward(s, l16, l, ids, N, V, -100, 1.0f); }),
  };
  for (const std::string& m : msgs) {
    CAPTURE(m);
    CHECK(m.find(kRefusal) != std::string::npos);
  }
  s.synchronize();
}
