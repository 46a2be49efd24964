// Checking generated graphs in bulk: one case in several modes, and greedy shrinking of a
// failing case to a small counterexample. Shared by `lnverify fuzz`, the teeth test and
// the throughput benchmark.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <rapidcheck/Shrinkable.h>

#include "checkers/equivalence.h"
#include "core/graph.h"
#include "core/mode.h"

namespace lnv::check {

struct CaseOutcome {
  Outcome outcome = Outcome::holds;
  std::vector<report::CheckReport> reports;  // one per mode checked
  std::string error;  // what the analysis, rewrite or evaluators threw (counts as fails)
};

// Runs check_model on g in each of `modes` (base.mode is ignored). An exception from the
// code under test is a failure of the case, reported in `error`.
CaseOutcome check_case(const Graph& g, const CheckOptions& base, const std::vector<Mode>& modes,
                       const Detector& detect = real_detector());

struct Shrunk {
  Graph graph;
  CaseOutcome outcome;
  int steps = 0;     // successful shrinks taken
  int attempts = 0;  // candidate shrinks checked
};

// Greedy shrinking: from a failing case, repeatedly move to the first shrink for which
// `check` still fails, until none does or `max_attempts` candidates were checked.
Shrunk shrink_case(const rc::Shrinkable<Graph>& failing,
                   const std::function<CaseOutcome(const Graph&)>& check, int max_attempts);

}  // namespace lnv::check
