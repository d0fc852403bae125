#pragma once
// The spread of repeated step times, shared by `fanout bench` and the walkthrough:
// the median, the quartiles and the extremes, the spread as ± a share of the
// median, and whether two such spreads overlap (then a ranking of the two is noise).

#include <string>
#include <vector>

namespace fanout::presentation {

// The median, the quartiles q1 and q3 (linear interpolation between order
// statistics, numpy's default; the IQR is q3 - q1) and the extremes of the samples,
// in their unit (the walkthrough's milliseconds, bench's seconds). No samples: all
// zero.
struct StepTimes {
  int samples = 0;
  double median = 0, q1 = 0, q3 = 0, min = 0, max = 0;
};
StepTimes step_times_summarize(std::vector<double> samples);
// "4.12 ms (IQR 4.00-4.20, min-max 3.90-4.50, 5 steps)", for samples in ms.
std::string step_times_str(const StepTimes& t);

// Half the IQR over the median: 0.05 when the middle half of the steps lies within
// about ±5 % of the median (0 without samples).
double step_times_spread(const StepTimes& t);
// "±4.8%" below 10 %, "±23%" above.
std::string step_times_spread_str(const StepTimes& t);
// Whether the interquartile ranges [q1, q3] of a and b overlap.
bool step_times_overlap(const StepTimes& a, const StepTimes& b);

}  // namespace fanout::presentation
