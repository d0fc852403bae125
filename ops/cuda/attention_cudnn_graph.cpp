// The backend descriptors of cuDNN's fused causal GQA attention (Note [cuDNN SDPA
// graphs]). Compiled only in builds with cuDNN.
#ifdef FANOUT_HAS_CUDNN

#include "ops/cuda/attention_cudnn_graph.h"

#include <cmath>
#include <limits>

namespace fanout::ops::cuda {

// Note [cuDNN SDPA graphs]
// cuDNN 9.19 offers two ways to ask for fused attention. The dedicated
// CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD_DESCRIPTOR ops (9.13+) have no causal
// attribute: a mask there needs the score-modifier subgraph or the softmax
// descriptor, which arrive in 9.21 (cudnn-frontend's UnifiedSDPANode refuses
// left/right bounds below 9.21, and its backward always lowers to the composite
// node). So we build the classic composite pattern, the one cudnn-frontend's
// CompositeSDPANode / CompositeSDPABackwardNode lower to and that cuDNN matches
// to its flash-attention engines. In cuDNN's [B, H, S, D] order (layouts in
// ops/attention_plan.h; K^T and V^T are the k and v tensors with the last two
// dims and strides swapped):
//   forward:  S = Q K^T * scale; causal mask (row index >= column index, else
//             -inf, by GEN_INDEX, CMP_GE and BINARY_SELECT); M = max_j S;
//             E = exp(S - M); L = sum_j E; Stats = M + log L; P = E / L (bf16);
//             O = P V.
//   backward: Dsum = sum_d dO o O (a non-virtual f32 tensor, scratch);
//             P = exp(mask(Q K^T * scale - Stats)); dV = P^T dO (a head sum
//             for GQA); dS = (dO V^T - Dsum) o P * scale; dK = dS^T Q (head
//             sum); dQ = dS K, accumulated in an f32 scratch, then copied.
// Stats is max + log(sum exp) of the scaled, masked scores, natural logarithms
// (the graph's own EXP and LOG ops): exactly our lse, so either forward feeds
// either backward with no conversion. GQA is implicit: Q has H heads, K and V
// have KV, and the matmuls broadcast kv head h / (H / KV) (cuDNN's grouping
// matches HF's repeat_kv); dK and dV reduce [B, H, T, D] to [B, KV, T, D].

namespace {

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;
constexpr cudnnDataType_t kBf16 = CUDNN_DATA_BFLOAT16;

void refuse_unless(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw SdpaRefused(detail::str_cat(what, ": ", cudnn_status_text(status)));
}

// Adds tensors and operations to one graph; every descriptor goes into the
// graph's list so the plan outlives nothing it points at.
class GraphBuilder {
 public:
  explicit GraphBuilder(SdpaGraph& graph) : graph_(graph) {}

  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type, const SdpaLayout& l,
                                  bool is_virtual = false, bool by_value = false) {
    cudnnBackendDescriptor_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, l.dims.data());
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, l.strides.data());
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    finalize(t, "tensor");
    return t;
  }

  // A virtual (never materialized) tensor with the next free id.
  cudnnBackendDescriptor_t virt(cudnnDataType_t type, const SdpaLayout& l) {
    return tensor(next_uid_++, type, l, true);
  }

  // A float scalar passed by value (its host pointer goes into the variant pack).
  cudnnBackendDescriptor_t scalar(int64_t uid) {
    return tensor(uid, kF32, {{1, 1, 1, 1}, {1, 1, 1, 1}}, false, true);
  }

  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &kF32);
    finalize(mm, "matmul descriptor");
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    add_op(op, "matmul");
  }

  // y = mode(x[, b[, t]]); GEN_INDEX takes an axis, comparisons a boolean math type.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y,
                 cudnnBackendDescriptor_t b = nullptr, cudnnBackendDescriptor_t t = nullptr,
                 cudnnDataType_t math = kF32, int64_t axis = -1) {
    cudnnBackendDescriptor_t pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
    if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(pw, "pointwise descriptor");
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    const float one = 1.0f;
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    add_op(op, "pointwise");
  }

  // y = reduce(x) over the dims where y is smaller.
  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t red = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    set(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &kF32);
    set(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    finalize(red, "reduction descriptor");
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &red);
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add_op(op, "reduction");
  }

  // y: the same memory as x under other dims and strides (a transpose view).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    add_op(op, "reshape");
  }

  // The operation graph, heuristics (mode A) and the first engine config whose
  // execution plan finalizes.
  void plan(cudnnHandle_t handle) {
    cudnnBackendDescriptor_t og = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        static_cast<int64_t>(ops_.size()), ops_.data());
    set(og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    finalize(og, "the operation graph");
    cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &og);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    finalize(heur, "the engine heuristics");
    int64_t count = 0;
    refuse_unless(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
                  "the engine heuristics' results");
    if (count <= 0) throw SdpaRefused("the engine heuristics found no engine for the graph");
    std::vector<cudnnBackendDescriptor_t> configs;
    for (int64_t i = 0; i < count; ++i) configs.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    refuse_unless(
        cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 count, &count, configs.data()),
        "the engine heuristics' results");
    std::string first_error;
    for (int64_t i = 0; i < count; ++i) {
      BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      set(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      set(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &configs[i]);
      const cudnnStatus_t st = cudnnBackendFinalize(plan.get());
      if (st != CUDNN_STATUS_SUCCESS) {
        if (first_error.empty()) first_error = cudnn_status_text(st);
        continue;
      }
      int64_t ws = 0, got = 0;
      refuse_unless(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                             CUDNN_TYPE_INT64, 1, &got, &ws),
                    "the plan's workspace size");
      graph_.plan = plan.get();
      graph_.workspace_bytes = ws;
      graph_.descriptors.push_back(std::move(plan));
      return;
    }
    throw SdpaRefused(
        detail::str_cat("no engine of ", count, " finalized a plan; the first: ", first_error));
  }

 private:
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type) {
    graph_.descriptors.emplace_back(type);
    return graph_.descriptors.back().get();
  }

  static void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                  cudnnBackendAttributeType_t type, int64_t count, const void* value) {
    const cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, count, value);
    if (st != CUDNN_STATUS_SUCCESS)
      throw SdpaRefused(detail::str_cat("setting attribute ", static_cast<int>(name), ": ",
                                        cudnn_status_text(st)));
  }

  static void finalize(cudnnBackendDescriptor_t d, const char* what) {
    refuse_unless(cudnnBackendFinalize(d), what);
  }

  void add_op(cudnnBackendDescriptor_t op, const char* what) {
    finalize(op, what);
    ops_.push_back(op);
  }

  SdpaGraph& graph_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_uid_ = kUidVirtual0;
};

