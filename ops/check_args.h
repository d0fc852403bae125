#pragma once
// Argument checks shared by the op dispatchers: every tensor an op touches is
// defined, on the stream's device, of the expected dtype, with enough elements.
// A failure is a bug in the caller (FANOUT_ASSERT), named by op and argument.

#include <cstdint>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

void check_arg(const char* op, const char* name, const Stream& stream, const Tensor& t, DType dtype,
               int64_t numel);

}  // namespace fanout::ops
