#include "reports/error_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <nlohmann/json.hpp>

namespace lnv::report {

void ErrorAccumulator::add(double a, double b) { add(a, b, std::fabs(a - b)); }

void ErrorAccumulator::add(double a, double b, double diff) {
  if (!std::isfinite(a) || !std::isfinite(b) || !std::isfinite(diff)) {
    ++nonfinite_;
    return;
  }
  const double m = std::max(std::fabs(a), std::fabs(b));
  abs_.push_back(diff);
  rel_.push_back(m > 0 ? diff / m : 0.0);
}

namespace {

// max, mean, median, p99 of `v` (sorted here); zeros when empty.
struct Summary {
  double max = 0, mean = 0, median = 0, p99 = 0;
};
Summary summarize(std::vector<double>& v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  // Nearest rank: the smallest value with at least p% of the values at or below it.
  const auto rank = [n](double p) {
    const size_t r = static_cast<size_t>(std::ceil(p * static_cast<double>(n)));
    return std::min(n, std::max<size_t>(r, 1)) - 1;
  };
  s.max = v.back();
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(n);
  s.median = v[rank(0.5)];
  s.p99 = v[rank(0.99)];
  return s;
}

}  // namespace

ErrorStats ErrorAccumulator::stats(std::string quantity, double bound, unsigned bits) {
  ErrorStats s;
  s.quantity = std::move(quantity);
  s.elements = size();
  s.nonfinite = nonfinite_;
  s.bound = bound;
  s.bits = bits;
  const Summary a = summarize(abs_), r = summarize(rel_);
  s.max_abs = a.max, s.mean_abs = a.mean, s.median_abs = a.median, s.p99_abs = a.p99;
  s.max_rel = r.max, s.mean_rel = r.mean, s.median_rel = r.median, s.p99_rel = r.p99;
  return s;
}

void to_json(nlohmann::json& j, const ErrorStats& s) {
  j = nlohmann::json{{"quantity", s.quantity},
                     {"elements", s.elements},
                     {"nonfinite", s.nonfinite},
                     {"abs", {{"max", s.max_abs}, {"mean", s.mean_abs},
                              {"median", s.median_abs}, {"p99", s.p99_abs}}},
                     {"rel", {{"max", s.max_rel}, {"mean", s.mean_rel},
                              {"median", s.median_rel}, {"p99", s.p99_rel}}},
                     {"bound", s.bound},
                     {"bits", s.bits}};
}

}  // namespace lnv::report
