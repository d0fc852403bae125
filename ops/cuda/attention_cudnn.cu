// cuDNN fused attention: a handle per (device, stream), the graphs of Note [cuDNN
// SDPA graphs] cached per (device, shape, direction), their execution with
// workspace from the stream's pool, and the fallback line when cuDNN refuses.
// Compiled only in builds with cuDNN.
#ifdef FANOUT_HAS_CUDNN

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/core/bf16.cuh"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/attention_cudnn_graph.h"
#include "ops/cuda/cast.h"
#include "ops/cuda/common.cuh"

namespace fanout::ops::cuda {

namespace {

// One handle per (device, stream), bound to the stream; never destroyed (as
// cublas_handle in matmul.cu). The calling thread is bound to the device.
cudnnHandle_t cudnn_handle(cudaStream_t stream) {
  static std::mutex mu;
  static auto* handles = new std::map<std::pair<int, cudaStream_t>, cudnnHandle_t>();
  const int device = current_device();
  std::lock_guard<std::mutex> lock(mu);
  auto [it, inserted] = handles->try_emplace({device, stream}, nullptr);
  if (inserted) {
    cudnnHandle_t h = nullptr;
    try {
      FANOUT_CUDNN_CHECK(cudnnCreate(&h));
      FANOUT_CUDNN_CHECK(cudnnSetStream(h, stream));
    } catch (...) {
      if (h) cudnnDestroy(h);
      handles->erase(it);
      throw;
    }
    it->second = h;
  }
  return it->second;
}

// A graph and plan, or why cuDNN refused the problem.
struct CachedPlan {
  std::unique_ptr<SdpaGraph> graph;  // null: refused
  std::string refusal;
};

struct PlanCache {
  std::mutex mu;
  std::unordered_map<SdpaKey, std::shared_ptr<const CachedPlan>, SdpaKeyHash> plans;
  std::unordered_set<SdpaKey, SdpaKeyHash> reported;  // device -1: one line for all devices
  int64_t refusals = 0;
};

PlanCache& plan_cache() {
  static auto* cache = new PlanCache();  // never destroyed: plans may be in use at exit
  return *cache;
}

// Prints the fallback line once per shape and direction.
void report_refusal(const SdpaKey& key, const std::string& reason) {
  PlanCache& c = plan_cache();
  SdpaKey any = key;
  any.device = -1;
  std::lock_guard<std::mutex> lock(c.mu);
  if (!c.reported.insert(any).second) return;
  ++c.refusals;
  std::fprintf(stderr, "%s\n", sdpa_refusal_message(key.direction, key.shape, reason).c_str());
}

// The cached plan of key, built on first use (under the lock: every thread that
// needs it waits for the one build).
std::shared_ptr<const CachedPlan> plan_for(cudnnHandle_t handle, const SdpaKey& key) {
  PlanCache& c = plan_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.plans.find(key);
  if (it != c.plans.end()) return it->second;
  auto plan = std::make_shared<CachedPlan>();
  try {
    plan->graph = std::make_unique<SdpaGraph>(sdpa_graph_build(handle, key.direction, key.shape));
  } catch (const SdpaRefused& e) {
    plan->refusal = e.what();
  }
  c.plans.emplace(key, plan);
  return plan;
}

// After cuDNN refused to execute a plan it had built: later calls skip it.
void mark_refused(const SdpaKey& key, const std::string& reason) {
  PlanCache& c = plan_cache();
  auto plan = std::make_shared<CachedPlan>();
  plan->refusal = reason;
  std::lock_guard<std::mutex> lock(c.mu);
  c.plans[key] = plan;  // the old plan stays alive with whoever still holds it
}

// Why this call cannot go to cuDNN before asking it (nullptr: ask).
const char* precheck(const SdpaKey& key, std::initializer_list<const void*> pointers) {
  int major = 0;
  FANOUT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, key.device));
  const SdpaShape& s = key.shape;
  if (const char* why = sdpa_unsupported_reason(key.direction, true, s.T, s.T, s.H, s.KV, s.D,
                                                attention_cudnn_version(), major))
    return why;
  for (const void* p : pointers)
    if (!is_aligned16(p)) return "a tensor is not 16-byte aligned";
  return nullptr;
}

size_t align256(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// The plan of key, or nullptr after reporting why not.
std::shared_ptr<const CachedPlan> usable_plan(cudnnHandle_t handle, const SdpaKey& key,
                                              std::initializer_list<const void*> pointers) {
  if (const char* why = precheck(key, pointers)) {
    report_refusal(key, why);
    return nullptr;
  }
  auto plan = plan_for(handle, key);
  if (!plan->graph) {
    report_refusal(key, plan->refusal);
    return nullptr;
  }
  return plan;
}

// Executes; false (reported, and the plan dropped) when cuDNN refuses.
bool execute(cudnnHandle_t handle, const SdpaKey& key, const CachedPlan& plan,
             const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
             void* workspace) {
  try {
    sdpa_graph_execute(handle, *plan.graph, uids, pointers, workspace);
    return true;
  } catch (const SdpaRefused& e) {
    mark_refused(key, e.what());
    report_refusal(key, e.what());
    return false;
  }
}

float sdpa_scale(int64_t D) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));  // as the CPU rounds it
}

}  // namespace

