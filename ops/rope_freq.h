#pragma once
// RoPE's inverse frequencies, plain or rescaled as HF's rope_scaling says (linear,
// or "llama3" for Llama 3.1/3.2): one inline function that the CPU tables and the
// CUDA kernel both call, so the two backends share the math and never drift apart.
// Parsing rope_scaling from config.json is models/rope_scaling.h's job.

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define FANOUT_ROPE_HOST_DEVICE __host__ __device__
#else
#define FANOUT_ROPE_HOST_DEVICE
#endif

namespace fanout::ops {

enum class RopeScalingType : int { none, linear, llama3 };

// HF's rope_scaling: `factor` for linear and llama3; the other three for llama3 only.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::none;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// Everything that decides the angles: base theta and the scaling. Converts from a
// bare theta (plain RoPE), so rope_forward(..., 10000.0, ...) still reads naturally.
struct RopeFreq {
  double theta = 10000.0;
  RopeScaling scaling;

  RopeFreq() = default;
  RopeFreq(double theta_) : theta(theta_) {}  // NOLINT(google-explicit-constructor)
  RopeFreq(double theta_, const RopeScaling& scaling_) : theta(theta_), scaling(scaling_) {}
};

// inv_freq of pair i (0 <= i < D/2) of a head of D dims, in double.
//   plain:  1 / theta^(2i/D)
//   linear: plain / factor
//   llama3 (HF's _compute_llama3_parameters), wavelen = 2 pi / plain:
//     wavelen > old_ctx / low_freq_factor   -> plain / factor     (low frequencies)
//     wavelen < old_ctx / high_freq_factor  -> plain              (high frequencies)
//     otherwise smooth = (old_ctx / wavelen - low) / (high - low),
//               (1 - smooth) * plain / factor + smooth * plain
FANOUT_ROPE_HOST_DEVICE inline double rope_inv_freq(const RopeFreq& f, int64_t i, int64_t D) {
  const double plain = 1.0 / pow(f.theta, static_cast<double>(2 * i) / static_cast<double>(D));
  const RopeScaling& s = f.scaling;
  if (s.type == RopeScalingType::linear) return plain / s.factor;
  if (s.type != RopeScalingType::llama3) return plain;
  const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
  const double wavelen = 6.283185307179586 / plain;  // 2 pi / inv_freq
  if (wavelen > old_ctx / s.low_freq_factor) return plain / s.factor;
  if (wavelen < old_ctx / s.high_freq_factor) return plain;
  const double smooth =
      (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * plain / s.factor + smooth * plain;
}

}  // namespace fanout::ops
