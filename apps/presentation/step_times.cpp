#include "apps/presentation/step_times.h"

#include <algorithm>

#include "apps/presentation/text_format.h"

namespace fanout::presentation {

StepTimes step_times_summarize(std::vector<double> samples) {
  StepTimes t;
  if (samples.empty()) return t;
  std::sort(samples.begin(), samples.end());
  // Linear interpolation between the order statistics around rank q*(n-1).
  auto quantile = [&](double q) {
    const double at = q * static_cast<double>(samples.size() - 1);
    const size_t lo = static_cast<size_t>(at);
    const size_t hi = std::min(lo + 1, samples.size() - 1);
    return samples[lo] + (samples[hi] - samples[lo]) * (at - static_cast<double>(lo));
  };
  t.samples = static_cast<int>(samples.size());
  t.median = quantile(0.5), t.q1 = quantile(0.25), t.q3 = quantile(0.75);
  t.min = samples.front(), t.max = samples.back();
  return t;
}

std::string step_times_str(const StepTimes& t) {
  return strf("%.2f ms (IQR %.2f-%.2f, min-max %.2f-%.2f ms, %d step%s)", t.median, t.q1, t.q3,
              t.min, t.max, t.samples, t.samples == 1 ? "" : "s");
}

double step_times_spread(const StepTimes& t) {
  return t.median > 0 ? (t.q3 - t.q1) / (2 * t.median) : 0;
}

std::string step_times_spread_str(const StepTimes& t) {
  const double percent = 100 * step_times_spread(t);
  return strf(percent < 10 ? "±%.1f%%" : "±%.0f%%", percent);
}

bool step_times_overlap(const StepTimes& a, const StepTimes& b) {
  return a.q1 <= b.q3 && b.q1 <= a.q3;
}

}  // namespace fanout::presentation
