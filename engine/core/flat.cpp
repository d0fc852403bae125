#include "engine/core/flat.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "engine/core/check.h"
#include "engine/core/dtype.h"
#include "engine/core/flat_cuda.h"

namespace fanout {

namespace {
constexpr int64_t kGrain = 1 << 16;

void check_on(const Stream& stream, const Tensor& t, const char* what) {
  FANOUT_ASSERT(t.device().kind == stream.device().kind &&
                    (t.device().is_cpu() || t.device() == stream.device()),
                what, ": ", t.str(), " on stream ", stream.name());
}

void check_f32(const Stream& stream, const Tensor& t, const char* what) {
  FANOUT_ASSERT(t.dtype() == DType::f32, what, ": f32 buffer expected, got ", t.str());
  check_on(stream, t, what);
}

// dst is a bf16 buffer the size of src, on src's device.
void check_bf16_like(const Tensor& dst, const Tensor& src, const char* what) {
  FANOUT_ASSERT(
      dst.dtype() == DType::bf16 && dst.numel() == src.numel() && dst.device() == src.device(),
      what, " ", src.str(), " into ", dst.str());
}

// Runs body(begin, end) over [0, n) in oneTBB chunks.
template <typename F>
void parallel_range(int64_t n, F body) {
  // A one-thread device arena (the default) gains nothing from splitting.
  if (n <= kGrain || tbb::this_task_arena::max_concurrency() <= 1) return body(int64_t{0}, n);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, kGrain),
                    [&](const tbb::blocked_range<int64_t>& r) { body(r.begin(), r.end()); });
}
}  // namespace

void flat_fill(Stream& stream, const Tensor& dst, float value) {
  check_f32(stream, dst, "flat_fill");
  int64_t n = dst.numel();
  if (dst.device().is_cuda())
    return cuda::flat_fill_f32(stream.cuda_handle(), dst.data<float>(), n, value);
  stream.enqueue([dst, n, value] {
    float* d = dst.data<float>();
    parallel_range(n, [&](int64_t b, int64_t e) { std::fill(d + b, d + e, value); });
  });
}

void flat_add(Stream& stream, const Tensor& dst, const Tensor& src) {
  check_f32(stream, dst, "flat_add");
  FANOUT_ASSERT(dst.numel() == src.numel(), "flat_add ", src.str(), " into ", dst.str());
  FANOUT_ASSERT(dst.device() == src.device(), "flat_add across devices: copy first");
  int64_t n = dst.numel();
  if (src.dtype() == DType::bf16) {
    if (dst.device().is_cuda()) {
      return cuda::flat_add_bf16_to_f32(stream.cuda_handle(), dst.data<float>(),
                                        src.data<uint16_t>(), n);
    }
    stream.enqueue([dst, src, n] {
      float* d = dst.data<float>();
      const uint16_t* s = src.data<uint16_t>();
      parallel_range(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) d[i] += bf16_to_float(s[i]);
      });
    });
    return;
  }
  check_f32(stream, src, "flat_add");
  if (dst.device().is_cuda()) {
    return cuda::flat_add_f32(stream.cuda_handle(), dst.data<float>(), src.data<float>(), n);
  }
  stream.enqueue([dst, src, n] {
    float* d = dst.data<float>();
    const float* s = src.data<float>();
    parallel_range(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) d[i] += s[i];
    });
  });
}

void flat_round_bf16(Stream& stream, const Tensor& dst, const Tensor& src) {
  check_f32(stream, src, "flat_round_bf16");
  check_bf16_like(dst, src, "flat_round_bf16");
  int64_t n = dst.numel();
  if (dst.device().is_cuda()) {
    return cuda::flat_round_bf16(stream.cuda_handle(), dst.data<uint16_t>(), src.data<float>(), n);
  }
  stream.enqueue([dst, src, n] {
    uint16_t* d = dst.data<uint16_t>();
    const float* s = src.data<float>();
    parallel_range(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) d[i] = float_to_bf16(s[i]);
    });
  });
}

