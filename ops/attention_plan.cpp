#include "ops/attention_plan.h"

#include <functional>
#include <sstream>

#include "engine/core/check.h"

namespace fanout::ops {

// Note [cuDNN SDPA support]
// What cuDNN 9's fused flash attention (bf16 in, fp32 stats) takes, as
// cudnn-frontend checks it before building the graph (node/sdpa_support_surface.h
// for the forward, node/scaled_dot_product_flash_attention.h's
// CompositeSDPABackwardNode::pre_validate_node for the backward):
//   - head dim a multiple of 8; at most 256 on Hopper (sm_90), 128 elsewhere
//     (the backward's limit, and the forward's on Blackwell);
//   - H a multiple of KV (GQA / MQA);
//   - Ampere (sm_80) or newer;
//   - backward: not s_q = s_kv = 1; not on cuDNN 9.10.0 / 9.10.1 (known bugs);
//     up to 9.15 a sequence length that is not a multiple of 128 needs a padding
//     mask the frontend adds as a workaround, which our graph does not build.
// Beyond these we have nothing to express: Tq < Tk (a KV cache, bottom-right
// causal) takes the exact kernel by design. Anything cuDNN still refuses at
// finalize or execute falls back with one line (attention_cudnn.cu).

namespace {

int64_t sdpa_max_head_dim(int sm_major) {
  return sm_major == 9 ? 256 : 128;
}

}  // namespace

AttentionPath attention_path(AttentionImpl impl, bool cuda_device, bool bf16, bool build_has_cudnn,
                             bool cudnn_loads) {
  if (!cuda_device) return AttentionPath::cpu;
  switch (impl) {
    case AttentionImpl::exact:
      return AttentionPath::exact;
    case AttentionImpl::cudnn:
      FANOUT_CHECK(
          bf16, "--attention cudnn needs --precision bf16 (cuDNN's fused attention is bf16 only)");
      FANOUT_CHECK(build_has_cudnn,
                   "--attention cudnn: this build has no cuDNN (use --attention exact)");
      FANOUT_CHECK(
          cudnn_loads,
          "--attention cudnn: the cuDNN library does not load on this machine (use --attention "
          "exact)");
      return AttentionPath::cudnn;
    case AttentionImpl::automatic:
      return bf16 && build_has_cudnn && cudnn_loads ? AttentionPath::cudnn : AttentionPath::exact;
  }
  FANOUT_ASSERT(false, "unknown AttentionImpl ", static_cast<int>(impl));
}

std::string attention_describe_cuda(AttentionImpl impl, bool bf16, bool build_has_cudnn,
                                    bool cudnn_loads, int64_t cudnn_version, int64_t refusals) {
  if (impl == AttentionImpl::exact) return "exact kernel";
  if (!bf16) return "exact kernel (cuDNN's fused attention is bf16 only)";
  if (!build_has_cudnn) return "exact kernel (this build has no cuDNN)";
  if (!cudnn_loads) return "exact kernel (the cuDNN library does not load)";
  std::string line = "cuDNN fused SDPA (cuDNN " + cudnn_version_string(cudnn_version) + ")";
  if (refusals > 0)
    line += "; cuDNN refused " + std::to_string(refusals) + " shape" + (refusals == 1 ? "" : "s") +
            ", those use the exact kernel";
  return line;
}

// ---

bool SdpaKey::operator==(const SdpaKey& o) const {
  return device == o.device && shape.B == o.shape.B && shape.T == o.shape.T &&
         shape.H == o.shape.H && shape.KV == o.shape.KV && shape.D == o.shape.D &&
         direction == o.direction;
}

size_t SdpaKeyHash::operator()(const SdpaKey& key) const {
  // boost::hash_combine's mix over every field.
  size_t h = std::hash<int>()(key.device);
  auto mix = [&h](int64_t v) {
    h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  mix(key.shape.B);
  mix(key.shape.T);
  mix(key.shape.H);
  mix(key.shape.KV);
  mix(key.shape.D);
  mix(static_cast<int64_t>(key.direction));
  return h;
}

const char* sdpa_unsupported_reason(AttentionDirection direction, bool bf16, int64_t Tq, int64_t Tk,
                                    int64_t H, int64_t KV, int64_t D, int64_t cudnn_version,
                                    int sm_major) {
  if (!bf16) return "cuDNN's fused attention is bf16 only";
  if (Tq != Tk) return "fewer queries than keys (a KV cache)";
  if (Tq < 1) return "an empty sequence";
  if (KV < 1 || H % KV != 0) return "query heads not a multiple of kv heads";
  if (D % 8 != 0) return "head dim not a multiple of 8";
  if (D > sdpa_max_head_dim(sm_major)) return "head dim above cuDNN's limit on this GPU";
  if (sm_major < 8) return "needs an Ampere (sm_80) or newer GPU";
  if (cudnn_version < 90000) return "needs cuDNN 9";
  if (direction == AttentionDirection::backward) {
    if (Tq == 1) return "the backward does not take a single query and key";
    if (cudnn_version == 91000 || cudnn_version == 91001)
      return "the backward is broken in cuDNN 9.10.0 and 9.10.1";
    if (cudnn_version <= 91500 && Tq % 128 != 0)
      return "before cuDNN 9.16 the backward needs a sequence length that is a multiple of 128";
  }
  return nullptr;
}

std::string sdpa_refusal_message(AttentionDirection direction, const SdpaShape& s,
                                 const std::string& reason) {
  std::ostringstream os;
  os << "attention: cuDNN refused the "
     << (direction == AttentionDirection::forward ? "forward" : "backward")
     << " graph for B=" << s.B << " T=" << s.T << " H=" << s.H << " KV=" << s.KV << " D=" << s.D
     << " (" << reason << "); using the exact kernel";
  return os.str();
}

std::string cudnn_version_string(int64_t version) {
  // cuDNN 9 encodes major * 10000 + minor * 100 + patch.
  std::ostringstream os;
  os << version / 10000 << "." << version / 100 % 100 << "." << version % 100;
  return os.str();
}

// ---

SdpaLayout sdpa_layout_q(const SdpaShape& s) {
  return {{s.B, s.H, s.T, s.D}, {s.T * s.H * s.D, s.D, s.H * s.D, 1}};
}

SdpaLayout sdpa_layout_kv(const SdpaShape& s) {
  return {{s.B, s.KV, s.T, s.D}, {s.T * s.KV * s.D, s.D, s.KV * s.D, 1}};
}

SdpaLayout sdpa_layout_kv_transposed(const SdpaShape& s) {
  return {{s.B, s.KV, s.D, s.T}, {s.T * s.KV * s.D, s.D, 1, s.KV * s.D}};
}

SdpaLayout sdpa_layout_stats(const SdpaShape& s) {
  return {{s.B, s.H, s.T, 1}, {s.H * s.T, s.T, 1, 1}};
}

SdpaLayout sdpa_layout_scores(const SdpaShape& s) {
  return {{s.B, s.H, s.T, s.T}, {s.H * s.T * s.T, s.T * s.T, s.T, 1}};
}

SdpaLayout sdpa_layout_scores_transposed(const SdpaShape& s) {
  return {{s.B, s.H, s.T, s.T}, {s.H * s.T * s.T, s.T * s.T, 1, s.T}};
}

SdpaLayout sdpa_layout_full_heads(const SdpaShape& s) {
  return {{s.B, s.H, s.T, s.D}, {s.H * s.T * s.D, s.T * s.D, s.D, 1}};
}

}  // namespace fanout::ops
