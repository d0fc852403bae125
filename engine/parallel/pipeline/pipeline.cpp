#include "engine/parallel/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>

#include "engine/core/check.h"
#include "engine/core/flat.h"
#include "engine/parallel/collectives/collectives.h"
#include "engine/parallel/pipeline/pipeline_lane.h"

namespace fanout::parallel {

Pipeline::Pipeline(const StageFactory& factory, PipelineOptions options)
    : options_(std::move(options)) {
  const int K = options_.stages, n = static_cast<int>(options_.devices.size());
  FANOUT_CHECK(K >= 1, "--pp must be at least 1, got ", K);
  FANOUT_CHECK(n % K == 0, "--pp ", K, " does not divide the ", n, " devices listed");
  replicas_ = n / K;
  for (const Device& d : options_.devices) {
    FANOUT_CHECK(d.is_cuda() == options_.devices[0].is_cuda(),
                 "a pipeline's devices are all CPU devices or all CUDA devices, got ",
                 devices_str(options_.devices));
  }
  if (options_.micro_batches == 0) options_.micro_batches = 2 * K;
  FANOUT_CHECK(options_.micro_batches >= 1, "--micro-batches must be at least 1, got ",
               options_.micro_batches);
  FANOUT_ASSERT(static_cast<int>(options_.cut.size()) == K + 1 && options_.cut[0] == 0,
                "a stage cut needs ", K + 1, " bounds");
  schedule_ = make_schedule(options_.schedule, K, options_.micro_batches);
  check_schedule(schedule_);
  // Activation slots: the most micro-batches a stage holds at once (each stage
  // runs its list in order, so the simulation's count is the real one).
  for (int in_flight : simulate_schedule(schedule_).peak_in_flight)
    slots_.push_back(std::max(in_flight, 1));
  for (int d = 0; d < replicas_; ++d)
    for (int s = 0; s < K; ++s)
      stages_.push_back(
          factory(options_.devices[index(s, d)], s, d, options_.cut[s], options_.cut[s + 1]));
  for (int s = 0; s < K; ++s) {
    const ParamUnit r = stages_[s]->stage_range();
    FANOUT_ASSERT(r.begin == (s == 0 ? 0 : stages_[s - 1]->stage_range().end) && r.end > r.begin,
                  "stage ", s, "'s range does not follow the one before");
  }
  total_ = stages_[K - 1]->stage_range().end;
  for (int i = 0; i < n; ++i) lanes_.push_back(std::make_unique<Lane>(options_.devices[i]));
  pool_ = std::make_unique<ThreadPool>(options_.devices);
  posted_.assign(static_cast<size_t>(n) * options_.micro_batches * 2, 0);
  if (replicas_ > 1) {
    for (int s = 0; s < K; ++s) {
      std::vector<Device> group;
      for (int d = 0; d < replicas_; ++d) group.push_back(options_.devices[index(s, d)]);
      stage_comms_.push_back(make_collectives(group));
    }
  }
}

Pipeline::~Pipeline() = default;

AllocatorStats Pipeline::memory(int s, int replica) const {
  return allocator_for(stages_[index(s, replica)]->device()).stats();
}

int64_t Pipeline::bytes_moved() const {
  int64_t total = bytes_moved_;
  for (const auto& c : stage_comms_) total += c->bytes_moved();
  return total;
}

void Pipeline::zero_grad() {
  for (auto& st : stages_) st->zero_grads();
}

// --- weights and gradients, whole, on the host ---------------------------------

void Pipeline::params_from_host(const float* values) {
  for (auto& st : stages_) {
    const ParamUnit r = st->stage_range();
    tensor_upload(st->compute_stream(), st->params(), values + r.begin);
    st->params_to_working(r.begin, r.end);
  }
  sync_tied();
}

void Pipeline::params_to_host(float* values) {
  for (int s = 0; s < stages(); ++s) {
    PipeStage& st = stage(s);
    tensor_to_host(st.compute_stream(), st.params(), values + st.stage_range().begin);
  }
}

void Pipeline::grads_to_host(float* values) {
  for (int s = 0; s < stages(); ++s) {
    PipeStage& st = stage(s);
    tensor_to_host(st.compute_stream(), st.grads(), values + st.stage_range().begin);
  }
}

// --- after backward -----------------------------------------------------------

std::pair<std::vector<Tensor>, std::vector<Stream*>> Pipeline::across_replicas(
    int s, Tensor (PipeStage::*buffer)()) {
  std::pair<std::vector<Tensor>, std::vector<Stream*>> out;
  for (int d = 0; d < replicas_; ++d) {
    out.first.push_back((stage(s, d).*buffer)());
    out.second.push_back(&stage(s, d).compute_stream());
  }
  return out;
}

void Pipeline::reduce_gradients() {
  const int K = stages();
  for (int d = 0; d < replicas_ && K > 1; ++d) {
    PipeStage& last = stage(K - 1, d);
    Tensor tied = last.tied_grads();
    if (!tied.defined()) break;
    PipeStage& first = stage(0, d);
    Lane& ln = *lanes_[index(0, d)];
    if (!ln.tied_staging.defined() || ln.tied_staging.numel() < tied.numel())
      ln.tied_staging = Tensor::empty({tied.numel()}, DType::f32, first.device(), MemTag::grads);
    Tensor staging = ln.tied_staging.view(0, {tied.numel()});
    copy_between(first.compute_stream(), staging, tied);
    flat_add(first.compute_stream(), first.grads().view(0, {tied.numel()}), staging);
    first.compute_stream().synchronize();
  }
  for (int s = 0; s < K && replicas_ > 1; ++s) {
    auto [bufs, streams] = across_replicas(s, &PipeStage::grads);
    stage_comms_[s]->reduce(bufs, streams, 0, 0, bufs[0].numel());
    for (Stream* st : streams) st->synchronize();
  }
}

// --- the optimizer's half -------------------------------------------------------

std::vector<ParamUnit> Pipeline::shards() const {
  std::vector<ParamUnit> out;
  for (int s = 0; s < stages(); ++s) out.push_back(stages_[s]->stage_range());
  return out;
}

Tensor Pipeline::shard_working(int i) {
  PipeStage& st = *stages_[i];
  return st.working_dtype() == DType::f32 ? Tensor() : st.working_params();
}

// Replica 0's stages are lanes 0..K-1: shard i is lane i.
double Pipeline::sum_over_shards(const std::function<double(int)>& partial) {
  std::vector<double> parts(stages(), 0.0);
  std::vector<int> first_lanes;
  for (int s = 0; s < stages(); ++s) first_lanes.push_back(index(s, 0));
  pool_->run_on(first_lanes, [&](int i) {
    parts[i] = partial(i);
    stages_[i]->compute_stream().synchronize();
  });
  double total = 0;
  for (double p : parts) total += p;
  return total;
}

void Pipeline::update_shards(const std::function<bool(int)>& update) {
  std::vector<int> first_lanes;
  for (int s = 0; s < stages(); ++s) first_lanes.push_back(index(s, 0));
  pool_->run_on(first_lanes, [&](int i) {
    PipeStage& st = *stages_[i];
    if (!update(i)) {
      const ParamUnit r = st.stage_range();
      st.params_to_working(r.begin, r.end);
    }
    st.compute_stream().synchronize();
  });
  sync_replicas();
  sync_tied();
}

void Pipeline::shards_to_host(const std::vector<Tensor>& per_shard, float* out) {
  FANOUT_ASSERT(static_cast<int>(per_shard.size()) == stages(), "one tensor per stage");
  for (int s = 0; s < stages(); ++s) {
    const ParamUnit r = stages_[s]->stage_range();
    tensor_to_host(stages_[s]->compute_stream(), per_shard[s].view(0, {r.end - r.begin}),
                   out + r.begin);
  }
}

// Every replica's working weights <- replica 0's (the only one updated).
void Pipeline::sync_replicas() {
  for (int s = 0; s < stages() && replicas_ > 1; ++s) {
    auto [bufs, streams] = across_replicas(s, &PipeStage::working_params);
    stage_comms_[s]->broadcast(bufs, streams, 0, 0, bufs[0].numel());
    for (Stream* st : streams) st->synchronize();
  }
}

// A tied lm_head's copy <- its replica's first-stage embedding (working weights).
void Pipeline::sync_tied() {
  const int K = stages();
  for (int d = 0; d < replicas_ && K > 1; ++d) {
    PipeStage& last = stage(K - 1, d);
    Tensor tied = last.tied_weights();
    if (!tied.defined()) return;
    PipeStage& first = stage(0, d);
    first.compute_stream().synchronize();
    copy_between(last.compute_stream(), tied, first.working_params().view(0, {tied.numel()}));
    last.compute_stream().synchronize();
  }
}

}  // namespace fanout::parallel
