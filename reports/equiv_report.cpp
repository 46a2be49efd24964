#include "reports/equiv_report.h"

#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "reports/check_report.h"

namespace lnv::report {

std::string_view equiv_outcome_name(Outcome o) {
  switch (o) {
    case Outcome::holds: return "equal";
    case Outcome::fails: return "different";
    case Outcome::inconclusive: return "inconclusive";
  }
  return "?";
}

Outcome EquivReport::outcome() const {
  Outcome o = Outcome::holds;
  for (const EquivQuantity& q : quantities) o = worse(o, q.outcome);
  return o;
}

size_t EquivReport::count(Outcome o) const {
  size_t n = 0;
  for (const EquivQuantity& q : quantities) n += q.outcome == o;
  return n;
}

void to_json(nlohmann::json& j, const WorstElement& w) {
  j = {{"trial", w.trial}, {"seed", w.seed}, {"element", w.element},
       {"index", w.index}, {"a", w.a},       {"b", w.b}};
}

void to_json(nlohmann::json& j, const EquivQuantity& q) {
  j = {{"quantity", q.stats.quantity},
       {"shape", q.shape},
       {"outcome", equiv_outcome_name(q.outcome)},
       {"detail", q.detail},
       {"up_to_weight_storage", q.up_to_weight_storage},
       {"storage_bound", q.storage_bound},
       {"stats", q.stats},
       {"worst", nullptr}};
  if (q.worst) j["worst"] = *q.worst;
}

void to_json(nlohmann::json& j, const EquivReport& r) {
  j = {{"format", "lnverify.equiv"},
       {"version", 1},
       {"a", r.a},
       {"b", r.b},
       {"mode", mode_name(r.mode)},
       {"bits", r.bits},
       {"trials", r.trials},
       {"seed", r.seed},
       {"grad", r.grad},
       {"weight_bits", r.weight_bits},
       {"dropouts", r.dropouts},
       {"outcome", equiv_outcome_name(r.outcome())},
       {"counts",
        {{"equal", r.count(Outcome::holds)},
         {"different", r.count(Outcome::fails)},
         {"inconclusive", r.count(Outcome::inconclusive)}}},
       {"quantities", r.quantities}};
}

namespace {
std::string sci(double v, const char* fmt = "%.3g") {
  char buf[32];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}
}  // namespace

std::string to_text(const EquivReport& r) {
  std::ostringstream os;
  os << "equiv " << r.a << " " << r.b << "  mode " << mode_name(r.mode) << "  " << r.bits
     << " bits  " << r.trials << " trials  seed " << r.seed << "\n"
     << "  weight storage allowance: " << r.weight_storage << "\n";
  for (const EquivQuantity& q : r.quantities) {
    const ErrorStats& s = q.stats;
    os << "  " << equiv_outcome_name(q.outcome) << "  " << s.quantity << "  max abs "
       << sci(s.max_abs) << " rel " << sci(s.max_rel) << ", p99 abs " << sci(s.p99_abs)
       << " (bound " << sci(s.bound) << ", " << s.bits << " bits)\n";
    if ((q.outcome != Outcome::holds || q.up_to_weight_storage) && !q.detail.empty())
      os << "      " << q.detail << "\n";
    if (q.worst) {
      const WorstElement& w = *q.worst;
      os << "      worst on trial " << w.trial << " (run seed " << w.seed << "): element "
         << to_string(w.index) << " A " << w.a << " B " << w.b << "; `--seed " << w.seed
         << " --trials 1` replays this trial\n";
    }
  }
  os << "result: " << equiv_outcome_name(r.outcome()) << " (" << r.count(Outcome::holds)
     << " equal, " << r.count(Outcome::fails) << " different, "
     << r.count(Outcome::inconclusive) << " inconclusive)\n";
  return os.str();
}

std::string to_markdown(const EquivReport& r) {
  std::ostringstream os;
  os << "Exact equivalence of " << markdown_cell(r.a) << " and " << markdown_cell(r.b) << ": "
     << mode_name(r.mode) << " mode, " << r.bits << "-bit MPFR, " << r.trials << " trials, seed "
     << r.seed << (r.grad ? ", input gradients compared" : "") << "; weight storage allowance "
     << markdown_cell(r.weight_storage) << ".\n\n"
     << "| quantity | outcome | elements | abs max | abs mean | abs median | abs p99 | rel max "
        "| rel mean | rel median | rel p99 | bound | bits |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const EquivQuantity& q : r.quantities) {
    const ErrorStats& s = q.stats;
    os << "| " << markdown_cell(s.quantity) << " | " << equiv_outcome_name(q.outcome)
       << (q.up_to_weight_storage ? " (up to weight storage)" : "") << " | " << s.elements
       << " | " << sci(s.max_abs) << " | " << sci(s.mean_abs) << " | " << sci(s.median_abs)
       << " | " << sci(s.p99_abs) << " | " << sci(s.max_rel) << " | " << sci(s.mean_rel) << " | "
       << sci(s.median_rel) << " | " << sci(s.p99_rel) << " | " << sci(s.bound) << " | " << s.bits
       << " |\n";
  }
  for (const EquivQuantity& q : r.quantities)
    if (q.worst)
      os << "\n" << markdown_cell(q.stats.quantity) << ": worst on trial " << q.worst->trial
         << " (run seed " << q.worst->seed << "), element " << to_string(q.worst->index) << ": A "
         << sci(q.worst->a, "%.17g") << ", B " << sci(q.worst->b, "%.17g") << ".\n";
  os << "\n**Result: " << equiv_outcome_name(r.outcome()) << "** (" << r.count(Outcome::holds)
     << " equal, " << r.count(Outcome::fails) << " different, "
     << r.count(Outcome::inconclusive) << " inconclusive)\n";
  return os.str();
}

}  // namespace lnv::report
