// GPU: a small LlamaModel on cuda:0 against the same model on cpu:0 (same
// init_random seed): logits, loss sum and count, and every parameter's gradient
// through backward_from_loss, untied and tied.

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>

#include "models/llama_model.h"
#include "tests/ops/op_test_util.h"

using namespace fanout;
using namespace fanout::models;

namespace {
LlamaConfig cuda_test_config(bool tied) {
  LlamaConfig c = llama_preset("tiny");
  c.num_hidden_layers = 2;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  return c;
}

// (B, T) inputs and targets; the last 3 targets of row 0 are ignored.
struct CudaTestBatch {
  int64_t B, T;
  std::vector<int32_t> inputs, targets;
  CudaTestBatch(int64_t B_, int64_t T_, int64_t vocab) : B(B_), T(T_) {
    std::mt19937_64 rng(23);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab) - 1);
    for (int64_t i = 0; i < B * T; ++i) {
      inputs.push_back(tok(rng));
      targets.push_back(i >= T - 3 && i < T ? kIgnoreIndex : tok(rng));
    }
  }
  Tensor upload(LlamaModel& m, const std::vector<int32_t>& v) const {
    return tensor_from_vector(m.compute_stream(), v, {B, T}, DType::i32, m.device());
  }
};

std::vector<float> stats_of(LlamaModel& m, const CudaTestBatch& b) {
  Tensor stats = Tensor::empty({2}, DType::f32, m.device());
  m.forward_loss(b.upload(m, b.inputs), b.upload(m, b.targets), stats, kIgnoreIndex);
  return tensor_to_vector<float>(m.compute_stream(), stats);
}

double rel_l2_of(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
}  // namespace

TEST_CASE("LlamaModel on cuda:0 gives the CPU's logits, loss and gradients") {
  for (bool tied : {false, true}) {
    for (auto [B, T] : {std::pair<int64_t, int64_t>{2, 9}, {3, 40}}) {
      CAPTURE(tied);
      CAPTURE(B);
      CAPTURE(T);
      LlamaModel gpu(cuda_test_config(tied), cuda_device(0));
      LlamaModel cpu(cuda_test_config(tied), cpu_device(0));
      gpu.init_random(5);
      cpu.init_random(5);
      CHECK(tensor_to_vector<float>(gpu.compute_stream(), gpu.params()) ==
            tensor_to_vector<float>(cpu.compute_stream(), cpu.params()));
      CudaTestBatch b(B, T, cpu.config().vocab_size);

      auto logits_gpu = tensor_to_vector<float>(gpu.compute_stream(),
                                                gpu.forward_logits(b.upload(gpu, b.inputs)));
      auto logits_cpu = tensor_to_vector<float>(cpu.compute_stream(),
                                                cpu.forward_logits(b.upload(cpu, b.inputs)));
      std::string why;
      CHECK_MESSAGE(test::all_close(test::cast_vector<double>(logits_gpu),
                                    test::cast_vector<double>(logits_cpu), 1e-4, 1e-5, &why),
                    why);

      auto st_gpu = stats_of(gpu, b);
      auto st_cpu = stats_of(cpu, b);
      CHECK(st_gpu[1] == st_cpu[1]);
      CHECK(st_cpu[1] == B * T - 3);
      CHECK(std::abs(st_gpu[0] - st_cpu[0]) <= 1e-5 * std::abs(st_cpu[0]));

      gpu.backward_from_loss(st_cpu[1]);
      cpu.backward_from_loss(st_cpu[1]);
      auto g_gpu = tensor_to_vector<float>(gpu.compute_stream(), gpu.grads());
      auto g_cpu = tensor_to_vector<float>(cpu.compute_stream(), cpu.grads());
      for (const ParamInfo& p : cpu.layout().params()) {
        CAPTURE(p.name);
        const float* ref = g_cpu.data() + p.offset;
        CHECK(std::any_of(ref, ref + p.numel, [](float g) { return g != 0.0f; }));
        CHECK(rel_l2_of(g_gpu.data() + p.offset, ref, p.numel) < 1e-4);
      }
    }
  }
}
