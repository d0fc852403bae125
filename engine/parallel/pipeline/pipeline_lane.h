#pragma once
// Pipeline::Lane: what one (replica, stage) keeps for a step -- the micro-
// batches' tokens (first stage), targets and loss statistics (last stage), the
// boundary buffers other stages copy into (hidden states in, gradients in) and
// the events those copies record. Internal to engine/parallel/pipeline/.

#include <memory>
#include <vector>

#include "engine/core/stream.h"
#include "engine/parallel/pipeline/pipeline.h"

namespace fanout::parallel {

struct Pipeline::Lane {
  explicit Lane(Device d) : device(d) {}

  // Micro-batch m is rows[m] rows of T tokens, at token offset offset[m] of the
  // packed buffers.
  void layout(const std::vector<int64_t>& micro_rows, int64_t seq_len, int64_t hidden, bool fwd,
              bool bwd, bool last_stage, int micro_batches);
  void upload(Stream& stream, const HostBatch& batch, int64_t row0);
  void read_stats(Stream& stream);

  Tensor tokens(int m) const { return first ? tok.view(offset[m], {rows[m], T}) : Tensor(); }
  Tensor targets(int m) const { return last ? tgt.view(offset[m], {rows[m], T}) : Tensor(); }
  Tensor stats(int m) const { return last ? stats_buf.view(2 * m, {2}) : Tensor(); }
  Tensor fwd_in(int m) const {
    return fwd_buf.view(offset[m] * C, {(offset[m + 1] - offset[m]) * C});
  }
  Tensor bwd_in(int m) const {
    return bwd_buf.view(offset[m] * C, {(offset[m + 1] - offset[m]) * C});
  }

  Device device;
  bool first = false, last = false;
  int64_t T = 0, C = 0;
  std::vector<int64_t> rows, offset;
  Tensor tok, tgt, stats_buf, fwd_buf, bwd_buf;
  Tensor tied_staging;  // first stage: the tied lm_head's gradient, copied over
  std::vector<std::unique_ptr<Event>> fwd_event, bwd_event;
  LossStats loss;
};

}  // namespace fanout::parallel
