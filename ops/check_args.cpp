#include "ops/check_args.h"

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

}  // namespace fanout::ops
