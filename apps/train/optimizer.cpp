#include "apps/train/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/core/check.h"
#include "engine/core/cuda_runtime.h"
#include "engine/core/flat.h"
#include "ops/cpu/adamw.h"
#include "ops/grad_norm.h"

namespace fanout::train {

namespace {

// dst (host) <- src (on the stream's device), queued on `stream`. The host memory
// is pageable, so a CUDA copy returns only once it is done; pinned memory would
// make both directions truly asynchronous.
void copy_to_host_async(Stream& stream, float* dst, const Tensor& src) {
  const size_t bytes = src.nbytes();
  if (stream.device().is_cpu()) {
    // The captured tensor keeps its storage alive until the copy ran.
    stream.enqueue([dst, src, bytes] { std::memcpy(dst, src.raw(), bytes); });
  } else {
    cuda_memcpy_async(dst, src.raw(), bytes, CudaCopy::device_to_host, stream.cuda_handle());
  }
}

// dst (on the stream's device) <- src (host), queued on `stream`.
void copy_from_host_async(Stream& stream, const Tensor& dst, const float* src) {
  const size_t bytes = dst.nbytes();
  if (stream.device().is_cpu()) {
    stream.enqueue([dst, src, bytes] { std::memcpy(dst.raw(), src, bytes); });
  } else {
    cuda_memcpy_async(dst.raw(), src, bytes, CudaCopy::host_to_device, stream.cuda_handle());
  }
}

}  // namespace

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
                     ops::AdamWConfig config, OptimizerOffload offload)
    : owned_(parallel::data_parallel_shards(dp)),
      set_(*owned_),
      runs_(std::move(runs)),
      config_(config),
      offload_(offload),
      gather_state_(offload.enabled && dp.options().process_group != nullptr && dp.sharded()) {
  FANOUT_CHECK(!offload.enabled || offload.chunk >= 1, "an offloaded optimizer moves chunks of ",
               offload.chunk, " elements: give at least 1");
}

// Note [Lazy optimizer state]: m and v are allocated at the first step (or when
// a checkpoint's state is loaded), as torch.optim.AdamW does, so a run that does
// not fit its devices stops at step 1 -- where PyTorch would -- and a device's
// memory before the first step is what the model alone takes.
void Optimizer::ensure_state() {
  if (!state_.empty()) return;
  const std::vector<parallel::ParamUnit> shards = set_.shards();
  for (int i = 0; i < static_cast<int>(shards.size()); ++i) {
    ShardState s{shards[i].begin, shards[i].end, {}, {}, {}, {}};
    Device d = set_.shard_device(i);
    const int64_t n = s.end - s.begin;
    s.norm = Tensor::empty({1}, DType::f32, d, MemTag::optimizer);
    if (offload_.enabled) {
      s.host.master = HostBuffer(n, MemTag::params);
      s.host.m = HostBuffer(n, MemTag::optimizer);
      s.host.v = HostBuffer(n, MemTag::optimizer);
      s.host.grads = HostBuffer(n, MemTag::grads);
      std::fill_n(s.host.m.data(), n, 0.0f);
      std::fill_n(s.host.v.data(), n, 0.0f);
      s.host.master_stale = true;
    } else {
      s.m = Tensor::empty({std::max<int64_t>(n, 1)}, DType::f32, d, MemTag::optimizer);
      s.v = Tensor::empty({std::max<int64_t>(n, 1)}, DType::f32, d, MemTag::optimizer);
      Stream& stream = set_.shard_stream(i);
      flat_fill(stream, s.m, 0.0f);
      flat_fill(stream, s.v, 0.0f);
      stream.synchronize();
    }
    state_.push_back(std::move(s));
  }
}

