#pragma once
// The walkthrough's ddp section: one step of `fanout launch -- train --strategy
// ddp` told next to the in-process modes: what each process holds, what it sends
// (its gradient buckets, each a ring all-reduce: 2(W-1)/W of the bytes per rank),
// how the ring moves the chunks, and what never moves (logits, weights). The
// figures are computed from the run's model, batch and devices, not measured.

#include <cstdint>
#include <ostream>
#include <vector>

#include "apps/walkthrough/walkthrough.h"
#include "apps/walkthrough/walkthrough_prose.h"

namespace fanout::walkthrough::walk {

// Bytes rank `rank` sends in an all-reduce of `elements` values of `elem_bytes`
// each over `world` ranks, as ProcessGroup::bytes_sent() counts them: a ring
// reduce-scatter over the buffer's shard_bounds pieces (every piece but its own),
// then a ring all-gather (every piece but rank r+1's). About 2(W-1)/W of the
// buffer; the pieces differ by at most one value, and so may the ranks.
int64_t ring_all_reduce_bytes(int64_t elements, int64_t elem_bytes, int world, int rank);

// One send of a ring step: rank `from` sends chunk `chunk` to rank `to` = from+1.
struct RingMove {
  int from = 0, to = 0, chunk = 0;
};
// The moves of each of the W-1 steps, in the order of the engine's rings (Note
// [Gloo rings over uneven pieces]). Reduce-scatter, step s: rank r sends chunk
// r-s-1 (mod W), so that after the last step rank r holds the sum of chunk r.
// All-gather, step s: rank r sends chunk r-s, so every rank ends with every chunk.
std::vector<std::vector<RingMove>> ring_reduce_scatter_steps(int world);
std::vector<std::vector<RingMove>> ring_all_gather_steps(int world);

// The figures of a ddp step over `world` processes: P parameters, a global batch
// of `batch_rows`, gradients bucketed by `bucket_mb` as the engine's GradBuckets
// cut them (ddp overlaps by default).
WalkthroughDdp ddp_step_compute(int64_t parameters, int world, int64_t batch_rows,
                                double bucket_mb);

// Section `index`: the ddp step on `o.devices` (one process each), against the
// in-process modes measured before it (`done`: dp-output, dp, ..., zero3).
void ddp_narrate(const WalkthroughOptions& o, const WalkthroughDdp& d,
                 const std::vector<WalkthroughMode>& done, int index, std::ostream& out);

}  // namespace fanout::walkthrough::walk