// ---

bool attention_cudnn_loads() {
  static const bool loads = [] {
    if (attention_cudnn_version() < 90000) return false;
    cudnnHandle_t h = nullptr;
    if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) return false;
    cudnnDestroy(h);
    return true;
  }();
  return loads;
}

int64_t attention_cudnn_version() {
  return static_cast<int64_t>(cudnnGetVersion());
}

int64_t attention_cudnn_refusals() {
  PlanCache& c = plan_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.refusals;
}

bool attention_cudnn_forward(void* stream, uint16_t* out, float* lse, const uint16_t* q,
                             const uint16_t* k, const uint16_t* v, int64_t B, int64_t T, int64_t H,
                             int64_t KV, int64_t D) {
  if (B <= 0 || T <= 0) return true;
  BoundStream s(stream);
  const SdpaKey key{current_device(), {B, T, H, KV, D}, AttentionDirection::forward};
  cudnnHandle_t handle = cudnn_handle(s);
  auto plan = usable_plan(handle, key, {out, lse, q, k, v});
  if (!plan) return false;
  float scale = sdpa_scale(D), neg_inf = -std::numeric_limits<float>::infinity();
  StreamScratch workspace(static_cast<size_t>(plan->graph->workspace_bytes), s);
  const std::vector<int64_t> uids{kUidQ, kUidK, kUidV, kUidO, kUidStats, kUidScale, kUidNegInf};
  const std::vector<void*> pointers{const_cast<uint16_t*>(q),
                                    const_cast<uint16_t*>(k),
                                    const_cast<uint16_t*>(v),
                                    out,
                                    lse,
                                    &scale,
                                    &neg_inf};
  return execute(handle, key, *plan, uids, pointers, workspace.as<void>());
}

bool attention_cudnn_backward(void* stream, uint16_t* dq, uint16_t* dk, uint16_t* dv,
                              const void* dout, bool dout_bf16, const uint16_t* q,
                              const uint16_t* k, const uint16_t* v, const uint16_t* out,
                              const float* lse, int64_t B, int64_t T, int64_t H, int64_t KV,
                              int64_t D) {
  if (B <= 0 || T <= 0) return true;
  BoundStream s(stream);
  const SdpaKey key{current_device(), {B, T, H, KV, D}, AttentionDirection::backward};
  cudnnHandle_t handle = cudnn_handle(s);
  auto plan = usable_plan(handle, key, {dq, dk, dv, dout, q, k, v, out, lse});
  if (!plan) return false;
  // dO in bf16: the graph's type for every matmul operand.
  const int64_t n = B * T * H * D;
  StreamScratch dout_bf16_copy(dout_bf16 ? 0 : sizeof(uint16_t) * n, s);
  const uint16_t* dout16 = static_cast<const uint16_t*>(dout);
  if (!dout_bf16) {
    cast_f32_to_bf16(stream, dout_bf16_copy.as<uint16_t>(), static_cast<const float*>(dout), n);
    dout16 = dout_bf16_copy.as<uint16_t>();
  }
  // One scratch: cuDNN's workspace, then the row sums and dq's f32 accumulator that
  // the graph materializes (Note [cuDNN SDPA graphs]).
  const size_t ws = align256(static_cast<size_t>(plan->graph->workspace_bytes));
  const size_t row_sum = align256(sizeof(float) * B * H * T);
  StreamScratch scratch(ws + row_sum + sizeof(float) * n, s);
  char* base = scratch.as<char>();
  // The engine adds dq's partial sums into its accumulator (atomics), so it starts
  // from zero; the row sums are written whole.
  FANOUT_CUDA_CHECK(cudaMemsetAsync(base + ws + row_sum, 0, sizeof(float) * n, s));
  float scale = sdpa_scale(D), neg_inf = -std::numeric_limits<float>::infinity(), one = 1.0f;
  const std::vector<int64_t> uids{kUidQ,      kUidK,   kUidV,      kUidO,      kUidDO,
                                  kUidStats,  kUidDQ,  kUidDK,     kUidDV,     kUidScale,
                                  kUidNegInf, kUidOne, kUidRowSum, kUidDQAccum};
  const std::vector<void*> pointers{const_cast<uint16_t*>(q),
                                    const_cast<uint16_t*>(k),
                                    const_cast<uint16_t*>(v),
                                    const_cast<uint16_t*>(out),
                                    const_cast<uint16_t*>(dout16),
                                    const_cast<float*>(lse),
                                    dq,
                                    dk,
                                    dv,
                                    &scale,
                                    &neg_inf,
                                    &one,
                                    base + ws,
                                    base + ws + row_sum};
  return execute(handle, key, *plan, uids, pointers, base);
}

}  // namespace fanout::ops::cuda

#endif  // FANOUT_HAS_CUDNN
