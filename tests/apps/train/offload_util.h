#pragma once
// The runs the --offload optimizer tests compare (Note [Optimizer offload],
// apps/train/optimizer.cpp), on CPU devices and on one GPU: a tiny Llama, one
// fixed batch, a fanout::train::Training built from a few settings and stepped,
// and what the tests compare between runs with and without offload (the weights,
// AdamW's m and v, the bytes live under a tag).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "apps/train/training.h"
#include "engine/core/allocator.h"

namespace fanout::test::offload {

models::LlamaConfig tiny_config();
// The seed of every run's initial weights.
inline constexpr uint64_t kSeed = 5;

// 6 rows of 16 tokens, targets the next token; the last 3 of row 1 ignored.
struct Batch {
  static constexpr int64_t B = 6, T = 16;
  std::vector<int32_t> inputs, targets;
  int64_t counted = 0;
  Batch();
  parallel::HostBatch host() const { return {B, T, inputs.data(), targets.data()}; }
};

struct Run {
  parallel::Strategy strategy = parallel::Strategy::dp;
  int devices = 2;  // replicas
  DType working = DType::f32;
  bool offload = false;
  // cpu: the replicas on cpu:0, cpu:1, ...; cuda: all of them on cuda:0.
  DeviceKind kind = DeviceKind::cpu;
};

inline constexpr parallel::Strategy kStrategies[] = {
    parallel::Strategy::dp, parallel::Strategy::zero1, parallel::Strategy::zero2,
    parallel::Strategy::zero3};

// AdamW at lr 1e-2 with weight decay 0.1 (decayed and undecayed runs differ).
train::TrainingOptions options_for(const Run& r);
// Weights from kSeed, or `values` (the whole fp32 buffer) when given.
std::unique_ptr<train::Training> make_training(const Run& r, const float* values = nullptr);

// Forward, backward and the reduction; the optimizer is the caller's.
void gradients(train::Training& t, const Batch& b);
// A whole step at lr 1e-2, clipped to 1.0; the pre-clip gradient norm.
double train_step(train::Training& t, const Batch& b, int64_t step);

bool same_bits(const std::vector<float>& a, const std::vector<float>& b);

// AdamW's state in flat layout order.
struct State {
  std::vector<float> m, v;
};
State state_of(train::Optimizer& opt);

// `steps` steps of the same batch from step 1: each step's gradient norm and the
// weights after it, and AdamW's state after the last.
struct Steps {
  std::vector<double> norms;
  std::vector<std::vector<float>> params;
  State state;
};
Steps run_steps(const Run& r, const Batch& b, int steps);

// Bytes of `tag` live on `a`.
size_t live(Allocator& a, MemTag tag);

// The host allocator's live bytes of the tags an offloaded optimizer uses.
struct HostLive {
  size_t optimizer = 0, params = 0, grads = 0;
};
HostLive host_live();
// CHECKs against `before`: offloaded, the host holds m and v, the fp32 master and
// the gradients' landing buffer of P parameters on top; otherwise nothing more.
void check_host_holds(const HostLive& before, bool offload, int64_t P);
// CHECKs: every byte given back.
void check_host_back(const HostLive& before);

}  // namespace fanout::test::offload
