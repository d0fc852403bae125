#include "models/llama_generate.h"

#include "engine/core/check.h"
#include "ops/attention.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"

namespace fanout::models {

LlamaGenerator::LlamaGenerator(LlamaModel& model, int64_t max_len)
    : model_(model), max_len_(max_len) {
  const LlamaConfig& c = model.config();
  FANOUT_CHECK(max_len > 0 && max_len <= c.max_position_embeddings, "generation length ", max_len,
               " must be within 1..max_position_embeddings (", c.max_position_embeddings, ")");
  int64_t KVd = c.num_key_value_heads * c.head_dim;
  // The cache holds k and v as the attention reads them: in the working dtype.
  DType X = model.working_dtype();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    k_cache_.push_back(Tensor::empty({max_len, KVd}, X, model.device(), MemTag::activations));
    v_cache_.push_back(Tensor::empty({max_len, KVd}, X, model.device(), MemTag::activations));
  }
}

std::vector<float> LlamaGenerator::feed(const std::vector<int32_t>& ids) {
  const LlamaConfig& c = model_.config();
  const LlamaLayout& layout = model_.layout();
  int64_t n = static_cast<int64_t>(ids.size());
  FANOUT_CHECK(n > 0, "nothing to feed");
  FANOUT_CHECK(pos_ + n <= max_len_, "generation would pass ", max_len_, " positions");
  for (int32_t id : ids) {
    FANOUT_CHECK(id >= 0 && id < c.vocab_size, "token id ", id,
                 " is out of range for vocabulary size ", c.vocab_size);
  }
  Stream& s = model_.compute_stream();
  Device dev = model_.device();
  int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  int64_t H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim;
  int64_t Hd = H * D, KVd = KV * D, P = pos_;
  float eps = static_cast<float>(c.rms_norm_eps);
  // As in training (Note [Mixed precision] in llama_model.cpp): the working
  // weights, fp32 residual stream and statistics, GEMM inputs in the working dtype.
  Tensor params = model_.working_params();
  DType X = model_.working_dtype();
  auto w = [&](int64_t offset, Shape shape) { return params.view(offset, std::move(shape)); };
  auto act = [&](Shape shape, DType dtype = DType::f32) {
    return Tensor::empty(std::move(shape), dtype, dev, MemTag::activations);
  };

  Tensor tok = tensor_from_vector(s, ids, {1, n}, DType::i32, dev);
  Tensor res = act({n, C}), ln = act({n, C}, X), rstd = act({n}), q = act({n, Hd}, X);
  Tensor att = act({n, Hd}, X), lse = act({H * n}), tmp = act({n, C});
  Tensor gate = act({n, I}, X), up = act({n, I}, X), mlp = act({n, I}, X);
  ops::embedding_forward(s, res, tok, w(layout.embed(), {V, C}), n, C, V);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerOffsets& o = layout.layer(l);
    Tensor k_new = k_cache_[l].view(P * KVd, {n, KVd}), v_new = v_cache_[l].view(P * KVd, {n, KVd});
    ops::rmsnorm_forward(s, ln, rstd, res, w(o.ln1, {C}), n, C, eps);
    ops::matmul_forward(s, q, ln, w(o.q, {Hd, C}), n, C, Hd);
    ops::matmul_forward(s, k_new, ln, w(o.k, {KVd, C}), n, C, KVd);
    ops::matmul_forward(s, v_new, ln, w(o.v, {KVd, C}), n, C, KVd);
    ops::rope_forward(s, q, q, 1, n, H, D, c.rope(), P);
    ops::rope_forward(s, k_new, k_new, 1, n, KV, D, c.rope(), P);
    Tensor k_all = k_cache_[l].view(0, {P + n, KVd}), v_all = v_cache_[l].view(0, {P + n, KVd});
    ops::attention_forward(s, att, lse, q, k_all, v_all, 1, n, P + n, H, KV, D);
    ops::matmul_forward(s, tmp, att, w(o.o, {C, Hd}), n, Hd, C);
    ops::residual_forward(s, res, res, tmp, n * C);
    ops::rmsnorm_forward(s, ln, rstd, res, w(o.ln2, {C}), n, C, eps);
    ops::matmul_forward(s, gate, ln, w(o.gate, {I, C}), n, C, I);
    ops::matmul_forward(s, up, ln, w(o.up, {I, C}), n, C, I);
    ops::swiglu_forward(s, mlp, gate, up, n * I);
    ops::matmul_forward(s, tmp, mlp, w(o.down, {C, I}), n, I, C);
    ops::residual_forward(s, res, res, tmp, n * C);
  }
  // Only the last position's logits are needed.
  Tensor last = res.view((n - 1) * C, {1, C});
  Tensor lnf = act({1, C}, X), rstdf = act({1}), logits = act({1, V});
  ops::rmsnorm_forward(s, lnf, rstdf, last, w(layout.final_norm(), {C}), 1, C, eps);
  ops::matmul_forward(s, logits, lnf, w(layout.lm_head(), {V, C}), 1, C, V);
  pos_ += n;
  return tensor_to_vector<float>(s, logits);
}

int32_t argmax(const std::vector<float>& logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  return best;
}

}  // namespace fanout::models
