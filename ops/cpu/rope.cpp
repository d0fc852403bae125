#include "ops/cpu/rope.h"

#include "ops/cpu/bf16.h"
#include "ops/cpu/parallel.h"

#include <cmath>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include <tbb/parallel_for.h>

namespace fanout::ops::cpu {

namespace {

// The type a row rotates in: double for float (as before bf16 existed: the f32
// results stay bit for bit what they were) and double; float for bf16, so that the
// one rounding is float -> bf16 at the store, not double -> float -> bf16.
template <typename Real>
struct RotateIn {
  using type = double;
};
template <>
struct RotateIn<bf16> {
  using type = float;
};

// (T, D/2) cos and sign * sin tables for positions pos_offset.., shared by every
// batch row and head. A training step asks for the same few tables 4 L times
// (q and k, forward and backward, every layer): each device thread keeps the ones
// it made, so the sines are computed once per shape, not once per call.
template <typename R>
struct RopeTables {
  std::vector<R> cos_t, sin_t;
};

// Shared pointers: a caller keeps its tables even if, while its loop waits, this
// thread runs another rope (oneTBB may run other work there) that clears the cache.
template <typename R>
std::shared_ptr<const RopeTables<R>> rope_tables(int64_t T, int64_t D, const RopeFreq& freq,
                                                 int64_t pos_offset, double sign) {
  const RopeScaling& sc = freq.scaling;
  using Key =
      std::tuple<int64_t, int64_t, double, int, double, double, double, int64_t, int64_t, double>;
  thread_local std::map<Key, std::shared_ptr<const RopeTables<R>>> cache;
  Key key{T,
          D,
          freq.theta,
          static_cast<int>(sc.type),
          sc.factor,
          sc.low_freq_factor,
          sc.high_freq_factor,
          sc.original_max_position_embeddings,
          pos_offset,
          sign};
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  // Generation asks for a new pos_offset every token: keep the cache small.
  if (cache.size() >= 16) cache.clear();
  const int64_t half = D / 2;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = rope_inv_freq(freq, i, D);
  auto made = std::make_shared<RopeTables<R>>();
  RopeTables<R>& t = *made;
  t.cos_t.resize(T * half), t.sin_t.resize(T * half);
  for (int64_t p = 0; p < T; ++p) {
    double pos = static_cast<double>(pos_offset + p);
    for (int64_t i = 0; i < half; ++i) {
      t.cos_t[p * half + i] = static_cast<R>(std::cos(pos * inv_freq[i]));
      t.sin_t[p * half + i] = static_cast<R>(sign * std::sin(pos * inv_freq[i]));
    }
  }
  cache.emplace(key, made);
  return made;
}

// Rotates every pair (x[i], x[i + D/2]) of every (b, t, h) row by angle * sign
// ((b, t) rows ld_in apart in inp, ld_out in out):
// sign +1 is the forward rotation, -1 its transpose (the backward). Both halves
// are read before either is written, so out may alias inp.
template <typename Real>
void rope_rotate(Real* out, const Real* inp, int64_t B, int64_t T, int64_t H, int64_t D,
                 const RopeFreq& freq, int64_t pos_offset, double sign, int64_t ld_out,
                 int64_t ld_in) {
  using R = typename RotateIn<Real>::type;
  const int64_t half = D / 2;
  if (ld_out == 0) ld_out = H * D;
  if (ld_in == 0) ld_in = H * D;
  const std::shared_ptr<const RopeTables<R>> tables = rope_tables<R>(T, D, freq, pos_offset, sign);
  const std::vector<R>& cos_t = tables->cos_t;
  const std::vector<R>& sin_t = tables->sin_t;
  parallel_for_index(int64_t{0}, B * T, [&](int64_t bt) {
    const R* c = cos_t.data() + (bt % T) * half;
    const R* s = sin_t.data() + (bt % T) * half;
    for (int64_t h = 0; h < H; ++h) {
      const Real* x = inp + bt * ld_in + h * D;
      Real* y = out + bt * ld_out + h * D;
      for (int64_t i = 0; i < half; ++i) {
        R x1 = load(x[i]), x2 = load(x[i + half]);
        store(y[i], x1 * c[i] - x2 * s[i]);
        store(y[i + half], x2 * c[i] + x1 * s[i]);
      }
    }
  });
}

}  // namespace

// ---

template <typename Real>
void rope_forward(Real* out, const Real* inp, int64_t B, int64_t T, int64_t H, int64_t D,
                  const RopeFreq& freq, int64_t pos_offset, int64_t ld_out, int64_t ld_in) {
  rope_rotate(out, inp, B, T, H, D, freq, pos_offset, 1.0, ld_out, ld_in);
}

template <typename Real>
void rope_backward(Real* dinp, const Real* dout, int64_t B, int64_t T, int64_t H, int64_t D,
                   const RopeFreq& freq, int64_t pos_offset, int64_t ld_dinp, int64_t ld_dout) {
  // The forward is an orthogonal rotation per pair, so its Jacobian-transpose is
  // the rotation by the negative angle.
  rope_rotate(dinp, dout, B, T, H, D, freq, pos_offset, -1.0, ld_dinp, ld_dout);
}

template void rope_forward<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                  const RopeFreq&, int64_t, int64_t, int64_t);
template void rope_forward<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t,
                                   const RopeFreq&, int64_t, int64_t, int64_t);
template void rope_backward<float>(float*, const float*, int64_t, int64_t, int64_t, int64_t,
                                   const RopeFreq&, int64_t, int64_t, int64_t);
template void rope_forward<bf16>(bf16*, const bf16*, int64_t, int64_t, int64_t, int64_t,
                                 const RopeFreq&, int64_t, int64_t, int64_t);
template void rope_backward<bf16>(bf16*, const bf16*, int64_t, int64_t, int64_t, int64_t,
                                  const RopeFreq&, int64_t, int64_t, int64_t);
template void rope_backward<double>(double*, const double*, int64_t, int64_t, int64_t, int64_t,
                                    const RopeFreq&, int64_t, int64_t, int64_t);

}  // namespace fanout::ops::cpu