// Forward: Q, K, V -> O, Stats.
void build_forward(GraphBuilder& g, const SdpaShape& s) {
  const SdpaLayout scores = sdpa_layout_scores(s), row = sdpa_layout_stats(s);
  auto q = g.tensor(kUidQ, kBf16, sdpa_layout_q(s));
  auto kt = g.tensor(kUidK, kBf16, sdpa_layout_kv_transposed(s));
  auto v = g.tensor(kUidV, kBf16, sdpa_layout_kv(s));
  auto o = g.tensor(kUidO, kBf16, sdpa_layout_q(s));
  auto stats = g.tensor(kUidStats, kF32, row);
  auto scale = g.scalar(kUidScale), neg_inf = g.scalar(kUidNegInf);

  auto qk = g.virt(kF32, scores);
  g.matmul(q, kt, qk);
  auto scaled = g.virt(kF32, scores);
  g.pointwise(CUDNN_POINTWISE_MUL, qk, scaled, scale);
  // Causal: keep column j <= row i (top-left diagonal; Tq == Tk).
  auto r = g.virt(CUDNN_DATA_INT32, scores), c = g.virt(CUDNN_DATA_INT32, scores);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, r, nullptr, nullptr, kF32, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, c, nullptr, nullptr, kF32, 3);
  auto keep = g.virt(CUDNN_DATA_BOOLEAN, scores);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, r, keep, c, nullptr, CUDNN_DATA_BOOLEAN);
  auto masked = g.virt(kF32, scores);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scaled, masked, neg_inf, keep);
  // Softmax with its statistics.
  auto m = g.virt(kF32, row);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, m);
  auto shifted = g.virt(kF32, scores);
  g.pointwise(CUDNN_POINTWISE_SUB, masked, shifted, m);
  auto e = g.virt(kF32, scores);
  g.pointwise(CUDNN_POINTWISE_EXP, shifted, e);
  auto l = g.virt(kF32, row);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, l);
  auto log_l = g.virt(kF32, row);
  g.pointwise(CUDNN_POINTWISE_LOG, l, log_l);
  g.pointwise(CUDNN_POINTWISE_ADD, m, stats, log_l);
  auto p = g.virt(kBf16, scores);  // the second matmul's operand type is the inputs'
  g.pointwise(CUDNN_POINTWISE_DIV, e, p, l);
  g.matmul(p, v, o);
}

