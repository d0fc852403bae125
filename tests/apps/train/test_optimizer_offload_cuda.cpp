// GPU: --offload optimizer (Note [Optimizer offload], apps/train/optimizer.cpp) on
// one GPU, 2 replicas on "cuda:0,cuda:0" under dp and zero1-3, fp32 and bf16: the
// gradient norms, the weights after every step and AdamW's m and v equal the run
// with AdamW on the device bit for bit -- the host's kernel (ops/cpu/adamw.cpp)
// and ops/cuda/adamw.cu derive the same float scalars in double and round every
// operation alike, with no FMA on either side (test_adamw_cuda.cpp checks the
// kernels' bits) -- with a shard in one chunk or many (copies awaited by their
// events on the CUDA streams); m and v in host memory, the norm scratch alone on
// the device.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "apps/train/training.h"
#include "engine/core/allocator.h"
#include "tests/apps/train/offload_util.h"

using namespace fanout;
using namespace fanout::test::offload;
using parallel::Strategy;

namespace {

// Floats in an order where neighbours differ by 1 (-0 and +0 the same).
int64_t ordered(float f) {
  const int32_t i = std::bit_cast<int32_t>(f);
  return i < 0 ? int64_t{INT32_MIN} - i : i;
}

// Empty when `got` holds the bits of `want`; else how many elements differ, and
// the largest difference in ulps and in absolute value, for the message.
std::string bits_diff(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return std::to_string(got.size()) + " values, want " + std::to_string(want.size());
  int64_t differ = 0, max_ulps = 0;
  double max_abs = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want[i])) continue;
    ++differ;
    const int64_t ulps = std::abs(ordered(got[i]) - ordered(want[i]));
    if (ulps > max_ulps) max_ulps = ulps, at = i;
    max_abs = std::max(max_abs, std::abs(static_cast<double>(got[i]) - want[i]));
  }
  if (differ == 0) return "";
  std::ostringstream os;
  os.precision(9);
  os << differ << " of " << got.size() << " differ, the most by " << max_ulps << " ulps (at " << at
     << ": " << got[at] << " vs " << want[at] << "), max |diff| " << max_abs;
  return os.str();
}

// The tolerance is none: the kernels give the same bits, and one ulp apart at
// step 1 would outgrow any tight tolerance by step 3 (the next forward and
// backward carry it into every gradient; where a gradient is near zero, Adam's
// update of that weight changes by a large fraction).
void check_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                     const char* what) {
  const std::string diff = bits_diff(got, want);
  const std::string message = std::string(what) + ": " + diff;
  CHECK_MESSAGE(diff.empty(), message);
}

Run on_gpu(Strategy strategy, DType working, bool offload) {
  return {strategy, 2, working, offload, DeviceKind::cuda};
}

}  // namespace

TEST_CASE(
    "offloaded AdamW on cuda:0,cuda:0 gives the CUDA AdamW's bits (dp, zero1-3, fp32, bf16)") {
  const Batch batch;
  const std::vector<float> init = models::LlamaModel::random_params(tiny_config(), kSeed);
  for (DType working : {DType::f32, DType::bf16}) {
    for (Strategy strategy : kStrategies) {
      CAPTURE(std::string(dtype_name(working)));
      CAPTURE(std::string(strategy_name(strategy)));
      const Steps ref = run_steps(on_gpu(strategy, working, false), batch, 3);
      const Steps off = run_steps(on_gpu(strategy, working, true), batch, 3);
      for (size_t s = 0; s < ref.norms.size(); ++s) {
        CAPTURE(s + 1);
        CHECK(ref.norms[s] > 0);
        CHECK(off.norms[s] == ref.norms[s]);
        CHECK_FALSE(same_bits(ref.params[s], init));  // the step moved the weights
        check_same_bits(off.params[s], ref.params[s], "weights");
      }
      check_same_bits(off.state.m, ref.state.m, "m");
      check_same_bits(off.state.v, ref.state.v, "v");
      CHECK_FALSE(same_bits(ref.state.v, std::vector<float>(ref.state.v.size(), 0.0f)));
    }
  }
}

TEST_CASE("an offloaded shard updated in many chunks on cuda:0 gives the same bits") {
  const Batch batch;
  for (DType working : {DType::f32, DType::bf16}) {
    for (Strategy strategy : kStrategies) {
      CAPTURE(std::string(dtype_name(working)));
      CAPTURE(std::string(strategy_name(strategy)));
      auto ref = make_training(on_gpu(strategy, working, false));
      // The same engine under an offloaded optimizer of 777-element chunks: up to
      // 30 copies a shard, each with its event on the shard's stream, the last short
      // and none 16-byte aligned past the first.
      auto eng = make_training(on_gpu(strategy, working, false));
      train::Optimizer off(eng->engine(), train::decay_runs(eng->layout()), eng->options().adam,
                           train::OptimizerOffload{true, 777});
      for (int64_t step = 1; step <= 3; ++step) {
        CAPTURE(step);
        const double norm_ref = train_step(*ref, batch, step);
        gradients(*eng, batch);
        CHECK(off.step(step, 1e-2f, 1.0) == norm_ref);
        check_same_bits(eng->params_to_host(), ref->params_to_host(), "weights");
      }
      const State s_ref = state_of(ref->optimizer()), s_off = state_of(off);
      check_same_bits(s_off.m, s_ref.m, "m");
      check_same_bits(s_off.v, s_ref.v, "v");
    }
  }
}

TEST_CASE("offloaded AdamW state on cuda:0 lives in host memory, the norm scratch on the GPU") {
  const Batch batch;
  Allocator& gpu = allocator_for(cuda_device(0));
  for (DType working : {DType::f32, DType::bf16}) {
    for (Strategy strategy : kStrategies) {
      for (bool offload : {false, true}) {
        CAPTURE(std::string(dtype_name(working)));
        CAPTURE(std::string(strategy_name(strategy)));
        CAPTURE(offload);
        const size_t gpu_opt0 = live(gpu, MemTag::optimizer);
        const HostLive host0 = host_live();
        {
          auto t = make_training(on_gpu(strategy, working, offload));
          CHECK(t->optimizer().offloaded() == offload);
          const int64_t P = t->layout().total();
          // Lazy: nothing before the first step (Note [Lazy optimizer state]).
          CHECK(live(gpu, MemTag::optimizer) == gpu_opt0);
          CHECK(host_live().optimizer == host0.optimizer);
          train_step(*t, batch, 1);
          // Both replicas' shards on the one GPU: a norm scratch float each, and
          // without offload their m and v.
          size_t elems = 0, shards = 0;
          for (const parallel::DataParallel::Shard& sh : t->engine().shards()) {
            elems += static_cast<size_t>(sh.end - sh.begin);
            shards += 1;
          }
          CHECK(elems == static_cast<size_t>(P));
          const size_t norms = sizeof(float) * shards;
          CHECK(live(gpu, MemTag::optimizer) - gpu_opt0 ==
                (offload ? norms : norms + 2 * sizeof(float) * elems));
          check_host_holds(host0, offload, P);
        }
        // All given back with the run.
        CHECK(live(gpu, MemTag::optimizer) == gpu_opt0);
        check_host_back(host0);
      }
    }
  }
}
