#pragma once
// Flat-buffer arithmetic, the only math the engine owns (collectives and gradient
// accumulation need it; everything else lives in ops/). f32 buffers (bf16 where said) on one
// device, queued on a stream of that device. Copies are tensor_copy (tensor.h). CPU and
// CUDA devices give the same bits (every function is one fp32 operation per element,
// rounded as engine/core/dtype.h says).

#include <cstdint>
#include <vector>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout {

// dst[i] = value
void flat_fill(Stream& stream, const Tensor& dst, float value);
// dst[i] += src[i]   (same device, same numel; src f32, or bf16 summed in fp32)
void flat_add(Stream& stream, const Tensor& dst, const Tensor& src);
// dst[i] (bf16) = src[i] (f32) rounded to nearest even (engine/core/dtype.h): what
// a gradient is sent as under --grad-comm bf16.
void flat_round_bf16(Stream& stream, const Tensor& dst, const Tensor& src);
// dst[i] (bf16) = round(dst[i] + round(src[i])), the sum in fp32, src f32 or bf16 (a
// bf16 src is its own rounding): one hop of a ring sum under --grad-comm bf16, this
// rank's rounded contribution added to the partial sum that arrived.
void flat_add_round_bf16(Stream& stream, const Tensor& dst, const Tensor& src);
// dst[i] (f32) = src[i] (bf16), exact.
void flat_widen_bf16(Stream& stream, const Tensor& dst, const Tensor& src);
// dst[i] *= alpha
void flat_scale(Stream& stream, const Tensor& dst, float alpha);

// Element offsets that split [0, total) into one shard per rank: rank r owns
// [bounds[r], bounds[r+1]). Every sharded buffer (zero1-3, reduce-scatter,
// all-gather, in one process or across processes) splits by this one rule.
std::vector<int64_t> shard_bounds(int64_t total, int ranks);

}  // namespace fanout