// Backward: Q, K, V, O, dO, Stats -> dQ, dK, dV (RowSum and DQAccum: scratch).
void build_backward(GraphBuilder& g, const SdpaShape& s) {
  const SdpaLayout scores = sdpa_layout_scores(s), row = sdpa_layout_stats(s);
  const SdpaLayout full = sdpa_layout_full_heads(s);
  const bool gqa = s.H != s.KV;
  auto q = g.tensor(kUidQ, kBf16, sdpa_layout_q(s));
  auto kt = g.tensor(kUidK, kBf16, sdpa_layout_kv_transposed(s));
  auto vt = g.tensor(kUidV, kBf16, sdpa_layout_kv_transposed(s));
  auto o = g.tensor(kUidO, kBf16, sdpa_layout_q(s));
  auto dout = g.tensor(kUidDO, kBf16, sdpa_layout_q(s));
  auto stats = g.tensor(kUidStats, kF32, row);
  auto dq = g.tensor(kUidDQ, kBf16, sdpa_layout_q(s));
  auto dk = g.tensor(kUidDK, kBf16, sdpa_layout_kv(s));
  auto dv = g.tensor(kUidDV, kBf16, sdpa_layout_kv(s));
  auto row_sum = g.tensor(kUidRowSum, kF32, row);
  auto dq_accum = g.tensor(kUidDQAccum, kF32, full);
  auto scale = g.scalar(kUidScale), neg_inf = g.scalar(kUidNegInf), one = g.scalar(kUidOne);

  // Dsum = rowsum(dO o O), materialized.
  auto d_o = g.virt(kF32, full);
  g.pointwise(CUDNN_POINTWISE_MUL, dout, d_o, o);
  auto d_sum = g.virt(kF32, row);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, d_o, d_sum);
  g.pointwise(CUDNN_POINTWISE_MUL, d_sum, row_sum, one);
  // P = exp(mask(Q K^T * scale - Stats)).
  auto qk = g.virt(kF32, scores);
  g.matmul(q, kt, qk);
  auto scaled = g.virt(kF32, scores);
  g.pointwise(CUDNN_POINTWISE_MUL, qk, scaled, scale);
  auto shifted = g.virt(kF32, scores);
  g.pointwise(CUDNN_POINTWISE_SUB, scaled, shifted, stats);
  auto r = g.virt(CUDNN_DATA_INT32, scores), c = g.virt(CUDNN_DATA_INT32, scores);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, shifted, r, nullptr, nullptr, kF32, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, shifted, c, nullptr, nullptr, kF32, 3);
  auto keep = g.virt(CUDNN_DATA_BOOLEAN, scores);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, r, keep, c, nullptr, CUDNN_DATA_BOOLEAN);
  auto masked = g.virt(kF32, scores);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, shifted, masked, neg_inf, keep);
  auto p = g.virt(kF32, scores);
  g.pointwise(CUDNN_POINTWISE_EXP, masked, p);
  // dV = P^T dO, summed over the query heads of a group.
  auto pt = g.virt(kBf16, sdpa_layout_scores_transposed(s));
  g.reshape(p, pt);
  if (gqa) {
    auto dv_full = g.virt(kBf16, full);
    g.matmul(pt, dout, dv_full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
  } else {
    g.matmul(pt, dout, dv);
  }
  // dS = (dO V^T - Dsum) o P * scale.
  auto dp = g.virt(kF32, scores);
  g.matmul(dout, vt, dp);
  auto dp_centered = g.virt(kF32, scores);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, dp_centered, row_sum);
  auto ds_unscaled = g.virt(kF32, scores);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_centered, ds_unscaled, p);
  auto ds = g.virt(kF32, scores);
  g.pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, ds, scale);
  // dK = dS^T Q, summed over the group.
  auto dst = g.virt(kBf16, sdpa_layout_scores_transposed(s));
  g.reshape(ds, dst);
  if (gqa) {
    auto dk_full = g.virt(kBf16, full);
    g.matmul(dst, q, dk_full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
  } else {
    g.matmul(dst, q, dk);
  }
  // dQ = dS K through the f32 accumulator.
  auto k = g.virt(kBf16, sdpa_layout_kv(s));
  g.reshape(kt, k);
  g.matmul(ds, k, dq_accum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, dq);
}

}  // namespace

// ---

std::string cudnn_status_text(cudnnStatus_t status) {
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof(last));
  std::string text = cudnnGetErrorString(status);
  if (last[0] != '\0') text += detail::str_cat(": ", last);
  return text;
}

BackendDescriptor::BackendDescriptor(cudnnBackendDescriptorType_t type) {
  FANOUT_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &desc_));
}

BackendDescriptor::~BackendDescriptor() {
  if (desc_) cudnnBackendDestroyDescriptor(desc_);
}

SdpaGraph sdpa_graph_build(cudnnHandle_t handle, AttentionDirection direction,
                           const SdpaShape& shape) {
  SdpaGraph graph;
  GraphBuilder g(graph);
  if (direction == AttentionDirection::forward)
    build_forward(g, shape);
  else
    build_backward(g, shape);
  g.plan(handle);
  return graph;
}

void sdpa_graph_execute(cudnnHandle_t handle, const SdpaGraph& graph,
                        const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
                        void* workspace) {
  FANOUT_ASSERT(uids.size() == pointers.size(), "sdpa_graph_execute: ", uids.size(), " ids, ",
                pointers.size(), " pointers");
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const auto n = static_cast<int64_t>(uids.size());
  auto set = [&](cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                 const void* value) {
    refuse_unless(cudnnBackendSetAttribute(pack.get(), name, type, count, value),
                  "the variant pack");
  };
  set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data());
  set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, pointers.data());
  set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  refuse_unless(cudnnBackendFinalize(pack.get()), "the variant pack");
  refuse_unless(cudnnBackendExecute(handle, graph.plan, pack.get()), "execution");
}

}  // namespace fanout::ops::cuda

#endif  // FANOUT_HAS_CUDNN
