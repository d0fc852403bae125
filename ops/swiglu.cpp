#include "ops/swiglu.h"

#include "engine/core/check.h"
#include "engine/core/op_profile.h"
#include "ops/check_args.h"
#include "ops/cpu/bf16.h"
#include "ops/cpu/swiglu.h"
#include "ops/cuda/swiglu.h"

namespace fanout::ops {

namespace {

// The elements a rows x cols block with rows ld apart spans.
int64_t span(int64_t rows, int64_t cols, int64_t ld) {
  return rows > 0 && cols > 0 ? (rows - 1) * ld + cols : 0;
}

// Contiguous rows (ld == cols) are one flat row: the backends' flat loops.
void flatten(int64_t& rows, int64_t& cols, int64_t& ld) {
  if (ld != cols || rows <= 1) return;
  cols *= rows, ld = cols, rows = 1;
}

void forward(const char* op, Stream& stream, const Tensor& out, const Tensor& gate,
             const Tensor& up, int64_t rows, int64_t cols, int64_t ld) {
  OpScope scope(stream, OpClass::elementwise, op);
  FANOUT_ASSERT(rows >= 0 && cols >= 0 && ld >= cols, op, ": rows ", rows, " cols ", cols, " ld ",
                ld);
  // gate, up, out: all f32 or all bf16.
  const DType X =
      check_arg_any(op, "gate", stream, gate, {DType::f32, DType::bf16}, span(rows, cols, ld));
  check_arg(op, "up", stream, up, X, span(rows, cols, ld));
  check_arg(op, "out", stream, out, X, rows * cols);
  flatten(rows, cols, ld);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        if (X == DType::f32)
          cpu::swiglu_forward(out.data<float>(), gate.data<float>(), up.data<float>(), rows, cols,
                              ld);
        else
          cpu::swiglu_forward(out.data<cpu::bf16>(), gate.data<cpu::bf16>(), up.data<cpu::bf16>(),
                              rows, cols, ld);
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
      if (X == DType::f32)
        cuda::swiglu_forward(stream.cuda_handle(), out.data<float>(), gate.data<float>(),
                             up.data<float>(), rows, cols, ld);
      else
        cuda::swiglu_forward(stream.cuda_handle(), out.data<uint16_t>(), gate.data<uint16_t>(),
                             up.data<uint16_t>(), rows, cols, ld);
      return;
#else
      no_cuda_backend(op);
#endif
  }
}

void backward(const char* op, Stream& stream, const Tensor& dgate, const Tensor& dup,
              const Tensor& dout, const Tensor& gate, const Tensor& up, int64_t rows, int64_t cols,
              int64_t ld) {
  OpScope scope(stream, OpClass::elementwise, op);
  FANOUT_ASSERT(rows >= 0 && cols >= 0 && ld >= cols, op, ": rows ", rows, " cols ", cols, " ld ",
                ld);
  // gate, up, dgate, dup share one dtype X (f32 or bf16); dout is f32 or bf16 on its own.
  const int64_t n = span(rows, cols, ld);
  const DType X = check_arg_any(op, "gate", stream, gate, {DType::f32, DType::bf16}, n);
  check_arg(op, "up", stream, up, X, n);
  check_arg(op, "dgate", stream, dgate, X, n);
  check_arg(op, "dup", stream, dup, X, n);
  const DType G = check_arg_any(op, "dout", stream, dout, {DType::f32, DType::bf16}, rows * cols);
  flatten(rows, cols, ld);
  switch (stream.device().kind) {
    case DeviceKind::cpu:
      stream.enqueue([=] {
        auto run = [&]<typename Xs, typename Gs>() {
          cpu::swiglu_backward(dgate.data<Xs>(), dup.data<Xs>(), dout.data<Gs>(), gate.data<Xs>(),
                               up.data<Xs>(), rows, cols, ld);
        };
        using cpu::bf16;
        if (X == DType::f32)
          G == DType::f32 ? run.operator()<float, float>() : run.operator()<float, bf16>();
        else
          G == DType::f32 ? run.operator()<bf16, float>() : run.operator()<bf16, bf16>();
      });
      return;
    case DeviceKind::cuda:
#ifdef FANOUT_HAS_CUDA
    {
      // The same storage switch, bf16 as its raw bits.
      auto run = [&]<typename Xs, typename Gs>() {
        cuda::swiglu_backward(stream.cuda_handle(), dgate.data<Xs>(), dup.data<Xs>(),
                              dout.data<Gs>(), gate.data<Xs>(), up.data<Xs>(), rows, cols, ld);
      };
      if (X == DType::f32)
        G == DType::f32 ? run.operator()<float, float>() : run.operator()<float, uint16_t>();
      else
        G == DType::f32 ? run.operator()<uint16_t, float>() : run.operator()<uint16_t, uint16_t>();
      return;
    }
#else
      no_cuda_backend(op);
#endif
  }
}

}  // namespace

void swiglu_forward(Stream& stream, const Tensor& out, const Tensor& gate, const Tensor& up,
                    int64_t n) {
  forward("swiglu_forward", stream, out, gate, up, 1, n, n);
}

void swiglu_backward(Stream& stream, const Tensor& dgate, const Tensor& dup, const Tensor& dout,
                     const Tensor& gate, const Tensor& up, int64_t n) {
  backward("swiglu_backward", stream, dgate, dup, dout, gate, up, 1, n, n);
}

void swiglu_forward_rows(Stream& stream, const Tensor& out, const Tensor& gate, const Tensor& up,
                         int64_t rows, int64_t cols, int64_t ld) {
  forward("swiglu_forward", stream, out, gate, up, rows, cols, ld);
}

void swiglu_backward_rows(Stream& stream, const Tensor& dgate, const Tensor& dup,
                          const Tensor& dout, const Tensor& gate, const Tensor& up, int64_t rows,
                          int64_t cols, int64_t ld) {
  backward("swiglu_backward", stream, dgate, dup, dout, gate, up, rows, cols, ld);
}

}  // namespace fanout::ops