// Note [Optimizer offload]: offloaded, each shard's fp32 master weights, AdamW's m
// and v and a landing buffer for its gradients live in host memory
// (host_allocator(), counted apart from every device); a device keeps its
// weights (under bf16 also the fp32 master its replica is built around), its
// gradients and a one-float scratch for the gradient norm, which is summed on the
// devices exactly as without offload. The host master is read from the device's
// at the first step after the state is made or loaded (the engine has brought
// every replica's weights up to date by then). Each shard's update, on its own
// pool thread, goes chunk by chunk (OptimizerOffload::chunk elements): every
// chunk's gradients are queued device->host on the shard's stream at once, an
// event after each; the host waits for chunk c's event, updates the chunk with
// the CPU AdamW kernel (a oneTBB parallel_for over the host's threads: this thread
// is in no device's arena) and queues its new master host->device, so the copies
// of other chunks run while the host computes. The update writes no working copy: the engine
// rounds it from the device master afterwards (update_shards is told so).
// The bits: AdamW is element-wise, so chunks and threads change nothing; the
// kernel, its scalars and the working copy's rounding (the fused write is defined
// to equal a separate cast) are the device path's, so on CPU devices every weight,
// m and v equals the run without offload bit for bit (CUDA's kernel is written to
// give the CPU's bits too).
void Optimizer::update_on_host(int i, int64_t step, float lr, float scale) {
  FANOUT_CHECK(step >= 1, "adamw_update: the step counts from 1, got ", step);
  ShardState& s = state_[i];
  const int64_t n = s.end - s.begin;
  if (n <= 0) return;
  Stream& stream = set_.shard_stream(i);
  const Tensor params = set_.shard_params(i), grads = set_.shard_grads(i);
  HostState& h = s.host;
  if (h.master_stale) {
    // The weights the engine computed with at this step, bit for bit.
    tensor_to_host(stream, params, h.master.data());
    h.master_stale = false;
  }
  const int64_t chunk = offload_.chunk;
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::vector<Event> copied(static_cast<size_t>(chunks));
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * chunk, hi = std::min(n, lo + chunk);
    copy_to_host_async(stream, h.grads.data() + lo, grads.view(lo, {hi - lo}));
    copied[c].record(stream);
  }
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * chunk, hi = std::min(n, lo + chunk);
    copied[c].synchronize();
    for (const DecayRun& run : runs_) {
      // The run's part of the chunk, in offsets within the shard.
      const int64_t a = std::max(run.begin - s.begin, lo), b = std::min(run.end - s.begin, hi);
      if (a >= b) continue;
      const float decay = run.decay ? config_.weight_decay : 0.0f;
      ops::cpu::adamw_update(h.master.data() + a, h.grads.data() + a, h.m.data() + a,
                             h.v.data() + a, b - a, lr, config_.beta1, config_.beta2, config_.eps,
                             decay, step, scale);
    }
    copy_from_host_async(stream, params.view(lo, {hi - lo}), h.master.data() + lo);
  }
  stream.synchronize();
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
    if (offload_.enabled) {
      update_on_host(i, step, lr, scale);
      return false;  // the engine rounds the working weights from the master
    }
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
  if (offload_.enabled) {
    host_state_to_host(&HostState::m, m.data());
    host_state_to_host(&HostState::v, v.data());
    return;
  }
  std::vector<Tensor> ms, vs;
  for (ShardState& s : state_) ms.push_back(s.m), vs.push_back(s.v);
  set_.shards_to_host(ms, m.data());
  set_.shards_to_host(vs, v.data());
}

// One offloaded buffer of every shard (m or v) -> the whole flat buffer: shard i
// is [begin, end) of it.
void Optimizer::host_state_to_host(HostBuffer HostState::*which, float* out) {
  if (!gather_state_) {
    for (const ShardState& s : state_) {
      if (s.end > s.begin)
        std::memcpy(out + s.begin, (s.host.*which).data(), (s.end - s.begin) * sizeof(float));
    }
    return;
  }
  // Across processes each rank holds only its own shards: through its devices,
  // where the engine gathers them (as it gathers the whole buffer there anyway).
  std::vector<Tensor> per_shard;
  for (int i = 0; i < static_cast<int>(state_.size()); ++i) {
    const ShardState& s = state_[i];
    const int64_t n = s.end - s.begin;
    Tensor t = Tensor::empty({std::max<int64_t>(n, 1)}, DType::f32, set_.shard_device(i),
                             MemTag::optimizer);
    if (n > 0) tensor_upload(set_.shard_stream(i), t.view(0, {n}), (s.host.*which).data());
    per_shard.push_back(std::move(t));
  }
  set_.shards_to_host(per_shard, out);
}

void Optimizer::state_from_host(const std::vector<float>& m, const std::vector<float>& v) {
  int64_t P = set_.num_params();
  FANOUT_CHECK(static_cast<int64_t>(m.size()) == P && static_cast<int64_t>(v.size()) == P,
               "optimizer state holds ", m.size(), " values, the model ", P);
  ensure_state();
  if (offload_.enabled) {
    // Every process has the whole state; shard i is [begin, end) of it.
    for (ShardState& s : state_) {
      if (s.end <= s.begin) continue;
      const size_t bytes = (s.end - s.begin) * sizeof(float);
      std::memcpy(s.host.m.data(), m.data() + s.begin, bytes);
      std::memcpy(s.host.v.data(), v.data() + s.begin, bytes);
    }
    // The engine's weights are the checkpoint's: the host master is read from
    // them at the next step, once the engine brought every replica up to date.
    for (ShardState& s : state_) s.host.master_stale = true;
    return;
  }
  std::vector<Tensor> ms, vs;
  for (ShardState& s : state_) ms.push_back(s.m), vs.push_back(s.v);
  set_.host_to_shards(m.data(), ms);
  set_.host_to_shards(v.data(), vs);
}

}  // namespace fanout::train
