#include "ops/matmul.h"

#include "engine/core/check.h"
#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/matmul.h"
#include "ops/cuda/matmul.h"

namespace fanout::ops {

namespace {

// The storage dtype of `t`, which must be f32 or bf16 (the bf16 contract).
DType float_dtype(const char* op, const char* name, const Tensor& t) {
  FANOUT_ASSERT(t.defined(), op, ": ", name, " is undefined");
  FANOUT_ASSERT(t.dtype() == DType::f32 || t.dtype() == DType::bf16, op, ": ", name, " is ",
                t.str(), ", expected f32 or bf16");
  return t.dtype();
}

// The distance between the rows of an (N, OC) matrix given as ld (0: dense).
int64_t row_stride(const char* op, const char* name, int64_t ld, int64_t OC) {
  FANOUT_ASSERT(ld == 0 || ld >= OC, op, ": ", name, " = ", ld, " is less than OC = ", OC);
  return ld == 0 ? OC : ld;
}

// Elements that N rows ld apart must hold: every row's padding, the last row's
// too (matmul.h: cuBLASLt may load a whole row's stride).
int64_t rows_extent(int64_t N, int64_t ld) {
  return N * ld;
}

}  // namespace

// ---------------------------------------------------------------------------

void matmul_forward(Stream& stream, const Tensor& out, const Tensor& inp, const Tensor& weight,
                    int64_t N, int64_t C, int64_t OC, int64_t ld_out) {
  const char* op = "matmul_forward";
  OpScope scope(stream, OpClass::gemm, op);
  // inp and weight share one dtype X; out is f32, or bf16 when X is.
  const DType X = float_dtype(op, "inp", inp);
  const DType Y = float_dtype(op, "out", out);
  FANOUT_ASSERT(X == DType::bf16 || Y == DType::f32, op, ": out is ", out.str(),
                " for f32 inputs, expected f32");
  const int64_t ld = row_stride(op, "ld_out", ld_out, OC);
  check_arg(op, "out", stream, out, Y, rows_extent(N, ld));
  check_arg(op, "inp", stream, inp, X, N * C);
  check_arg(op, "weight", stream, weight, X, OC * C);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        using cpu::bf16;
        if (X == DType::f32) {
          cpu::matmul_forward(out.data<float>(), inp.data<float>(), weight.data<float>(), N, C, OC,
                              ld);
        } else if (Y == DType::f32) {
          cpu::matmul_forward(out.data<float>(), inp.data<bf16>(), weight.data<bf16>(), N, C, OC,
                              ld);
        } else {
          cpu::matmul_forward(out.data<bf16>(), inp.data<bf16>(), weight.data<bf16>(), N, C, OC,
                              ld);
        }
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::matmul_forward(stream.cuda_handle(), out.raw(), Y, inp.raw(), weight.raw(), X, N, C, OC,
                           ld);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void matmul_forward_residual(Stream& stream, const Tensor& out, const Tensor& residual,
                             const Tensor& inp, const Tensor& weight, int64_t N, int64_t C,
                             int64_t OC) {
  const char* op = "matmul_forward_residual";
  OpScope scope(stream, OpClass::gemm, op);
  const DType X = float_dtype(op, "inp", inp);
  check_arg(op, "out", stream, out, DType::f32, N * OC);
  check_arg(op, "residual", stream, residual, DType::f32, N * OC);
  check_arg(op, "inp", stream, inp, X, N * C);
  check_arg(op, "weight", stream, weight, X, OC * C);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        if (X == DType::f32) {
          cpu::matmul_forward_residual(out.data<float>(), residual.data<float>(), inp.data<float>(),
                                       weight.data<float>(), N, C, OC);
        } else {
          cpu::matmul_forward_residual(out.data<float>(), residual.data<float>(),
                                       inp.data<cpu::bf16>(), weight.data<cpu::bf16>(), N, C, OC);
        }
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::matmul_forward_residual(stream.cuda_handle(), out.data<float>(), residual.data<float>(),
                                    inp.raw(), weight.raw(), X, N, C, OC);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void matmul_backward(Stream& stream, const Tensor& dinp, const Tensor& dweight, const Tensor& dout,
                     const Tensor& inp, const Tensor& weight, int64_t N, int64_t C, int64_t OC,
                     int64_t ld_dout, Dinp dinp_mode) {
  const char* op = "matmul_backward";
  const bool add = dinp_mode == Dinp::add;
  OpScope scope(stream, OpClass::gemm, op);
  // dout, inp and weight share one dtype X; the gradients are f32 whatever X is.
  const DType X = float_dtype(op, "dout", dout);
  const int64_t ld = row_stride(op, "ld_dout", ld_dout, OC);
  if (dinp.defined()) check_arg(op, "dinp", stream, dinp, DType::f32, N * C);
  if (dweight.defined()) check_arg(op, "dweight", stream, dweight, DType::f32, OC * C);
  check_arg(op, "dout", stream, dout, X, rows_extent(N, ld));
  check_arg(op, "inp", stream, inp, X, N * C);
  check_arg(op, "weight", stream, weight, X, OC * C);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {  // the tensors ride along, keeping their storage alive
        using cpu::bf16;
        float* dx = dinp.defined() ? dinp.data<float>() : nullptr;
        float* dw = dweight.defined() ? dweight.data<float>() : nullptr;
        if (X == DType::f32) {
          cpu::matmul_backward(dx, dw, dout.data<float>(), inp.data<float>(), weight.data<float>(),
                               N, C, OC, ld, add);
        } else {
          cpu::matmul_backward(dx, dw, dout.data<bf16>(), inp.data<bf16>(), weight.data<bf16>(), N,
                               C, OC, ld, add);
        }
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::matmul_backward(stream.cuda_handle(), dinp.defined() ? dinp.data<float>() : nullptr,
                            dweight.defined() ? dweight.data<float>() : nullptr, dout.raw(),
                            inp.raw(), weight.raw(), X, N, C, OC, ld, add);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void matmul_backward_weight_rows(Stream& stream, const Tensor& dweight_rows, const Tensor& dout,
                                 const Tensor& inp, int64_t N, int64_t C, int64_t OC, int64_t row0,
                                 int64_t rows, int64_t ld_dout) {
  const char* op = "matmul_backward_weight_rows";
  OpScope scope(stream, OpClass::gemm, op);
  FANOUT_ASSERT(row0 >= 0 && rows >= 0 && row0 + rows <= OC, op, ": rows [", row0, ", ",
                row0 + rows, ") of ", OC);
  const DType X = float_dtype(op, "dout", dout);
  const int64_t ld = row_stride(op, "ld_dout", ld_dout, OC);
  check_arg(op, "dweight_rows", stream, dweight_rows, DType::f32, rows * C);
  check_arg(op, "dout", stream, dout, X, rows_extent(N, ld));
  check_arg(op, "inp", stream, inp, X, N * C);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        using cpu::bf16;
        if (X == DType::f32) {
          cpu::matmul_backward_weight_rows(dweight_rows.data<float>(), dout.data<float>(),
                                           inp.data<float>(), N, C, OC, row0, rows, ld);
        } else {
          cpu::matmul_backward_weight_rows(dweight_rows.data<float>(), dout.data<bf16>(),
                                           inp.data<bf16>(), N, C, OC, row0, rows, ld);
        }
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      cuda::matmul_backward_weight_rows(stream.cuda_handle(), dweight_rows.data<float>(),
                                        dout.raw(), inp.raw(), X, N, C, row0, rows, ld);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

}  // namespace fanout::ops
