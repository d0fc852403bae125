#include "apps/train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "ops/grad_norm.h"

namespace fanout::train {

std::vector<DecayRun> decay_runs(const models::LlamaLayout& layout, int copies) {
  std::vector<DecayRun> runs;
  for (int c = 0; c < copies; ++c) {
    const int64_t base = c * layout.total();
    for (const models::ParamInfo& p : layout.params()) {
      const int64_t at = base + p.offset;
      if (!runs.empty() && runs.back().decay == p.decay && runs.back().end == at) {
        runs.back().end = at + p.numel;
      } else {
        runs.push_back({at, at + p.numel, p.decay});
      }
    }
  }
  return runs;
}

Optimizer::Optimizer(parallel::ShardSet& shards, std::vector<DecayRun> runs,
                     ops::AdamWConfig config)
    : set_(shards), runs_(std::move(runs)), config_(config) {}

Optimizer::Optimizer(parallel::DataParallel& dp, std::vector<DecayRun> runs,
                     ops::AdamWConfig config)
    : owned_(parallel::data_parallel_shards(dp)),
      set_(*owned_),
      runs_(std::move(runs)),
      config_(config) {}

// Note [Lazy optimizer state]: m and v are allocated at the first step (or when
// a checkpoint's state is loaded), as torch.optim.AdamW does, so a run that does
// not fit its devices stops at step 1 -- where PyTorch would -- and a device's
// memory before the first step is what the model alone takes.
void Optimizer::ensure_state() {
  if (!state_.empty()) return;
  const std::vector<parallel::ParamUnit> shards = set_.shards();
  for (int i = 0; i < static_cast<int>(shards.size()); ++i) {
    ShardState s{shards[i].begin, shards[i].end, {}, {}, {}};
    Device d = set_.shard_device(i);
    int64_t n = std::max<int64_t>(s.end - s.begin, 1);
    s.m = Tensor::empty({n}, DType::f32, d, MemTag::optimizer);
    s.v = Tensor::empty({n}, DType::f32, d, MemTag::optimizer);
    s.norm = Tensor::empty({1}, DType::f32, d, MemTag::optimizer);
    Stream& stream = set_.shard_stream(i);
    flat_fill(stream, s.m, 0.0f);
    flat_fill(stream, s.v, 0.0f);
    stream.synchronize();
    state_.push_back(std::move(s));
  }
}

double Optimizer::step(int64_t step, float lr, double clip) {
  ensure_state();
  // The global norm from every shard's sum of squares (the engine adds them up,
  // across processes too).
  const double total = set_.sum_over_shards([&](int i) {
    ShardState& s = state_[i];
    if (s.end <= s.begin) return 0.0;
    Stream& stream = set_.shard_stream(i);
    const Tensor grads = set_.shard_grads(i);
    double sum = 0;
    for (const parallel::ParamUnit& r : set_.shard_counted(i)) {
      if (r.end <= r.begin) continue;
      ops::norm_squared(stream, s.norm, grads.view(r.begin, {r.end - r.begin}), r.end - r.begin);
      sum += static_cast<double>(tensor_to_vector<float>(stream, s.norm)[0]);
    }
    return sum;
  });
  double norm = std::sqrt(total);
  if (!std::isfinite(norm)) return norm;
  float scale = clip > 0 ? ops::clip_coefficient(norm, clip) : 1.0f;
  // bf16: the update writes the working copy in the same pass (one read of the
  // master instead of two), unless some shard has none to write (zero3). The
  // engine then brings the replicas up to date itself.
  set_.update_shards([&](int i) {
    ShardState& s = state_[i];
    Stream& stream = set_.shard_stream(i);
    Tensor params = set_.shard_params(i), grads = set_.shard_grads(i);
    Tensor working = set_.shard_working(i);
    for (const DecayRun& run : runs_) {
      int64_t lo = std::max(run.begin, s.begin), hi = std::min(run.end, s.end);
      if (lo >= hi) continue;
      ops::AdamWConfig c = config_;
      c.lr = lr;
      if (!run.decay) c.weight_decay = 0.0f;
      auto part = [&](const Tensor& t) { return t.view(lo - s.begin, {hi - lo}); };
      ops::adamw_update(stream, part(params), part(grads), part(s.m), part(s.v), hi - lo, c, step,
                        scale, working.defined() ? part(working) : Tensor());
    }
    return working.defined();
  });
  return norm;
}

void Optimizer::state_to_host(std::vector<float>& m, std::vector<float>& v) {
  int64_t P = set_.num_params();
  m.assign(P, 0.0f);
  v.assign(P, 0.0f);
  if (state_.empty()) return;  // no step yet: AdamW's state is zero
  std::vector<Tensor> ms, vs;
  for (ShardState& s : state_) ms.push_back(s.m), vs.push_back(s.v);
  set_.shards_to_host(ms, m.data());
  set_.shards_to_host(vs, v.data());
}

void Optimizer::state_from_host(const std::vector<float>& m, const std::vector<float>& v) {
  int64_t P = set_.num_params();
  FANOUT_CHECK(static_cast<int64_t>(m.size()) == P && static_cast<int64_t>(v.size()) == P,
               "optimizer state holds ", m.size(), " values, the model ", P);
  ensure_state();
  std::vector<Tensor> ms, vs;
  for (ShardState& s : state_) ms.push_back(s.m), vs.push_back(s.v);
  set_.host_to_shards(m.data(), ms);
  set_.host_to_shards(v.data(), vs);
}

}  // namespace fanout::train
