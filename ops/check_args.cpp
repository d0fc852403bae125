#include "ops/check_args.h"

#include <algorithm>
#include <string>

#include "engine/core/check.h"

namespace fanout::ops {

void check_arg(const char* op, const char* name, const Stream& stream, const Tensor& t, DType dtype,
               int64_t numel) {
  FANOUT_ASSERT(t.defined(), op, ": ", name, " is undefined");
  FANOUT_ASSERT(t.dtype() == dtype, op, ": ", name, " is ", t.str(), ", expected ",
                dtype_name(dtype));
  FANOUT_ASSERT(t.numel() >= numel, op, ": ", name, " is ", t.str(), ", needs ", numel,
                " elements");
  Device d = t.device();
  Device s = stream.device();
  FANOUT_ASSERT(d.kind == s.kind && (d.is_cpu() || d.index == s.index), op, ": ", name, " is ",
                t.str(), " but the stream is ", stream.name());
}

DType check_arg_any(const char* op, const char* name, const Stream& stream, const Tensor& t,
                    std::initializer_list<DType> dtypes, int64_t numel) {
  FANOUT_ASSERT(t.defined(), op, ": ", name, " is undefined");
  if (std::find(dtypes.begin(), dtypes.end(), t.dtype()) == dtypes.end()) {
    std::string expected;
    for (DType d : dtypes) expected += std::string(expected.empty() ? "" : " or ") + dtype_name(d);
    FANOUT_ASSERT(false, op, ": ", name, " is ", t.str(), ", expected ", expected);
  }
  check_arg(op, name, stream, t, t.dtype(), numel);
  return t.dtype();
}

void no_cuda_backend(const char* op) {
  detail::throw_error(detail::str_cat(op, ": this build has no CUDA backend"));
}

}  // namespace fanout::ops