void flat_add_round_bf16(Stream& stream, const Tensor& dst, const Tensor& src) {
  const bool src_bf16 = src.dtype() == DType::bf16;
  if (!src_bf16) check_f32(stream, src, "flat_add_round_bf16");
  check_bf16_like(dst, src, "flat_add_round_bf16");
  check_on(stream, dst, "flat_add_round_bf16");
  int64_t n = dst.numel();
  if (dst.device().is_cuda()) {
    return cuda::flat_add_round_bf16(stream.cuda_handle(), dst.data<uint16_t>(), src.raw(),
                                     src_bf16, n);
  }
  stream.enqueue([dst, src, n, src_bf16] {
    uint16_t* d = dst.data<uint16_t>();
    parallel_range(n, [&](int64_t b, int64_t e) {
      if (src_bf16) {
        const uint16_t* s = src.data<uint16_t>();
        for (int64_t i = b; i < e; ++i)
          d[i] = float_to_bf16(bf16_to_float(d[i]) + bf16_to_float(s[i]));
      } else {
        const float* s = src.data<float>();
        for (int64_t i = b; i < e; ++i)
          d[i] = float_to_bf16(bf16_to_float(d[i]) + bf16_to_float(float_to_bf16(s[i])));
      }
    });
  });
}

void flat_widen_bf16(Stream& stream, const Tensor& dst, const Tensor& src) {
  check_f32(stream, dst, "flat_widen_bf16");
  FANOUT_ASSERT(
      src.dtype() == DType::bf16 && dst.numel() == src.numel() && dst.device() == src.device(),
      "flat_widen_bf16 ", src.str(), " into ", dst.str());
  int64_t n = dst.numel();
  if (dst.device().is_cuda()) {
    return cuda::flat_widen_bf16(stream.cuda_handle(), dst.data<float>(), src.data<uint16_t>(), n);
  }
  stream.enqueue([dst, src, n] {
    float* d = dst.data<float>();
    const uint16_t* s = src.data<uint16_t>();
    parallel_range(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) d[i] = bf16_to_float(s[i]);
    });
  });
}

void flat_scale(Stream& stream, const Tensor& dst, float alpha) {
  check_f32(stream, dst, "flat_scale");
  int64_t n = dst.numel();
  if (dst.device().is_cuda())
    return cuda::flat_scale_f32(stream.cuda_handle(), dst.data<float>(), n, alpha);
  stream.enqueue([dst, n, alpha] {
    float* d = dst.data<float>();
    parallel_range(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) d[i] *= alpha;
    });
  });
}

#ifndef FANOUT_HAS_CUDA
namespace cuda {
void flat_fill_f32(void*, float*, int64_t, float) {
  FANOUT_ASSERT(false, "no CUDA backend");
}
void flat_add_f32(void*, float*, const float*, int64_t) {
  FANOUT_ASSERT(false, "no CUDA backend");
}
void flat_add_bf16_to_f32(void*, float*, const uint16_t*, int64_t) {
  FANOUT_ASSERT(false, "no CUDA backend");
}
void flat_round_bf16(void*, uint16_t*, const float*, int64_t) {
  FANOUT_ASSERT(false, "no CUDA backend");
}
void flat_add_round_bf16(void*, uint16_t*, const void*, bool, int64_t) {
  FANOUT_ASSERT(false, "no CUDA backend");
}
void flat_widen_bf16(void*, float*, const uint16_t*, int64_t) {
  FANOUT_ASSERT(false, "no CUDA backend");
}
void flat_scale_f32(void*, float*, int64_t, float) {
  FANOUT_ASSERT(false, "no CUDA backend");
}
}  // namespace cuda
#endif

std::vector<int64_t> shard_bounds(int64_t total, int ranks) {
  FANOUT_ASSERT(ranks > 0, "shard_bounds over ", ranks, " ranks");
  std::vector<int64_t> b(ranks + 1);
  for (int r = 0; r <= ranks; ++r) b[r] = total * r / ranks;
  return b;
}

}  // namespace fanout
