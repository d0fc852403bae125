#pragma once
// The host-side plan of attention on CUDA, in plain C++ so that every build tests it:
// which implementation a call takes (AttentionImpl, attention_path), which shapes
// cuDNN's fused SDPA supports, how our (B, T, H, D) tensors look in cuDNN's
// [B, H, S, D] dimension order, the key its graphs are cached under, and the one
// line printed when cuDNN refuses a graph. ops/cuda/attention_cudnn*.cu use it.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace fanout::ops {

// Process-wide choice of the attention kernel on CUDA devices (attention_set_impl).
enum class AttentionImpl { automatic, exact, cudnn };

enum class AttentionDirection { forward, backward };

// Where one call runs.
enum class AttentionPath { cpu, exact, cudnn };

// Picks the path of one call; FANOUT_CHECKs the combinations a user cannot have:
// `cudnn` needs bf16 storage and a build with cuDNN. `cudnn_loads`: the library
// answered (version query and handle creation), only asked when it matters. The
// shape is judged later (sdpa_unsupported_reason) and falls back with a line.
AttentionPath attention_path(AttentionImpl impl, bool cuda_device, bool bf16, bool build_has_cudnn,
                             bool cudnn_loads);

// The describe line of a CUDA device (attention_describe): the setting, the
// storage, what the build and the machine offer, and the refusals so far.
std::string attention_describe_cuda(AttentionImpl impl, bool bf16, bool build_has_cudnn,
                                    bool cudnn_loads, int64_t cudnn_version, int64_t refusals);

// ---

// One SDPA problem: q (B, T, H, D), k, v (B, T, KV, D), Tq == Tk == T.
struct SdpaShape {
  int64_t B, T, H, KV, D;
};

// The cache key of one cuDNN graph (and its plan): the device, the shape and the
// direction.
struct SdpaKey {
  int device;
  SdpaShape shape;
  AttentionDirection direction;
  bool operator==(const SdpaKey& o) const;
};

struct SdpaKeyHash {
  size_t operator()(const SdpaKey& key) const;
};

// Why cuDNN's fused SDPA cannot run this problem (nullptr: it can, as far as we
// know before asking cuDNN). bf16 storage, Tq == Tk, and the limits of cuDNN 9's
// flash-attention engines (Note [cuDNN SDPA support], attention_plan.cpp).
// version: cudnnGetVersion(); sm_major: the device's compute capability major.
const char* sdpa_unsupported_reason(AttentionDirection direction, bool bf16, int64_t Tq, int64_t Tk,
                                    int64_t H, int64_t KV, int64_t D, int64_t cudnn_version,
                                    int sm_major);

// The line printed (once per shape and direction) when cuDNN refuses a problem.
std::string sdpa_refusal_message(AttentionDirection direction, const SdpaShape& shape,
                                 const std::string& reason);

// "9.19.0" from cudnnGetVersion()'s 91900.
std::string cudnn_version_string(int64_t version);

// ---

// Dimensions and strides (in elements) of one tensor as a cuDNN backend tensor.
struct SdpaLayout {
  std::array<int64_t, 4> dims, strides;
};

// q, out, dout, dq (B, T, H, D) as [B, H, T, D].
SdpaLayout sdpa_layout_q(const SdpaShape& s);
// k, v, dk, dv (B, T, KV, D) as [B, KV, T, D].
SdpaLayout sdpa_layout_kv(const SdpaShape& s);
// k or v transposed, [B, KV, D, T]: the right operand of q k^T and dO v^T.
SdpaLayout sdpa_layout_kv_transposed(const SdpaShape& s);
// lse (B, H, T) as [B, H, T, 1]; also the per-row sums of the backward graph.
SdpaLayout sdpa_layout_stats(const SdpaShape& s);
// Scores (virtual) [B, H, T, T], row-major; transposed: [B, H, Tk, Tq] over the same
// memory (the left operand of P^T dO and dS^T Q).
SdpaLayout sdpa_layout_scores(const SdpaShape& s);
SdpaLayout sdpa_layout_scores_transposed(const SdpaShape& s);
// Per-query-head gradients of k and v before the group sum, [B, H, T, D] packed;
// also dq's fp32 accumulator.
SdpaLayout sdpa_layout_full_heads(const SdpaShape& s);

}  // namespace fanout::ops
