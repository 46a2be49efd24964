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
  // (max - min) / median: how far apart the repeats landed.
  double spread() const { return median > 0 ? (max - min) / median : 0; }
};

inline Timing summarize(std::vector<double> samples) {
  Timing t;
  t.samples = samples;
  if (samples.empty()) return t;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  t.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
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
