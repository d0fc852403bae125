#include "engine/parallel/grid.h"

#include "engine/core/check.h"

namespace fanout::parallel {

std::string describe_grid(const std::vector<Device>& devices, int stages, int tensor) {
  const int n = static_cast<int>(devices.size()), K = stages, T = tensor;
  FANOUT_CHECK(K >= 1 && T >= 1 && n % (int64_t{K} * T) == 0, "--pp ", K,
               T > 1 ? " x --tp " + std::to_string(T) : "", " does not divide the ", n,
               " devices listed");
  const int D = n / (K * T);
  auto count = [](int v, const char* one, const char* many) {
    return std::to_string(v) + " " + (v == 1 ? one : many);
  };
  std::string out;
  if (D > 1) out += count(D, "replica", "replicas");
  if (K > 1) out += (out.empty() ? "" : " x ") + count(K, "stage", "stages");
  if (T > 1) out += (out.empty() ? "" : " x ") + count(T, "tensor rank", "tensor ranks");
  if (out.empty()) out = "1 device";
  out += ":";
  for (int d = 0; d < D; ++d) {
    if (D > 1) out += std::string(d ? ";" : "") + " replica " + std::to_string(d) + " =";
    for (int s = 0; s < K; ++s) {
      out += s ? ", " : " ";
      if (K > 1) out += "stage " + std::to_string(s) + " on ";
      for (int t = 0; t < T; ++t) out += (t ? "+" : "") + devices[(d * K + s) * T + t].str();
    }
  }
  return out;
}

}  // namespace fanout::parallel
