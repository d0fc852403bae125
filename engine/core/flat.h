#pragma once
// Flat-buffer arithmetic, the only math the engine owns (collectives and gradient
// accumulation need it; everything else lives in ops/). f32 buffers on one device,
// queued on a stream of that device. Copies are tensor_copy (tensor.h).

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout {

// dst[i] = value
void flat_fill(Stream& stream, const Tensor& dst, float value);
// dst[i] += src[i]   (same device, same numel)
void flat_add(Stream& stream, const Tensor& dst, const Tensor& src);
// dst[i] *= alpha
void flat_scale(Stream& stream, const Tensor& dst, float alpha);

}  // namespace fanout
