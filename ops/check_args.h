#pragma once
// Checks shared by the op dispatchers: every tensor an op touches is defined, on
// the stream's device, of the expected dtype, with enough elements (a failure is a
// bug in the caller, FANOUT_ASSERT, named by op and argument); and the refusal of a
// CUDA stream in a build without the CUDA backend.

#include <cstdint>
#include <initializer_list>

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace fanout::ops {

void check_arg(const char* op, const char* name, const Stream& stream, const Tensor& t, DType dtype,
               int64_t numel);

// check_arg for a tensor that may have any dtype of `dtypes` (the bf16 contract's
// "f32|bf16" arguments); returns the dtype it has, for the dispatcher's switch.
DType check_arg_any(const char* op, const char* name, const Stream& stream, const Tensor& t,
                    std::initializer_list<DType> dtypes, int64_t numel);

// The CUDA case of a dispatcher in a build without CUDA: throws fanout::Error
// "<op>: this build has no CUDA backend".
[[noreturn]] void no_cuda_backend(const char* op);

}  // namespace fanout::ops
