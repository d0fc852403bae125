#include "engine/parallel/pipeline/pipeline_lane.h"

#include "engine/core/check.h"

namespace fanout::parallel {

namespace {

// `t` holds at least n elements of `dtype` on `device` (reallocated between
// steps, when every stream is idle).
void ensure(Tensor& t, int64_t n, DType dtype, Device device, MemTag tag) {
  if (t.defined() && t.numel() >= n) return;
  t = Tensor::empty({std::max<int64_t>(n, 1)}, dtype, device, tag);
}

}  // namespace

void Pipeline::Lane::layout(const std::vector<int64_t>& micro_rows, int64_t seq_len, int64_t hidden,
                            bool fwd, bool bwd, bool last_stage, int micro_batches) {
  rows = micro_rows, T = seq_len, C = hidden;
  first = !fwd, last = last_stage;
  offset.assign(rows.size() + 1, 0);
  for (size_t m = 0; m < rows.size(); ++m) offset[m + 1] = offset[m] + rows[m] * T;
  const int64_t tokens = offset.back();
  if (first) ensure(tok, tokens, DType::i32, device, MemTag::data);
  if (last) {
    ensure(tgt, tokens, DType::i32, device, MemTag::data);
    ensure(stats_buf, 2 * static_cast<int64_t>(micro_batches), DType::f32, device, MemTag::data);
  }
  // What other stages copy in: counted as communication buffers.
  if (fwd) ensure(fwd_buf, tokens * C, DType::f32, device, MemTag::comm);
  if (bwd) ensure(bwd_buf, tokens * C, DType::f32, device, MemTag::comm);
  while (static_cast<int>(fwd_event.size()) < micro_batches) {
    fwd_event.push_back(std::make_unique<Event>());
    bwd_event.push_back(std::make_unique<Event>());
  }
}

// This replica's rows, row0 onwards: the micro-batches are consecutive runs of them.
void Pipeline::Lane::upload(Stream& stream, const HostBatch& batch, int64_t row0) {
  const int64_t n = offset.back();
  if (first) tensor_upload(stream, tok.view(0, {n}), batch.inputs + row0 * batch.T);
  if (last) tensor_upload(stream, tgt.view(0, {n}), batch.targets + row0 * batch.T);
}

void Pipeline::Lane::read_stats(Stream& stream) {
  const int64_t M = static_cast<int64_t>(rows.size());
  std::vector<float> st = tensor_to_vector<float>(stream, stats_buf.view(0, {2 * M}));
  loss = {};
  for (int64_t m = 0; m < M; ++m) {
    loss.loss_sum += st[2 * m];
    loss.count += static_cast<int64_t>(st[2 * m + 1]);
  }
}

}  // namespace fanout::parallel
