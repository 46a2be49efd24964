// Error statistics of one compared quantity (an output or a gradient) between two
// evaluations, as Polygraphy reports them: max, mean, median and p99 of the absolute and
// the relative difference, with the bound and precision they were judged at. Check and
// equiv reports carry one per quantity (docs/spec/reports.md); tensors are never inline.
//
//   ErrorAccumulator acc;
//   for (...) acc.add(a[i], b[i]);      // every element of every trial
//   ErrorStats s = acc.stats("output 'y'", bound, bits);
//
// The relative difference of an element is |a - b| / max(|a|, |b|), and 0 where both are 0:
// symmetric in a and b, at most 2 for finite values. Percentiles are nearest-rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace lnv::report {

struct ErrorStats {
  std::string quantity;   // "output 'y'", "gradient of input 'x'", "gradient of param 'W'"
  int64_t elements = 0;   // elements compared, over all trials
  double max_abs = 0, mean_abs = 0, median_abs = 0, p99_abs = 0;
  double max_rel = 0, mean_rel = 0, median_rel = 0, p99_rel = 0;
  int64_t nonfinite = 0;  // elements where either value was NaN or infinite (not in the stats)
  double bound = 0;       // the absolute rounding bound the differences were judged against
  unsigned bits = 0;      // the precision of the evaluations (0 for float runs)
};

class ErrorAccumulator {
 public:
  void add(double a, double b);
  // For values compared at a higher precision than a double: `diff` is |a - b| computed
  // there (a double difference of the rounded values would lose it).
  void add(double a, double b, double diff);
  int64_t size() const { return static_cast<int64_t>(abs_.size()); }
  // Sorts what it holds; the accumulator can be added to afterwards.
  ErrorStats stats(std::string quantity, double bound, unsigned bits);

 private:
  std::vector<double> abs_, rel_;
  int64_t nonfinite_ = 0;
};

void to_json(nlohmann::json& j, const ErrorStats& s);

}  // namespace lnv::report
