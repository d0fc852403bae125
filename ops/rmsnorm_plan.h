#pragma once
// How RMSNorm's CUDA backward (ops/cuda/rmsnorm.cu) divides its work, in plain C++
// so that every build tests it. One pass where the rows are short enough: a warp
// per row computes dinp and keeps its channels' dweight sums in registers, each
// block writes one row of partial sums. Two passes otherwise: dinp a block per row,
// then dweight's partials over chunks of rows, which reads the rows a second time.
// Either way the partials are added in a fixed order: the result is deterministic.

#include <cstdint>

namespace fanout::ops {

constexpr int kRmsnormRowWarps = 8;             // one pass: rows a block works on at once
constexpr int64_t kRmsnormMaxGroups = 4;        // one pass: 8-channel groups a lane keeps
constexpr int64_t kRmsnormOnePassBlocks = 256;  // one pass: blocks (partial rows) at most
constexpr int64_t kRmsnormTwoPassChunks = 64;   // two passes: row chunks at most

struct RmsnormGradPlan {
  bool one_pass = false;
  int groups = 0;              // one pass: 8-channel groups per lane, C <= 256 * groups
  int64_t rows_per_block = 0;  // rows behind one row of partial sums
  int64_t partials = 0;        // rows of partial sums: blocks (one pass) or chunks
};

// The plan for N rows of C channels. `aligned`: dinp, dout, inp and the weight all
// start on a 16-byte boundary (one pass loads 8 channels at once).
RmsnormGradPlan rmsnorm_grad_plan(int64_t N, int64_t C, bool aligned);

}  // namespace fanout::ops
