#include "checkers/campaign.h"

#include <exception>

namespace lnv::check {

CaseOutcome check_case(const Graph& g, const CheckOptions& base, const std::vector<Mode>& modes,
                       const Detector& detect) {
  CaseOutcome out;
  for (Mode m : modes) {
    CheckOptions opt = base;
    opt.mode = m;
    try {
      out.reports.push_back(check_model(g, opt, detect));
      out.outcome = report::worse(out.outcome, out.reports.back().outcome());
    } catch (const std::exception& e) {
      out.outcome = Outcome::fails;
      out.error = std::string(mode_name(m)) + ": " + e.what();
      return out;
    }
  }
  return out;
}

Shrunk shrink_case(const rc::Shrinkable<Graph>& failing,
                   const std::function<CaseOutcome(const Graph&)>& check, int max_attempts) {
  rc::Shrinkable<Graph> current = failing;
  Shrunk s{current.value(), check(current.value()), 0, 0};
  for (bool progress = true; progress && s.attempts < max_attempts;) {
    progress = false;
    auto shrinks = current.shrinks();
    while (auto next = shrinks.next()) {
      if (++s.attempts > max_attempts) break;
      Graph candidate = next->value();
      CaseOutcome o = check(candidate);
      if (o.outcome == Outcome::fails) {
        current = *next;
        s.graph = std::move(candidate);
        s.outcome = std::move(o);
        ++s.steps;
        progress = true;
        break;
      }
    }
  }
  return s;
}

}  // namespace lnv::check
