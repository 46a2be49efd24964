// ErrorAccumulator (reports/error_stats.h): max, mean, median and p99 (nearest rank) of the
// absolute and relative differences, non-finite values counted apart, and the JSON shape.
#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "reports/error_stats.h"

namespace lnv::report {
namespace {

TEST(ErrorStats, StatisticsOfKnownDifferences) {
  ErrorAccumulator acc;
  // Differences 1..100 against a = 100: |a - b| = k, relative k / max(100, 100 - k) = k/100.
  for (int k = 100; k >= 1; --k) acc.add(100.0, 100.0 - k);
  const ErrorStats s = acc.stats("output 'y'", 0.5, 53);
  EXPECT_EQ(s.elements, 100);
  EXPECT_EQ(s.nonfinite, 0);
  EXPECT_DOUBLE_EQ(s.max_abs, 100.0);
  EXPECT_DOUBLE_EQ(s.mean_abs, 50.5);
  EXPECT_DOUBLE_EQ(s.median_abs, 50.0);  // nearest rank: the 50th of 100
  EXPECT_DOUBLE_EQ(s.p99_abs, 99.0);     // the 99th of 100
  EXPECT_DOUBLE_EQ(s.max_rel, 1.0);
  EXPECT_DOUBLE_EQ(s.median_rel, 0.5);
  EXPECT_DOUBLE_EQ(s.p99_rel, 0.99);
  EXPECT_DOUBLE_EQ(s.bound, 0.5);
  EXPECT_EQ(s.bits, 53u);
  EXPECT_EQ(s.quantity, "output 'y'");
}

TEST(ErrorStats, RelativeDifferenceIsSymmetricAndZeroForTwoZeros) {
  ErrorAccumulator ab, ba;
  ab.add(2.0, -2.0);
  ba.add(-2.0, 2.0);
  ab.add(0.0, 0.0);
  ba.add(0.0, 0.0);
  const ErrorStats x = ab.stats("q", 0, 0), y = ba.stats("q", 0, 0);
  EXPECT_DOUBLE_EQ(x.max_rel, 2.0);  // |2 - (-2)| / 2
  EXPECT_DOUBLE_EQ(y.max_rel, 2.0);
  EXPECT_DOUBLE_EQ(x.mean_rel, 1.0);  // (2 + 0) / 2
  EXPECT_DOUBLE_EQ(x.median_rel, 0.0);
}

TEST(ErrorStats, NonFiniteValuesAreCountedNotSummarized) {
  ErrorAccumulator acc;
  acc.add(1.0, std::numeric_limits<double>::quiet_NaN());
  acc.add(std::numeric_limits<double>::infinity(), 1.0);
  acc.add(1.0, 1.5);
  const ErrorStats s = acc.stats("q", 0, 0);
  EXPECT_EQ(s.nonfinite, 2);
  EXPECT_EQ(s.elements, 1);
  EXPECT_DOUBLE_EQ(s.max_abs, 0.5);
}

TEST(ErrorStats, DifferenceGivenAtHigherPrecisionIsKept) {
  // 1 and 1 + 1e-80 are equal as doubles; the exact difference must survive.
  ErrorAccumulator acc;
  acc.add(1.0, 1.0, 1e-80);
  const ErrorStats s = acc.stats("q", 0, 257);
  EXPECT_DOUBLE_EQ(s.max_abs, 1e-80);
  EXPECT_DOUBLE_EQ(s.max_rel, 1e-80);
}

TEST(ErrorStats, EmptyAndAddingAfterStats) {
  ErrorAccumulator acc;
  const ErrorStats empty = acc.stats("q", 0, 0);
  EXPECT_EQ(empty.elements, 0);
  EXPECT_DOUBLE_EQ(empty.max_abs, 0.0);
  acc.add(0.0, 3.0);
  acc.add(0.0, 1.0);
  EXPECT_DOUBLE_EQ(acc.stats("q", 0, 0).median_abs, 1.0);
  acc.add(0.0, 2.0);
  const ErrorStats s = acc.stats("q", 0, 0);
  EXPECT_EQ(s.elements, 3);
  EXPECT_DOUBLE_EQ(s.median_abs, 2.0);
  EXPECT_DOUBLE_EQ(s.mean_abs, 2.0);
}

TEST(ErrorStats, Json) {
  ErrorAccumulator acc;
  acc.add(1.0, 2.0);
  const nlohmann::json j = acc.stats("gradient of param 'W'", 1e-9, 257);
  EXPECT_EQ(j.at("quantity"), "gradient of param 'W'");
  EXPECT_EQ(j.at("elements"), 1);
  EXPECT_DOUBLE_EQ(j.at("abs").at("p99").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j.at("rel").at("max").get<double>(), 0.5);
  EXPECT_EQ(j.at("bits"), 257);
  EXPECT_EQ(j.size(), 7u);
}

}  // namespace
}  // namespace lnv::report
