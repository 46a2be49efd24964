// What a test hears from a lnv::ProgressFn, and the rules every step report keeps.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lnv::test {

// One report of a ProgressFn.
struct Step {
  std::string phase, unit;
  uint64_t done, total;
};

// The steps in the order first heard; each counted one moves forward and ends at its total.
inline std::vector<std::string> check_steps(const std::vector<Step>& heard) {
  std::vector<std::string> order;
  std::map<std::string, Step> last;
  for (const Step& s : heard) {
    if (order.empty() || order.back() != s.phase) {
      EXPECT_EQ(std::count(order.begin(), order.end(), s.phase), 0) << s.phase << " heard again";
      order.push_back(s.phase);
    } else {
      EXPECT_GE(s.done, last[s.phase].done) << s.phase;
      EXPECT_EQ(s.total, last[s.phase].total) << s.phase;
    }
    EXPECT_LE(s.done, s.total) << s.phase;
    last[s.phase] = s;
  }
  for (const auto& [phase, s] : last) EXPECT_EQ(s.done, s.total) << phase << " did not end";
  return order;
}

}  // namespace lnv::test
