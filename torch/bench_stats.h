// Summaries of repeated timings: median and spread, never a single sample.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>
#include <vector>

namespace lnv::torch {

struct Timing {
  std::vector<double> samples;  // seconds per call, one per repeat, in run order
  double median = 0, min = 0, max = 0;
  double q1 = 0, q3 = 0;  // first and third quartiles
  // (max - min) / median: how far apart the repeats landed (one preempted or disturbed
  // sample sets it).
  double spread() const { return median > 0 ? (max - min) / median : 0; }
  // (q3 - q1) / median: the spread of the middle half of the repeats, which a few
  // disturbed samples do not move.
  double iqr() const { return median > 0 ? (q3 - q1) / median : 0; }
};

// The p-quantile (0 <= p <= 1) of sorted values, interpolating linearly between the two
// nearest ranks (numpy's default): the median is quantile(v, 0.5).
inline double quantile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double at = p * double(sorted.size() - 1);
  const size_t lo = size_t(at);
  if (lo + 1 >= sorted.size()) return sorted.back();
  return sorted[lo] + (at - double(lo)) * (sorted[lo + 1] - sorted[lo]);
}

inline Timing summarize(std::vector<double> samples) {
  Timing t;
  t.samples = samples;
  if (samples.empty()) return t;
  std::sort(samples.begin(), samples.end());
  t.median = quantile(samples, 0.5);
  t.q1 = quantile(samples, 0.25);
  t.q3 = quantile(samples, 0.75);
  t.min = samples.front();
  t.max = samples.back();
  return t;
}

// Which clock a benchmark reads. Wall time is what a user waits; process CPU time (all
// threads together) leaves out the time the process sat descheduled, which on a shared,
// loaded machine is most of the noise (with more than one thread it also counts the
// threads' spin-waiting, so compare like with like).
enum class Clock { wall, cpu };

inline double now_seconds(Clock c) {
  if (c == Clock::wall)
    return std::chrono::duration<double>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

inline const char* clock_name(Clock c) { return c == Clock::wall ? "wall" : "cpu"; }

}  // namespace lnv::torch
