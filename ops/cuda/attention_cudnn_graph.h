#pragma once
// cuDNN's fused SDPA through the backend graph API (cudnn_graph.h): the causal GQA
// forward and backward graphs of Note [cuDNN SDPA graphs], built and planned once
// per shape, and their execution. Behind ops/cuda/attention_cudnn.h; include only
// from the files of ops/cuda/attention_cudnn*, in builds with FANOUT_HAS_CUDNN.

#include <cudnn_graph.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/check.h"
#include "ops/attention_plan.h"

// Around cuDNN calls whose failure is not a refusal of our graph (a handle, a
// stream, memory): throws fanout::Error naming the status, cuDNN's last message,
// the statement and file:line.
#define FANOUT_CUDNN_CHECK(expr)                                                               \
  do {                                                                                         \
    cudnnStatus_t fanout_st_ = (expr);                                                         \
    if (fanout_st_ != CUDNN_STATUS_SUCCESS)                                                    \
      ::fanout::detail::throw_error(::fanout::detail::str_cat(                                 \
          "cuDNN error: ", ::fanout::ops::cuda::cudnn_status_text(fanout_st_), " in `", #expr, \
          "` at ", __FILE__, ":", __LINE__));                                                  \
  } while (0)

namespace fanout::ops::cuda {

// cudnnGetErrorString(status) plus cudnnGetLastErrorString() when it says more.
std::string cudnn_status_text(cudnnStatus_t status);

// cuDNN declined a graph or a plan (its status and message in what()): the caller
// falls back to the exact kernel. Never escapes ops/cuda/attention_cudnn*.
class SdpaRefused : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The tensors a variant pack binds, by unique id.
enum SdpaUid : int64_t {
  kUidQ = 1,
  kUidK,
  kUidV,
  kUidO,
  kUidStats,
  kUidDO,
  kUidDQ,
  kUidDK,
  kUidDV,
  kUidScale,     // by value: D^-0.5
  kUidNegInf,    // by value: -inf, the masked score
  kUidOne,       // by value: 1
  kUidRowSum,    // backward scratch: rowsum(dO o O), (B, H, T) f32
  kUidDQAccum,   // backward scratch: dq in f32, [B, H, T, D] packed
  kUidVirtual0,  // the first id of the virtual tensors
};

// An owned backend descriptor (destroyed with it).
class BackendDescriptor {
 public:
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type);
  ~BackendDescriptor();
  BackendDescriptor(BackendDescriptor&& o) noexcept : desc_(o.desc_) { o.desc_ = nullptr; }
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(BackendDescriptor&&) = delete;
  cudnnBackendDescriptor_t get() const { return desc_; }

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
};

// A finalized execution plan and every descriptor it was built from.
struct SdpaGraph {
  std::vector<BackendDescriptor> descriptors;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace_bytes = 0;  // what the plan asks for
};

// Builds the graph of one direction and shape and picks the first engine of
// cuDNN's heuristics (mode A) that finalizes. Throws SdpaRefused when cuDNN declines.
SdpaGraph sdpa_graph_build(cudnnHandle_t handle, AttentionDirection direction,
                           const SdpaShape& shape);

// One execution: the (uid, pointer) pairs, by-value scalars included, and the
// workspace. Throws SdpaRefused when cuDNN declines.
void sdpa_graph_execute(cudnnHandle_t handle, const SdpaGraph& graph,
                        const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
                        void* workspace);

}  // namespace fanout::ops::cuda
