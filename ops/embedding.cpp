#include "ops/embedding.h"

#include "engine/core/check.h"
#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/embedding.h"
#include "ops/cuda/embedding.h"

namespace fanout::ops {

namespace {

// out = table rows [row0, row0 + rows) looked up, zeros for other ids: both
// forwards (the whole table is rows [0, V)), `op` and `table_name` naming them.
void forward_rows(const char* op, const char* table_name, Stream& stream, const Tensor& out,
                  const Tensor& ids, const Tensor& table, int64_t N, int64_t C, int64_t V,
                  int64_t row0, int64_t rows) {
  OpScope scope(stream, OpClass::elementwise, op);
  FANOUT_ASSERT(row0 >= 0 && rows >= 0 && row0 + rows <= V, op, ": rows [", row0, ", ", row0 + rows,
                ") of ", V);
  check_arg(op, "out", stream, out, DType::f32, N * C);
  check_arg(op, "ids", stream, ids, DType::i32, N);
  // A bf16 table is read into the f32 residual stream (exact).
  const DType table_t =
      check_arg_any(op, table_name, stream, table, {DType::f32, DType::bf16}, rows * C);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        if (table_t == DType::f32)
          cpu::embedding_forward_rows(out.data<float>(), ids.data<int32_t>(), table.data<float>(),
                                      N, C, V, row0, rows);
        else
          cpu::embedding_forward_rows(out.data<float>(), ids.data<int32_t>(),
                                      table.data<cpu::bf16>(), N, C, V, row0, rows);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      if (table_t == DType::f32)
        cuda::embedding_forward_rows(stream.cuda_handle(), out.data<float>(), ids.data<int32_t>(),
                                     table.data<float>(), N, C, V, row0, rows);
      else
        cuda::embedding_forward_rows(stream.cuda_handle(), out.data<float>(), ids.data<int32_t>(),
                                     table.data<uint16_t>(), N, C, V, row0, rows);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

}  // namespace

void embedding_forward(Stream& stream, const Tensor& out, const Tensor& ids, const Tensor& table,
                       int64_t N, int64_t C, int64_t V) {
  forward_rows("embedding_forward", "table", stream, out, ids, table, N, C, V, 0, V);
}

void embedding_forward_rows(Stream& stream, const Tensor& out, const Tensor& ids,
                            const Tensor& table_rows, int64_t N, int64_t C, int64_t V, int64_t row0,
                            int64_t rows) {
  forward_rows("embedding_forward_rows", "table_rows", stream, out, ids, table_rows, N, C, V, row0,
               rows);
}

void embedding_backward(Stream& stream, const Tensor& dtable, const Tensor& dout, const Tensor& ids,
                        int64_t N, int64_t C, int64_t V) {
  const char* op = "embedding_backward";
  OpScope scope(stream, OpClass::elementwise, op);
  check_arg(op, "dtable", stream, dtable, DType::f32, V * C);
  check_arg(op, "dout", stream, dout, DType::f32, N * C);
  check_arg(op, "ids", stream, ids, DType::i32, N);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::embedding_backward(dtable.data<float>(), dout.data<float>(), ids.data<int32_t>(), N, C,
                                V);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::embedding_backward_f32(stream.cuda_handle(), dtable.data<float>(), dout.data<float>(),
                                   ids.data<int32_t>(), N, C, V);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void embedding_backward_rows(Stream& stream, const Tensor& dtable_rows, const Tensor& dout,
                             const Tensor& ids, int64_t N, int64_t C, int64_t V, int64_t row0,
                             int64_t rows) {
  const char* op = "embedding_backward_rows";
  OpScope scope(stream, OpClass::elementwise, op);
  FANOUT_ASSERT(row0 >= 0 && rows >= 0 && row0 + rows <= V, op, ": rows [", row0, ", ", row0 + rows,
                ") of ", V);
  check_arg(op, "dtable_rows", stream, dtable_rows, DType::f32, rows * C);
  check_arg(op, "dout", stream, dout, DType::f32, N * C);
  check_arg(op, "ids", stream, ids, DType::i32, N);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        cpu::embedding_backward_rows(dtable_rows.data<float>(), dout.data<float>(),
                                     ids.data<int32_t>(), N, C, V, row0, rows);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::embedding_backward_rows_f32(stream.cuda_handle(), dtable_rows.data<float>(),
                                        dout.data<float>(), ids.data<int32_t>(), N, C, row0, rows);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

}  // namespace fanout::ops
